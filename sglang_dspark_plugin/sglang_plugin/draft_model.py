"""The dspark arm's draft model: sglang's ``DSparkDraftModel`` built from a draft config rewritten to
what the arm serves (the query layout, the census's Markov head, a zero rank-1 head where the checkpoint
has none), and the parse hook that makes sglang's own parse of that config agree."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from sglang.srt.models.dspark import DSparkDraftModel
from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config

from ..errors import InvalidCheckpointError
from ..harvest import ENV_VAR


def _cfg_get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _cfg_set(config: Any, key: str, value: Any) -> None:
    if isinstance(config, dict):
        config[key] = value
    else:
        setattr(config, key, value)


def _set_markov(config: Any, rank: int, head_type: str) -> None:
    """Write the Markov rank and head type into every spelling sglang reads (and the model's own)."""
    # sglang's parse reads the prefixed key, then dspark_config (0.5.23 merges dflash_config under it),
    # then text_config, then the top level; the model builds its head from the top level only.
    _cfg_set(config, "markov_rank", rank)
    _cfg_set(config, "markov_head_type", head_type)
    if _cfg_get(config, "dspark_markov_rank") is not None:
        _cfg_set(config, "dspark_markov_rank", rank)
        _cfg_set(config, "dspark_markov_head_type", head_type)
    for key in ("dspark_config", "dflash_config"):
        nested = _cfg_get(config, key)
        if isinstance(nested, dict) and ("markov_rank" in nested or "markov_head_type" in nested):
            _cfg_set(config, key, {**nested, "markov_rank": rank, "markov_head_type": head_type})
    text = _cfg_get(config, "text_config")
    if text is not None and text is not config and _cfg_get(text, "markov_rank") is not None:
        _cfg_set(text, "markov_rank", rank)
        _cfg_set(text, "markov_head_type", head_type)


def _declared_head_type(config: Any) -> str | None:
    for holder in (config, _cfg_get(config, "dspark_config"), _cfg_get(config, "dflash_config")):
        if holder is not None and _cfg_get(holder, "markov_head_type") is not None:
            return str(_cfg_get(holder, "markov_head_type")).lower()
    value = _cfg_get(config, "dspark_markov_head_type")
    return None if value is None else str(value).lower()


def prepare_dspark_arm_config(
    config: Any,
    *,
    markov_rank: int | None = None,
    mask_token_id: int | None = None,
    markov_head_type: str | None = None,
    sample_from_anchor: bool = True,
) -> bool:
    """Make a draft ``hf_config`` say what the DSpark worker serves; True when it has no Markov head.

    ``markov_rank`` is the census's reading (it also knows spellings sglang does not read, such as
    ``dflash_config.markov_rank``); ``None`` keeps sglang's own reading. Sets ``sample_from_anchor =
    True`` (anchor-first, the shifted convention); a checkpoint without a Markov head gets a rank-1
    vanilla head, zeroed by ``HarvestDSparkDraftModel``; ``mask_token_id`` comes from the census when
    sglang's DSpark lookup finds none. Raises ``InvalidCheckpointError`` when sglang cannot parse it.
    ``sample_from_anchor=False`` is the mask-fill layout (a mask-fill drafter with a Markov head,
    ``layout.MASK_FILL_DSPARK``): whatever spelling the checkpoint declared it in, sglang reads the top
    level only.
    """
    _cfg_set(config, "sample_from_anchor", bool(sample_from_anchor))
    try:
        parsed = parse_dspark_draft_config(draft_hf_config=config)
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read this draft config as a DSpark draft: {exc} "
            "(fix the Markov-head keys in the draft's config.json, or, if the drafter was trained with "
            f"the DFlash strategy, serve it with {ENV_VAR}=dflash).",
            where="config.json",
        ) from exc
    rank = parsed.markov_rank if markov_rank is None else int(markov_rank)
    no_markov = rank == 0
    if no_markov:
        _set_markov(config, 1, "vanilla")
        # A confidence head (non-static ragged verify) must not read Markov features that are all zero.
        if _cfg_get(config, "confidence_head_with_markov") is None:
            _cfg_set(config, "confidence_head_with_markov", False)
    elif rank != parsed.markov_rank or _cfg_get(config, "markov_rank") != rank:
        # The model builds its head from the top-level keys only, wherever sglang's parser found them.
        head_type = parsed.markov_head_type or _declared_head_type(config) or markov_head_type
        if head_type is None:
            raise InvalidCheckpointError(
                f"the draft has a rank-{rank} Markov head but config.json names no markov_head_type; "
                'add "markov_head_type": "vanilla" | "gated" | "rnn" (the head it was trained with).',
                where="config.json: markov_head_type",
            )
        _set_markov(config, rank, head_type)
    if parsed.mask_token_id is None and mask_token_id is not None:
        _cfg_set(config, "mask_token_id", int(mask_token_id))
    check = parse_dspark_draft_config(draft_hf_config=config)
    if not check.require_markov() or (not no_markov and check.markov_rank != rank):
        raise InvalidCheckpointError(
            f"could not make sglang read this draft's Markov head (census rank {rank}, sglang reads "
            f"{check.markov_rank}); report the config.json keys holding markov_rank.",
            where="config.json",
        )
    return no_markov


