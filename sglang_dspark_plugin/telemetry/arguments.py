"""The checks of ``AcceptTelemetry``'s arguments (sglang-free): a public constructor refuses a wrong
type or range by name, with the fix, instead of failing deep inside a round. The plan's own path
(``AcceptTelemetry.from_resolution``) passes typed values; these guard every other caller.
"""

from __future__ import annotations

import logging

from ..census.draft_config import Signal
from ..errors import ArgumentTypeError, GeometryError, HarvestEnvError
from ..harvest import DsparkHarvest
from ..limits import MAX_GAMMA
from ..util.reprs import short
from ..util.validation import is_int, require_type
from .metrics import PrometheusMetrics
from .settings import TelemetrySettings


def check_arguments(gamma: object, harvest: object, *others: object) -> None:
    """Each argument's type and range, refused by name (a wrong one would fail deep in a round)."""
    if not is_int(gamma) or not 1 <= gamma <= MAX_GAMMA:
        raise GeometryError(
            f"telemetry gamma={short(gamma, 60)} is not an integer in 1..{MAX_GAMMA}; pass "
            "RoundGeometry.gamma (drafts per round = n_drafts(block_size), at most the widest block).",
            where="AcceptTelemetry(gamma=...)",
        )
    if not isinstance(harvest, DsparkHarvest):
        raise HarvestEnvError(
            f"telemetry harvest={short(harvest, 60)} is not a DsparkHarvest; pass DsparkHarvest.DFLASH or "
            "DsparkHarvest.DSPARK (DsparkHarvest.from_name maps a serialized name to one).",
            where="AcceptTelemetry(harvest=...)",
        )
    _check_types(*others)


def _check_types(
    source: object,
    evidence: object,
    settings: object,
    clock: object,
    logger: object,
    dp_rank: object,
) -> None:
    """source, evidence, settings, clock, logger and dp_rank."""
    require_type(source, str, "AcceptTelemetry(source=...)", "pass Resolution.source ('env', 'census', ...).")
    require_type(evidence, (tuple, list), "AcceptTelemetry(evidence=...)", "pass Resolution.evidence.")
    for signal in evidence:  # type: ignore[attr-defined]  # a tuple or a list, checked above
        require_type(signal, Signal, "AcceptTelemetry(evidence=...)", "pass Resolution.evidence (Signals).")
    if settings is not None:
        hint = "pass a TelemetrySettings."
        require_type(settings, TelemetrySettings, "AcceptTelemetry(settings=...)", hint)
    if clock is not None and not callable(clock):
        raise ArgumentTypeError(
            f"AcceptTelemetry(clock=...) must be callable, got {type(clock).__name__}; pass e.g. "
            "time.monotonic.",
            where="AcceptTelemetry(clock=...)",
        )
    if logger is not None:
        require_type(
            logger, (logging.Logger, logging.LoggerAdapter), "AcceptTelemetry(logger=...)", "pass a Logger."
        )
    if dp_rank is not None and (not is_int(dp_rank) or dp_rank < 0):
        raise ArgumentTypeError(
            f"AcceptTelemetry(dp_rank={short(dp_rank, 40)}) must be None or a non-negative integer.",
            where="AcceptTelemetry(dp_rank=...)",
        )


def checked_metrics(metrics: PrometheusMetrics | None, gamma: int) -> PrometheusMetrics | None:
    if metrics is not None and metrics.gamma != gamma:
        raise GeometryError(
            f"metrics were built for gamma={metrics.gamma} but the telemetry has gamma={gamma}; "
            "build PrometheusMetrics with the same RoundGeometry.gamma.",
            where="AcceptTelemetry(metrics=...)",
        )
    return metrics


__all__ = ["check_arguments", "checked_metrics"]
