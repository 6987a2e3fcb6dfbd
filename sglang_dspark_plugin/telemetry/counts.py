"""The accept counter: request-rounds by accepted-draft count (gpt-fast's ``accept_counts``), the
totals, and the records of the last rounds; the per-position rates and the mean are derived from it.

Conventions (the same as sglang's and vLLM's):

* accept length of one request in one round = accepted drafts + 1 (the bonus token), in [1, gamma + 1];
* mean accept length = 1 + accepted drafts / request-rounds;
* per-position rate k = request-rounds whose draft k was accepted / request-rounds (k = 1..gamma).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass(slots=True)
class RoundRecord:
    """One verify round: per-request accept lengths (accepted drafts + 1) and their mean."""

    round_index: int
    batch_size: int
    accept_lengths: list[int]
    mean: float
    valid: bool = True  # False when a count was outside [0, gamma]; such rounds stay out of the counts

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (an invalid round's mean is ``None``: NaN is not JSON)."""
        return {
            "round_index": self.round_index,
            "batch_size": self.batch_size,
            "accept_lengths": list(self.accept_lengths),
            "mean": self.mean if self.valid else None,
            "valid": self.valid,
        }


class AcceptCounts:
    """``hist[n]``: request-rounds in which exactly ``n`` of the ``gamma`` drafts were accepted.

    ``rounds``, ``request_rounds`` and ``accepted_drafts`` count the valid rounds (``request_rounds`` is
    ``sum(hist)`` and ``accepted_drafts`` is ``sum(n * hist[n])``, kept as totals so that a round costs
    no pass over the histogram); ``records`` holds the last ``record_capacity`` rounds, valid or not.
    """

    def __init__(self, gamma: int, record_capacity: int) -> None:
        self.gamma = gamma
        self.hist = [0] * (gamma + 1)
        self.rounds = 0  # valid rounds (in the counts)
        self.request_rounds = 0
        self.accepted_drafts = 0  # bonus tokens not included
        self.invalid_rounds = 0  # rounds with a count outside [0, gamma], left out of the counts
        self.records: deque[RoundRecord] = deque(maxlen=record_capacity)
        self._length = list(range(1, gamma + 2))  # count n -> accept length n + 1, for n in 0..gamma

    def add(self, index: int, counts: Sequence[Any]) -> RoundRecord:
        """Count round ``index`` from its per-request accepted-draft counts, and keep its record.

        An empty round is kept but not counted; so is a round with a count that is not an integer in
        [0, gamma] (its record has ``valid=False``, and ``invalid_rounds`` counts it).
        """
        if len(counts) == 0:
            return self._keep(RoundRecord(index, 0, [], 0.0))
        try:
            # Indexing refuses a non-integer (TypeError) and a count above gamma (IndexError); min() a
            # negative one, which would index from the end.
            lengths = [self._length[n] for n in counts] if min(counts) >= 0 else None
        except (TypeError, IndexError, ValueError):
            lengths = None
        if lengths is None:
            self.invalid_rounds += 1
            seen = [n + 1 if isinstance(n, int) else -1 for n in counts]
            return self._keep(RoundRecord(index, len(seen), seen, math.nan, valid=False))
        hist = self.hist
        for n in counts:
            hist[n] += 1
        bs = len(lengths)
        accepted = sum(lengths) - bs
        self.rounds += 1
        self.request_rounds += bs
        self.accepted_drafts += accepted
        return self._keep(RoundRecord(index, bs, lengths, 1.0 + accepted / bs))

    def _keep(self, record: RoundRecord) -> RoundRecord:
        self.records.append(record)
        return record

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


__all__ = ["ACCEPT_LENGTH_DEFINITION", "RoundRecord", "AcceptCounts"]
