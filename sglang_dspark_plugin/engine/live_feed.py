"""The reference engine's rounds fed to the live probe as a served batch feeds it.

A served verify round holds one round of every running request; ``feed_batch`` replays generations
side by side the same way (batch round k = round k of each generation still running), hands the probe
each request's row in sglang's output layout (``live_probe.row_of_round``), and ends each request
after its last round, as the worker does when sglang reports it finished.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..probe.live import VerifyRow, row_of_round, verify_row

if TYPE_CHECKING:
    from ..probe.live import LiveProbe, LiveVerdict
    from .spec_decode import Generation


@dataclass(frozen=True)
class Fed:
    """What a replay showed: the first decisive verdict, the batch round and the drafts scored then."""

    verdict: LiveVerdict | None
    at_round: int | None
    at_scored: int | None


def _row(drafts: tuple[int, ...], committed: tuple[int, ...], as_served: bool) -> VerifyRow:
    if as_served:  # the bonus overwrote the first rejected draft, as in sglang's host copy
        return verify_row(row_of_round(drafts, committed), len(committed))
    return VerifyRow(drafts, committed)


def feed_batch(probe: LiveProbe, generations: Sequence[Generation], *, as_served: bool = True) -> Fed:
    """Replay ``generations`` as one batch into ``probe``; ``as_served=False`` hands over every draft
    (the offline probe's view) instead of what sglang's host copy carries."""
    longest = max((len(g.rounds) for g in generations), default=0)
    found = Fed(None, None, None)
    for k in range(longest):
        probe.begin_round()
        for rid, gen in enumerate(generations):
            if k >= len(gen.rounds):
                continue
            rnd = gen.rounds[k]
            if probe.wants(rid):
                anchor = gen.rounds[k - 1].committed[-1] if k else gen.tokens[0]
                probe.observe(rid, rnd.anchor_pos, anchor, _row(rnd.drafts, rnd.committed, as_served))
            if k == len(gen.rounds) - 1:
                probe.finish(rid)
        verdict = probe.poll()
        if verdict is not None:
            c = verdict.counts
            found = Fed(verdict, k, min(c.compared_own, c.compared_late, c.compared_early))
    return found


__all__ = ["Fed", "feed_batch"]
