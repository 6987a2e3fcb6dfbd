"""The dspark arm's draft model: sglang's ``DSparkDraftModel`` built from a draft config rewritten to
what the plan's route serves (``serving.route``: the query layout, the census's Markov head, the zero
rank-1 head where the checkpoint has none), and the parse answer that makes sglang's own parse of that
config agree."""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

import torch
from sglang.srt.models.dspark import DSparkDraftModel
from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config

from ..errors import InvalidCheckpointError
from ..harvest import ENV_VAR
from ..serving.route import DraftRoute


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


def prepare_dspark_arm_config(config: Any, route: DraftRoute) -> bool:
    """Make a draft ``hf_config`` say what the plan's route serves; True when it builds the zero head.

    Sets ``sample_from_anchor`` (sglang reads the top level only, whatever spelling the checkpoint
    declared it in), the route's Markov head in every spelling sglang reads (a checkpoint without one
    gets the zero rank-1 head, zeroed by ``HarvestDSparkDraftModel``) and the route's mask token where
    sglang's DSpark lookup finds none. Raises ``InvalidCheckpointError`` when sglang cannot parse it.
    """
    head = route.head
    if head is None:  # the plan hands the plugin's model a head always (``serving.route``)
        raise InvalidCheckpointError(
            "the draft route names no Markov head for the dspark arm's model; pass sglang's resolved "
            "server args on unchanged (the plan decides the head).",
            where="draft route",
        )
    _cfg_set(config, "sample_from_anchor", bool(route.sample_from_anchor))
    try:
        parsed = parse_dspark_draft_config(draft_hf_config=config)
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read this draft config as a DSpark draft: {exc} "
            "(fix the Markov-head keys in the draft's config.json, or, if the drafter was trained with "
            f"the DFlash strategy, serve it with {ENV_VAR}=dflash).",
            where="config.json",
        ) from exc
    top_level = _cfg_get(config, "markov_rank")
    if head.zero or (parsed.markov_rank, parsed.markov_head_type) != head.parsed or top_level != head.rank:
        # The model builds its head from the top-level keys only, wherever sglang's parser found them.
        _set_markov(config, head.rank, head.head_type)
    if head.zero and _cfg_get(config, "confidence_head_with_markov") is None:
        # A confidence head (non-static ragged verify) must not read Markov features that are all zero.
        _cfg_set(config, "confidence_head_with_markov", False)
    if parsed.mask_token_id is None and route.mask_token_id is not None:
        _cfg_set(config, "mask_token_id", int(route.mask_token_id))
    check = parse_dspark_draft_config(draft_hf_config=config)
    if not check.require_markov() or check.markov_rank != head.rank:
        raise InvalidCheckpointError(
            f"could not make sglang read this draft's Markov head (census rank {head.rank}, sglang reads "
            f"{check.markov_rank}); report the config.json keys holding markov_rank.",
            where="config.json",
        )
    return head.zero


def with_markov_head(result: Any, head: tuple[int, str]) -> Any:
    """sglang's parse result reporting the plan's Markov head ``(rank, head type)``; ``None`` when it
    already does (the parse hook then keeps sglang's own result)."""
    if (result.markov_rank, result.markov_head_type) == head:
        return None
    # sglang's parse result is a frozen msgspec struct (msgspec: sglang's dependency, not ours).
    structs: Any = importlib.import_module("msgspec.structs")
    return structs.replace(result, markov_rank=head[0], markov_head_type=head[1])


class HarvestDSparkDraftModel(DSparkDraftModel):
    """sglang's dense DSpark draft model in the route's query layout (anchor-first unless the route says
    mask-fill), with a zero Markov head when the checkpoint has none; built inside ``draft_route`` only."""

    _route: ClassVar[DraftRoute | None] = None

    def __init__(self, config: Any, quant_config: Any = None, prefix: str = "") -> None:
        no_markov = prepare_dspark_arm_config(config, type(self)._route or DraftRoute(None))
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
    "HarvestDSparkDraftModel",
    "prepare_dspark_arm_config",
    "with_markov_head",
]
