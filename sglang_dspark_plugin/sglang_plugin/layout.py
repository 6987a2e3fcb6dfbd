"""Which sglang builtin serves a resolved draft, and in which DSpark query layout.

* shifted (dspark harvest): DSPARK, anchor-first (``sample_from_anchor`` true): the block
  ``[anchor, MASK x (b-1)]`` is the query, row k's output is draft k+1, b drafts, verify window b+1.
* mask-fill (dflash harvest): DFLASH, rows 1..b-1, b-1 drafts, verify window b.
* mask-fill, with a DSpark architecture and a Markov head: DSPARK with ``sample_from_anchor`` false,
  sglang 0.5.23's mask-fill layout: the query is ``[anchor, MASK x (b-1)]`` too, the anchor row's
  output is dropped, rows 1..b-1 are the b-1 drafts (the Markov chain starts at the anchor), verify
  window b. DFLASH has no Markov head and would drop a trained part of the model; sglang 0.5.17's
  DSPARK has no such layout, so there the drafter is refused.

Either way the harvest (``DsparkHarvest``) fixes the rows and the window; the layout only names the
sglang worker that drafts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..architectures import DSPARK_ARCHITECTURES
from ..errors import UnsupportedCheckpointError
from ..harvest import DsparkHarvest
from ..tensor_headers import markov_head, tensor_headers

DFLASH, DSPARK = "DFLASH", "DSPARK"


@dataclass(frozen=True)
class Layout:
    """The builtin a draft is served as; ``sample_from_anchor`` is DSPARK's query layout (None: DFLASH)."""

    builtin: str
    sample_from_anchor: bool | None

    @property
    def mask_fill_dspark(self) -> bool:
        """DSPARK drafting mask-fill rows (``sample_from_anchor`` false)."""
        return self.builtin == DSPARK and self.sample_from_anchor is False

    def manifest_fields(self) -> dict[str, bool]:
        """``{"sample_from_anchor": ...}`` for DSPARK, nothing for DFLASH."""
        return {} if self.sample_from_anchor is None else {"sample_from_anchor": self.sample_from_anchor}

    def describe(self) -> str:
        """``DFLASH``, ``DSPARK`` or ``DSPARK, sample_from_anchor=false``."""
        return f"{self.builtin}, sample_from_anchor=false" if self.mask_fill_dspark else self.builtin


SHIFTED = Layout(DSPARK, True)
MASK_FILL = Layout(DFLASH, None)
MASK_FILL_DSPARK = Layout(DSPARK, False)


def markov_rank_of(cfg: Any) -> int:
    """The draft's Markov rank: the census's (every spelling, checked against the tensors), else the
    rank of its ``markov_head.*`` tensors; 0 without a Markov head."""
    rank = getattr(cfg, "markov_rank", None)
    if rank is not None:
        return int(rank)
    path = getattr(cfg, "path", None)
    found = markov_head(tensor_headers(path)) if path else None
    return 0 if found is None else int(found.rank)


def architectures_of(cfg: Any) -> tuple[str, ...]:
    """The draft's ``config.json`` architectures, the names sglang's loader resolves."""
    raw = getattr(cfg, "raw", None) or {}
    architecture = getattr(cfg, "architecture", None)
    names = raw.get("architectures") or ([architecture] if architecture else [])
    return tuple(str(n) for n in names)


def harvest_layout(harvest: DsparkHarvest) -> Layout:
    """The layout of a harvest's own builtin: SHIFTED (DSPARK) or MASK_FILL (DFLASH)."""
    return SHIFTED if harvest is DsparkHarvest.DSPARK else MASK_FILL


def layout_for(harvest: DsparkHarvest, cfg: Any) -> Layout:
    """The builtin and query layout that serve ``harvest`` for the census ``cfg``."""
    dspark_named = any(a in DSPARK_ARCHITECTURES for a in architectures_of(cfg))
    if harvest is DsparkHarvest.DFLASH and dspark_named and markov_rank_of(cfg) > 0:
        return MASK_FILL_DSPARK
    return harvest_layout(harvest)


def layout_of(served: Any) -> Layout:
    """``layout_for`` of a ``resolution.Served``."""
    return layout_for(served.resolution.harvest, served.cfg)


def sglang_has_mask_fill_dspark() -> bool:
    """Whether this sglang's DSPARK reads ``sample_from_anchor`` (0.5.23 does, 0.5.17 does not)."""
    from sglang.srt.speculative.dspark_components import dspark_config

    return hasattr(dspark_config, "get_dspark_sample_from_anchor")


def require_layout(served: Any) -> Layout:
    """The served layout; refuses a mask-fill DSpark drafter on a sglang without that layout."""
    layout = layout_of(served)
    if layout.mask_fill_dspark and not sglang_has_mask_fill_dspark():
        import sglang

        rank = markov_rank_of(served.cfg)
        raise UnsupportedCheckpointError(
            f"{served.cfg.path} is a mask-fill drafter (dflash harvest, {served.resolution.source}) with a "
            f"DSpark architecture and a rank-{rank} Markov head. sglang {sglang.__version__} cannot serve "
            "it: its DFLASH worker has no Markov head (it would drop a trained part of the model) and its "
            "DSPARK has no mask-fill layout. Use sglang 0.5.23 or later, whose DSPARK serves it with "
            "sample_from_anchor=false; or, if the drafter was trained shifted, set "
            "MEMRA_DSPARK_HARVEST=dspark.",
            where="sglang version",
        )
    return layout


__all__ = [
    "DFLASH",
    "DSPARK",
    "Layout",
    "MASK_FILL",
    "MASK_FILL_DSPARK",
    "SHIFTED",
    "architectures_of",
    "harvest_layout",
    "layout_for",
    "layout_of",
    "markov_rank_of",
    "require_layout",
    "sglang_has_mask_fill_dspark",
]
