"""The small records a check report is built from that the measuring code makes too: kept apart from
``report`` so ``exactness`` (which makes departures) and ``report`` (which reads runs) do not import
each other."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .jsonform import to_json


class JsonRecord:
    """A dataclass whose JSON form is its fields (``jsonform.to_json``)."""

    def to_json(self) -> Any:
        return to_json(self)


@dataclass(frozen=True)
class Departure(JsonRecord):
    """One point where a speculative output left the target's greedy choice for its own prefix
    (``exactness.py`` says how each is classified)."""

    prompt: int  # index of the prompt (0-based, in the order decoded)
    position: int  # index of the new token (0-based; 0 is the prefill's token)
    token: int  # what the speculative run committed
    expected: int  # the target's greedy token for the same prefix
    margin: float  # float32 logit of expected minus that of token, from the same prefix
    tolerance: float  # what the run's dtype can separate at this position (2 E + floor)
    near_tie: bool  # |margin| <= tolerance: a rounding flip, not an error


__all__ = ["JsonRecord", "Departure"]
