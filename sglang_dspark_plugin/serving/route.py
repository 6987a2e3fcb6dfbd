"""The draft route: what the worker builds its draft as, decided by the plan (sglang-free).

The worker builds its sglang parent inside the route the plan hands it (``ServePlan.route``); the glue
(``sglang_plugin.draft_model.draft_route``) only translates it into a ``ModelRegistry`` swap:

* DFLASH: a dense DSpark-named drafter without a Markov head loads as sglang's ``DFlashDraftModel``
  (one backbone, the same weights); any other draft is sglang's own class.
* DSPARK: the dense DFlash-family names load as the plugin's DSpark draft model, built with the plan's
  Markov head (``ServedHead``, one form: a checkpoint without a head gets the zero head), mask token and
  query layout; a head bundled by the target's ``dspark_*`` keys is sglang's own class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..census.architectures import SGLANG_BUNDLED_DSPARK, SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..census.draft_config import DflashCfg
from ..census.markov import HEAD_KEY_SPELLINGS
from .layout import DSPARK, Arm

DFLASH_MODEL = "DFlashDraftModel"
"""sglang's DFlash draft class, which a DSpark-named mask-fill drafter without a head loads as."""
DSPARK_MODEL = "HarvestDSparkDraftModel"
"""The plugin's DSpark draft model (``sglang_plugin.draft_model``): sglang's dense DSpark, routed."""


@dataclass(frozen=True)
class ServedHead:
    """The Markov head DSPARK builds for the draft: its rank and type, and whether it is the zero head
    (the checkpoint has none: DSPARK needs one, so a rank-1 vanilla head is built and zeroed)."""

    rank: int
    head_type: str
    zero: bool = False

    @property
    def parsed(self) -> tuple[int, str]:
        """``(rank, head type)`` as sglang's draft-config parse reports it."""
        return self.rank, self.head_type


ZERO_HEAD = ServedHead(1, "vanilla", zero=True)
"""The head DSPARK serves for a shifted drafter without one: rank 1, zeroed after loading."""


@dataclass(frozen=True)
class DraftRoute:
    """What the worker's draft loads as: ``names`` of the draft's architectures load as ``loads_as``
    (``()``: sglang's own class); for DSPARK the head, mask token and query layout it is built with."""

    loads_as: str | None  # DFLASH_MODEL, DSPARK_MODEL; None: sglang's own class, nothing swapped
    names: tuple[str, ...] = ()
    head: ServedHead | None = None  # DSPARK: the head it builds (and sglang's parse reports)
    mask_token_id: int | None = None
    sample_from_anchor: bool | None = None


def config_value(config: Any, key: str) -> Any:
    """A key of a draft config held as a dict or as attributes (``None`` when absent)."""
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def set_config_value(config: Any, key: str, value: Any) -> None:
    if isinstance(config, dict):
        config[key] = value
    else:
        setattr(config, key, value)


def write_head(config: Any, head: ServedHead) -> None:
    """Write the head's rank and type into every spelling sglang's parse reads that the config holds
    (``census.markov.HEAD_KEY_SPELLINGS``, in sglang's order: the list the census and the engine read),
    and always into the top level the model builds its head from."""
    rank, head_type = head.parsed
    for section, pattern in HEAD_KEY_SPELLINGS:
        keys = {pattern.format(key="markov_rank"): rank, pattern.format(key="markov_head_type"): head_type}
        holder = config
        if section:
            holder = config_value(config, section[0])
            if holder is None or holder is config:
                continue
        if isinstance(holder, dict) and holder is not config:  # a nested dict: replaced whole
            if any(k in holder for k in keys):
                set_config_value(config, section[0], {**holder, **keys})
        elif (pattern == "{key}" and not section) or any(config_value(holder, k) is not None for k in keys):
            for k, v in keys.items():
                set_config_value(holder, k, v)


def rewrite_config(route: DraftRoute, config: Any, parsed_head: tuple[int, str], parsed_mask: Any) -> None:
    """Make a DSPARK draft config say what ``route`` serves, given what sglang's parse read from it
    (``parsed_head``: ``(rank, type)``; ``parsed_mask``: the mask token it found, or None): the route's
    head where the parse or the top level differs (the zero head always), no confidence features from
    a zero head, and the route's mask token where sglang's lookup finds none."""
    head = route.head
    assert head is not None  # the plan hands the dspark arm a head always (``route_for``)
    if head.zero or parsed_head != head.parsed or config_value(config, "markov_rank") != head.rank:
        write_head(config, head)
    if head.zero and config_value(config, "confidence_head_with_markov") is None:
        # A confidence head (non-static ragged verify) must not read Markov features that are all zero.
        set_config_value(config, "confidence_head_with_markov", False)
    if parsed_mask is None and route.mask_token_id is not None:
        set_config_value(config, "mask_token_id", int(route.mask_token_id))


def served_head(cfg: DflashCfg) -> ServedHead | None:
    """The head DSPARK builds for ``cfg``: the census's, or the zero head; ``None`` where the census
    knows no type (only a head the target's keys declare gets this far: sglang's reading stands)."""
    head = cfg.markov_head
    if head is None:
        return ZERO_HEAD
    return None if head.head_type is None else ServedHead(head.rank, head.head_type)


def route_for(layout: Arm, cfg: DflashCfg, architectures: tuple[str, ...]) -> DraftRoute:
    """The route of a draft of ``architectures`` (the classes sglang loads) served in ``layout``."""
    if layout.builtin != DSPARK:
        names = tuple(a for a in architectures if a in SGLANG_DENSE_DSPARK)
        return DraftRoute(DFLASH_MODEL if names else None, names)
    head = served_head(cfg)
    if any(a in SGLANG_BUNDLED_DSPARK.values() for a in architectures):
        return DraftRoute(None, (), head)  # sglang's own class for a head the target's keys declare
    names = tuple(a for a in architectures if a in SGLANG_DSPARK_ARM)
    return DraftRoute(DSPARK_MODEL, names, head, cfg.mask_token_id, layout.sample_from_anchor)


__all__ = [
    "DFLASH_MODEL",
    "DSPARK_MODEL",
    "DraftRoute",
    "ServedHead",
    "ZERO_HEAD",
    "route_for",
    "rewrite_config",
    "config_value",
    "set_config_value",
    "write_head",
    "served_head",
]
