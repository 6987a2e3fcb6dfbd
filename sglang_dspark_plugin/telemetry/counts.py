"""The accept counter: request-rounds by accepted-draft count (gpt-fast's ``accept_counts``) and the
totals; the per-position rates and the mean are derived from it. No round is kept: a round costs a
few integer adds per request.

Conventions (the same as sglang's and vLLM's):

* accept length of one request in one round = accepted drafts + 1 (the bonus token), in [1, gamma + 1];
* mean accept length = 1 + accepted drafts / request-rounds;
* per-position rate k = request-rounds whose draft k was accepted / request-rounds (k = 1..gamma).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

ACCEPT_LENGTH_DEFINITION = (
    "mean over every verify round of every request of the tokens it committed (accepted drafts + 1 "
    "bonus), uncapped by the request's token budget; rounds of already finished requests excluded"
)
"""The headline accept length, the same in the reference engine, ``check`` and the served telemetry.

It equals sglang's scheduler-log "accept len" except that sglang also counts an overlapped round of a
request that had already finished. sglang's per-request ``meta_info["spec_accept_length"]`` is another
figure (completion tokens / verify rounds: capped by the budget, counts the prefill token); ``check``
reports it as ``sglang_meta_accept_length``."""


class AcceptCounts:
    """``hist[n]``: request-rounds in which exactly ``n`` of the ``gamma`` drafts were accepted.

    ``rounds``, ``request_rounds`` and ``accepted_drafts`` count the valid rounds (``request_rounds`` is
    ``sum(hist)`` and ``accepted_drafts`` is ``sum(n * hist[n])``, kept as totals so that a round costs
    no pass over the histogram).
    """

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.hist = [0] * (gamma + 1)
        self.rounds = 0  # valid rounds (in the counts)
        self.request_rounds = 0
        self.accepted_drafts = 0  # bonus tokens not included
        self.invalid_rounds = 0  # rounds with a count outside [0, gamma], left out of the counts

    def add(self, counts: Sequence[Any]) -> bool:
        """Count one round from its per-request accepted-draft counts; False (and nothing counted but
        ``invalid_rounds``) when a count is not an integer in [0, gamma]. An empty round counts nothing."""
        if len(counts) == 0:
            return True
        hist = self.hist
        done = 0
        try:
            if min(counts) < 0:  # a negative count would index from the end
                raise ValueError
            for n in counts:  # indexing refuses a non-integer (TypeError) and a count above gamma
                hist[n] += 1
                done += 1
            accepted = int(sum(counts))  # a numpy integer total would not be JSON-able
        except (TypeError, IndexError, ValueError):
            for n in counts[:done]:  # undo the counts of this round made before the bad one
                hist[n] -= 1
            self.invalid_rounds += 1
            return False
        self.rounds += 1
        self.request_rounds += len(counts)
        self.accepted_drafts += accepted
        return True

    def accepted_per_position(self) -> list[int]:
        """Request-rounds in which draft position k (k = 1..gamma) was accepted: those with count >= k."""
        out = [0] * self.gamma
        running = 0
        for k in range(self.gamma, 0, -1):
            running += self.hist[k]
            out[k - 1] = running
        return out

    def per_position_rates(self) -> list[float] | None:
        """Accepted at position k / request-rounds, k = 1..gamma (vLLM's convention); None before data."""
        if self.request_rounds == 0:
            return None
        return [a / self.request_rounds for a in self.accepted_per_position()]

    def mean_accept_length(self) -> float | None:
        """1 + accepted drafts / request-rounds (bonus included); None before any valid round."""
        if self.request_rounds == 0:
            return None
        return 1.0 + self.accepted_drafts / self.request_rounds


__all__ = ["ACCEPT_LENGTH_DEFINITION", "AcceptCounts"]
