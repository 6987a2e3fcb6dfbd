"""The offset probe, as the reference engine's ``check`` uses it: ``..offsets`` (torch-free, so the live
probe of a served drafter reads the same definitions without loading the engine)."""

from __future__ import annotations

from ..offsets import (
    ALIGNED,
    EARLY,
    INCONCLUSIVE,
    LATE,
    ProbeCounts,
    ProbeResult,
    ProbeRound,
    misalignment,
    offset_probe,
    probe_counts,
    rates_text,
    verdict,
)

__all__ = [
    "ProbeRound",
    "ProbeCounts",
    "ProbeResult",
    "probe_counts",
    "verdict",
    "offset_probe",
    "rates_text",
    "misalignment",
    "ALIGNED",
    "LATE",
    "EARLY",
    "INCONCLUSIVE",
]