def with_markov_head(result: Any, head: tuple[int, str]) -> Any:
    """sglang's parse result reporting the plan's Markov head ``(rank, head type)``; ``None`` when it
    already does (the parse hook then keeps sglang's own result)."""
    if (result.markov_rank, result.markov_head_type) == head:
        return None
    # sglang's parse result is a frozen msgspec struct (msgspec: sglang's dependency, not ours).
    structs: Any = importlib.import_module("msgspec.structs")
    return structs.replace(result, markov_rank=head[0], markov_head_type=head[1])


@dataclass(frozen=True)
class DraftRoute:
    """What ``draft_routes.dspark_draft_route`` tells the model it builds (``None``: sglang's reading)."""

    markov_rank: int | None
    mask_token_id: int | None
    markov_head_type: str | None = None
    sample_from_anchor: bool = True


class HarvestDSparkDraftModel(DSparkDraftModel):
    """sglang's dense DSpark draft model in the route's query layout (anchor-first unless the route says
    mask-fill), with a zero Markov head when the checkpoint has none."""

    _route: ClassVar[DraftRoute | None] = None

    def __init__(self, config: Any, quant_config: Any = None, prefix: str = "") -> None:
        route = type(self)._route
        route = route if route is not None else DraftRoute(None, None)
        no_markov = prepare_dspark_arm_config(
            config,
            markov_rank=route.markov_rank,
            mask_token_id=route.mask_token_id,
            markov_head_type=route.markov_head_type,
            sample_from_anchor=route.sample_from_anchor,
        )
        super().__init__(config=config, quant_config=quant_config, prefix=prefix)
        self.dspark_harvest_zero_markov = no_markov
        self._zero_markov_head()

    def load_weights(self, weights: Any) -> Any:
        """sglang's loader, then the zero head again (a loader may re-initialise parameters)."""
        out = super().load_weights(weights)
        self._zero_markov_head()
        return out

    def post_load_weights(self) -> None:
        """Called by sglang's loaders that bypass ``load_weights`` (dummy, sharded state, remote): keep
        the head zero there too."""
        parent = getattr(super(), "post_load_weights", None)
        if parent is not None:
            parent()
        self._zero_markov_head()

    def _zero_markov_head(self) -> None:
        if not self.dspark_harvest_zero_markov or self.markov_head is None:
            return
        with torch.no_grad():
            for p in self.markov_head.parameters():
                p.zero_()


__all__ = [
    "DraftRoute",
    "HarvestDSparkDraftModel",
    "prepare_dspark_arm_config",
    "with_markov_head",
]
