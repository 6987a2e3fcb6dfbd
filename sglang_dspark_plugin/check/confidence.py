"""How sure ``check`` is: a paired comparison of the two harvests over the prompts, with an interval.

Both harvests decode the same prompts, so the prompts are the paired unit. The statistic is the
difference of the headline accept lengths (dspark minus dflash), each ``1 + accepted drafts / rounds``
summed over the prompts; its interval is a percentile bootstrap that resamples the prompts, keeping
each prompt's two runs together (a fixed seed, so a report is reproducible). It decides only when the
interval excludes zero and at least ``MIN_PROMPTS`` prompts were decoded: with fewer, a bootstrap
interval is too narrow to mean its stated confidence.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from ..harvest import DsparkHarvest

CONFIDENCE = 0.95
RESAMPLES = 2000
SEED = 0
MIN_PROMPTS = 5
METHOD = "accept length dspark - dflash; percentile bootstrap over prompts, each prompt's two runs paired"

Counts = tuple[int, int]  # (accepted drafts, request-rounds) of one prompt's generation


@dataclass(frozen=True)
class Comparison:
    """The difference of accept lengths (dspark - dflash) and its interval at ``confidence``."""

    method: str
    confidence: float
    prompts: int
    difference: float
    low: float
    high: float
    decided: DsparkHarvest | None  # the harvest that accepts more at this confidence, None if undecided
    reason: str


def _accept_length(counts: Sequence[Counts], picks: Sequence[int]) -> float:
    rounds = sum(counts[i][1] for i in picks)
    return 1.0 + sum(counts[i][0] for i in picks) / rounds if rounds else 1.0


def _difference(dflash: Sequence[Counts], dspark: Sequence[Counts], picks: Sequence[int]) -> float:
    return _accept_length(dspark, picks) - _accept_length(dflash, picks)


def _interval(
    dflash: Sequence[Counts], dspark: Sequence[Counts], confidence: float, resamples: int, seed: int
) -> tuple[float, float]:
    rng = random.Random(seed)
    n = len(dflash)
    prompts = range(n)
    diffs = sorted(_difference(dflash, dspark, rng.choices(prompts, k=n)) for _ in range(resamples))
    tail = (1.0 - confidence) / 2
    return diffs[int(tail * (resamples - 1))], diffs[int((1.0 - tail) * (resamples - 1))]


def compare(
    dflash: Sequence[Counts],
    dspark: Sequence[Counts],
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    min_prompts: int = MIN_PROMPTS,
) -> Comparison:
    """Compare the two harvests' per-prompt counts (the same prompts, in the same order)."""
    if len(dflash) != len(dspark):
        raise ValueError(f"paired samples differ in length: {len(dflash)} vs {len(dspark)}")
    n = len(dflash)
    diff = _difference(dflash, dspark, range(n))
    low, high = _interval(dflash, dspark, confidence, resamples, seed) if n else (0.0, 0.0)
    level = f"{confidence:.0%}"
    if n < min_prompts:
        reason = f"{n} prompt(s): at least {min_prompts} are needed to state a {level} confidence"
        return Comparison(METHOD, confidence, n, diff, low, high, None, reason)
    interval = f"dspark - dflash {diff:+.2f}, {level} interval {low:+.2f}..{high:+.2f} over {n} prompts"
    decided = DsparkHarvest.DSPARK if low > 0 else DsparkHarvest.DFLASH if high < 0 else None
    reason = f"{interval}: {'includes 0, undecided' if decided is None else 'decided'}"
    return Comparison(METHOD, confidence, n, diff, low, high, decided, reason)


__all__ = ["CONFIDENCE", "RESAMPLES", "MIN_PROMPTS", "METHOD", "Counts", "Comparison", "compare"]
