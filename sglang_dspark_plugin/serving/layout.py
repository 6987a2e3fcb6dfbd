"""The arms (sglang-free): which sglang builtin serves a resolved draft, in which DSpark query layout,
through which sglang worker. ``ARMS`` is the one table (each ``Arm`` says what it drafts); ``layout_for``
the one rule choosing among them. Which releases have which arm is the release table's
(``releases.Release.mask_fill_dspark``). Either way the harvest (``DsparkHarvest``) fixes the rows and
the window; the arm only names the sglang worker that drafts them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..census.architectures import DSPARK_ARCHITECTURES
from ..census.draft_config import DflashCfg
from ..harvest import DsparkHarvest
from ..releases import DFLASH, DSPARK


@dataclass(frozen=True)
class Arm:
    """One way the plugin serves a draft: the one record its name, builtin, DSPARK query layout
    (``sample_from_anchor``; None: DFLASH), the sglang worker its worker subclasses and its description
    all come from (the topology table, the verdicts, the glue's worker table and factory)."""

    name: str  # "dflash", "dspark", "mask-fill DSpark": the topology table's arm
    builtin: str  # the sglang builtin it resolves to
    sample_from_anchor: bool | None
    parent_worker: str  # the sglang worker class the plugin's worker subclasses
    description: str

    @property
    def mask_fill_dspark(self) -> bool:
        """DSPARK drafting mask-fill rows (``sample_from_anchor`` false)."""
        return self.builtin == DSPARK and self.sample_from_anchor is False

    @property
    def keeps_markov_head(self) -> bool:
        """Whether its builtin builds the draft's Markov head: DSPARK does, DFLASH has none (a head
        served through it would be dropped, which is why ``layout_for`` serves such a draft mask-fill
        through DSPARK)."""
        return self.builtin == DSPARK

    def manifest_fields(self) -> dict[str, bool]:
        """``{"sample_from_anchor": ...}`` for DSPARK, nothing for DFLASH."""
        return {} if self.sample_from_anchor is None else {"sample_from_anchor": self.sample_from_anchor}

    def describe(self) -> str:
        """``DFLASH``, ``DSPARK`` or ``DSPARK, sample_from_anchor=false``."""
        return f"{self.builtin}, sample_from_anchor=false" if self.mask_fill_dspark else self.builtin


MASK_FILL = Arm(
    "dflash",
    DFLASH,
    None,
    "DFlashWorkerV2",
    "sglang's DFLASH worker, mask-fill: rows 1..b-1, b-1 drafts, verify window b",
)
SHIFTED = Arm(
    "dspark",
    DSPARK,
    True,
    "DSparkWorkerV2",
    "sglang's DSPARK worker, anchor-first: rows 0..b-1, b drafts, verify window b+1",
)
MASK_FILL_DSPARK = Arm(
    "mask-fill DSpark",
    DSPARK,
    False,
    "DSparkWorkerV2",
    "sglang's DSPARK worker with sample_from_anchor=false: the anchor row dropped, rows 1..b-1 the b-1 "
    "drafts (the Markov chain starts at the anchor), verify window b",
)
ARMS: tuple[Arm, ...] = (MASK_FILL, SHIFTED, MASK_FILL_DSPARK)
"""Every arm, in the topology table's order."""
BUILTINS: tuple[str, ...] = tuple(dict.fromkeys(a.builtin for a in ARMS))
"""The sglang builtins the plugin resolves to: ``("DFLASH", "DSPARK")``."""


def architectures_of(cfg: DflashCfg) -> tuple[str, ...]:
    """The draft's ``config.json`` architectures, the names sglang's loader resolves."""
    names = cfg.raw.get("architectures") or ([cfg.architecture] if cfg.architecture else [])
    return tuple(str(n) for n in names)


def layout_for(harvest: DsparkHarvest, cfg: DflashCfg) -> Arm:
    """The arm that serves ``harvest`` for the census ``cfg``: a DSpark-named mask-fill draft with a
    Markov head goes to the mask-fill arm that keeps it."""
    if harvest is DsparkHarvest.DSPARK:
        return SHIFTED
    dspark_named = any(a in DSPARK_ARCHITECTURES for a in architectures_of(cfg))
    if dspark_named and cfg.markov_head is not None and not MASK_FILL.keeps_markov_head:
        return MASK_FILL_DSPARK
    return MASK_FILL


__all__ = [
    "ARMS",
    "Arm",
    "BUILTINS",
    "DFLASH",
    "DSPARK",
    "MASK_FILL",
    "MASK_FILL_DSPARK",
    "SHIFTED",
    "architectures_of",
    "layout_for",
]
