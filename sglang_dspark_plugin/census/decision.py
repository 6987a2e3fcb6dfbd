"""The tier rule: the highest tier that has votes decides, and its votes must agree."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..util.reprs import short
from .draft_config import TIER_EXPLICIT, Signal, votes


@dataclass(frozen=True)
class Decision:
    """What the evidence decides about the training strategy."""

    tier: int | None  # the deciding tier; None: no vote at all (the historical default, mask-fill)
    vote: str | None  # its unanimous vote; None with no vote or on a conflict
    conflict: str | None = None  # why the deciding tier's votes disagree; refused unless overridden


CONFLICT_FIX = (
    "Fix the checkpoint's config, or set MEMRA_DSPARK_HARVEST=dflash (mask-fill) or "
    "MEMRA_DSPARK_HARVEST=dspark (shifted) to the strategy it was trained with."
)
"""The fix a conflict names (``declare`` replaces it: a declaration cannot rest on a launch's override)."""


def decide_evidence(evidence: Sequence[Signal]) -> Decision:
    """The decision of ``evidence``: tier 1 (explicit) over tier 2 (structural); no vote, no tier."""
    voting = votes(evidence)
    if not voting:
        return Decision(None, None)
    tier = min(s.tier for s in voting)
    deciding = votes(voting, tier)
    cast = {s.vote for s in deciding}
    if len(cast) == 1:
        return Decision(tier, cast.pop())
    listed = "; ".join(f"{s.signal} = {short(s.value)} -> {s.vote}" for s in deciding)
    kind = "explicit declarations" if tier == TIER_EXPLICIT else "structural signals"
    return Decision(
        tier,
        None,
        f"the checkpoint's {kind} (tier {tier}) disagree about its training strategy: {listed}. "
        + CONFLICT_FIX,
    )


__all__ = ["CONFLICT_FIX", "Decision", "decide_evidence"]
