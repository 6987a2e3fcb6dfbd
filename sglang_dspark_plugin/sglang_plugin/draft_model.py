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
from ..harvest import ENV_VAR, DsparkHarvest
from ..tensor_headers import markov_head, tensor_headers
from .hooks import same_path


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


def served_markov_head(cfg: Any) -> tuple[int, str | None]:
    """The Markov head the dspark arm serves for a census ``cfg``: ``(rank, head type)``.

    The rank is the config's (the census reads spellings sglang does not, such as
    ``dflash_config.markov_rank`` on 0.5.17, and checks them against the tensor shapes); a config
    that declares none takes the rank of the ``markov_head.*`` tensors (``markov_w1`` is [vocab,
    rank]) and, unless declared, their head type; else sglang's own parse of the raw config decides.
    The head type is the config's declaration (None when it has none). Rank 0 means no Markov head:
    the zero rank-1 head is served.
    """
    declared = _declared_head_type(cfg.raw)
    if cfg.markov_rank is not None:
        return int(cfg.markov_rank), declared
    found = markov_head(tensor_headers(cfg.path))
    if found is not None:
        return found.rank, declared or found.head_type
    # Without a path the parse hook (which calls this) leaves the parse alone: no recursion even when
    # config.json records the served draft's own "_name_or_path".
    raw = {k: v for k, v in cfg.raw.items() if k != "_name_or_path"}
    try:
        return int(parse_dspark_draft_config(draft_hf_config=raw).markov_rank), declared
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read {cfg.path}/config.json as a DSpark draft: {exc}", where="config.json"
        ) from exc


def served_markov_rank(cfg: Any) -> int:
    """The rank of ``served_markov_head``: 0 when the checkpoint has no Markov head."""
    return served_markov_head(cfg)[0]


def _served_markov(config: Any) -> tuple[int, str] | None:
    """(rank, head type) the dspark arm serves for this draft config, or None when it is not ours."""
    from .resolution import ALGORITHM, published_server_args, read_arg, served

    name = _cfg_get(config, "_name_or_path")
    if not name:
        return None
    from .builtin import marker_of

    server_args = published_server_args()
    if server_args is None:
        return None
    # The plugin's server: the marker of the rewrite to the builtin, or the custom algorithm's name
    # (fallback route). A plain DSPARK launch has neither and keeps sglang's refusal of markov_rank 0.
    if marker_of(server_args) is None and (
        str(read_arg(server_args, "speculative_algorithm") or "").upper() != ALGORITHM
    ):
        return None
    # The path first: only the served draft's own config may resolve (census) here.
    if not same_path(name, read_arg(server_args, "speculative_draft_model_path")):
        return None
    s = served(server_args)
    if s.resolution.harvest is not DsparkHarvest.DSPARK:
        return None
    rank, served_type = served_markov_head(s.cfg)
    if rank == 0:
        return 1, "vanilla"  # the zero head of HarvestDSparkDraftModel
    head_type = _declared_head_type(config) or served_type
    return None if head_type is None else (rank, head_type)


def _served_markov_after_parse(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook: sglang's parse reports the Markov head the dspark arm serves for its draft.

    Only for the draft of a ``DSPARK_HARVEST`` server in the dspark arm (matched by path); any other
    config, algorithm or arm gets sglang's own result (``None`` = unchanged). The head it reports is the
    one ``HarvestDSparkDraftModel`` builds: rank 1 zeroed when the checkpoint has none, else the
    census's rank (spellings such as ``dflash_config.markov_rank`` that 0.5.17 does not read).
    """
    config = kwargs.get("draft_hf_config", args[0] if args else None)
    wanted = _served_markov(config)
    if wanted is None or (result.markov_rank, result.markov_head_type) == wanted:
        return None
    # sglang's parse result is a frozen msgspec struct (msgspec: sglang's dependency, not ours).
    structs: Any = importlib.import_module("msgspec.structs")
    return structs.replace(result, markov_rank=wanted[0], markov_head_type=wanted[1])


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
    "served_markov_head",
    "served_markov_rank",
]
