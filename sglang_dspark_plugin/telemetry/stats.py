"""Accept-length statistics: the round records, the running totals and the histogram behind the
per-position rates.

Conventions (the same as sglang's and vLLM's):

* accept length of one request in one round = accepted drafts + 1 (the bonus token), in [1, gamma + 1];
* mean accept length = 1 + accepted drafts / request-rounds;
* per-position rate k = request-rounds whose draft k was accepted / request-rounds (k = 1..gamma).
"""

from __future__ import annotations

from collections import deque
from collections.abc import MutableSequence, Sequence
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

FOLD_BYTES = 1 << 16
"""Counts buffered before they are folded into the histogram (64 KiB: 256 rounds at batch 256)."""


@dataclass(slots=True)
class RoundRecord:
    """One verify round: per-request accept lengths (accepted drafts + 1) and their mean."""

    round_index: int
    batch_size: int
    accept_lengths: list[int]
    mean: float
    valid: bool = True  # False when a count was outside [0, gamma]; such rounds stay out of the stats

    def to_json(self) -> dict[str, Any]:
        """JSON-able form (an invalid round's mean is ``None``: NaN is not JSON)."""
        return {
            "round_index": self.round_index,
            "batch_size": self.batch_size,
            "accept_lengths": list(self.accept_lengths),
            "mean": self.mean if self.valid else None,
            "valid": self.valid,
        }


class AcceptStats:
    """Totals over the valid rounds, the histogram of accepted-draft counts, the recent records.

    ``add`` takes a round's counts already packed (``CountPacker.pack``) and appends them to a
    buffer; the histogram is brought up to date from that buffer when it is read, or every
    ``FOLD_BYTES`` counts, so a round pays no Python step per request.
    """

    def __init__(self, gamma: int, record_capacity: int, pending: MutableSequence[int]) -> None:
        self.gamma = gamma
        self.records: deque[RoundRecord] = deque(maxlen=record_capacity)
        self.rounds = 0  # valid rounds (in the statistics)
        self.request_rounds = 0
        self.accepted = 0  # accepted drafts (bonus tokens not included)
        self.invalid_rounds = 0
        self._hist_counts = [0] * (gamma + 1)  # request-rounds by accepted-draft count 0..gamma
        self._unfolded = pending  # counts of recent rounds, folded into the histogram when read

    def add(self, index: int, packed: Sequence[int], accepted: int, accept_lengths: list[int]) -> RoundRecord:
        """Count one valid round from its packed counts, their sum and the accept lengths."""
        bs = len(packed)
        self._unfolded += packed
        if len(self._unfolded) >= FOLD_BYTES:
            self._fold()
        record = RoundRecord(index, bs, accept_lengths, 1.0 + accepted / bs)
        self.records.append(record)
        self.rounds += 1
        self.request_rounds += bs
        self.accepted += accepted
        return record

    def keep(self, record: RoundRecord) -> RoundRecord:
        """Keep the record of a round that is not counted (an empty batch, an invalid round)."""
        self.records.append(record)
        if not record.valid:
            self.invalid_rounds += 1
        return record

    def _fold(self) -> None:
        """Add the counts of the rounds since the last fold to the histogram (17 C scans for gamma 16)."""
        pending = self._unfolded
        if pending:
            hist = self._hist_counts
            for k in range(len(hist)):
                hist[k] += pending.count(k)
            del pending[:]

    def histogram(self) -> list[int]:
        """Request-rounds by accepted-draft count 0..gamma, up to date."""
        self._fold()
        return self._hist_counts

    def accepted_per_position(self) -> list[int]:
        """Request-rounds in which draft position k (k = 1..gamma) was accepted."""
        hist = self.histogram()
        out = [0] * self.gamma
        running = 0
        for k in range(self.gamma, 0, -1):
            running += hist[k]  # draft k is accepted iff the count is >= k
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
        return 1.0 + self.accepted / self.request_rounds


__all__ = ["ACCEPT_LENGTH_DEFINITION", "RoundRecord", "AcceptStats"]
