"""Which sglang builtin serves a resolved draft, and in which DSpark query layout (sglang-free).

* shifted (dspark harvest): DSPARK, anchor-first (``sample_from_anchor`` true): the block
  ``[anchor, MASK x (b-1)]`` is the query, row k's output is draft k+1, b drafts, verify window b+1.
* mask-fill (dflash harvest): DFLASH, rows 1..b-1, b-1 drafts, verify window b.
* mask-fill, with a DSpark architecture and a Markov head: DSPARK with ``sample_from_anchor`` false,
  the mask-fill layout of sglang's DSPARK from 0.5.19: the anchor row's output is dropped, rows 1..b-1
  are the b-1 drafts (the Markov chain starts at the anchor), verify window b. DFLASH has no Markov head
  and would drop a trained part of the model; DSPARK before 0.5.19 (0.5.17, 0.5.18) has no such layout,
  so there the drafter is refused.

Either way the harvest (``DsparkHarvest``) fixes the rows and the window; the layout only names the
sglang worker that drafts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..census.architectures import DSPARK_ARCHITECTURES
from ..census.draft_config import DflashCfg
from ..harvest import DsparkHarvest
from .releases import DFLASH, DSPARK


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


def architectures_of(cfg: DflashCfg) -> tuple[str, ...]:
    """The draft's ``config.json`` architectures, the names sglang's loader resolves."""
    names = cfg.raw.get("architectures") or ([cfg.architecture] if cfg.architecture else [])
    return tuple(str(n) for n in names)


def layout_for(harvest: DsparkHarvest, cfg: DflashCfg) -> Layout:
    """The builtin and query layout that serve ``harvest`` for the census ``cfg``."""
    dspark_named = any(a in DSPARK_ARCHITECTURES for a in architectures_of(cfg))
    if harvest is DsparkHarvest.DFLASH and dspark_named and cfg.markov_head is not None:
        return MASK_FILL_DSPARK
    return SHIFTED if harvest is DsparkHarvest.DSPARK else MASK_FILL


__all__ = [
    "DFLASH",
    "DSPARK",
    "Layout",
    "MASK_FILL",
    "MASK_FILL_DSPARK",
    "SHIFTED",
    "architectures_of",
    "layout_for",
]
