"""Server logs written by the real telemetry (``AcceptTelemetry``) through a handler in sglang's line
format: what ``dspark-harvest report`` is tested on, and the logs of the docs' generated examples
(``logs/NAME`` in ``scripts/examples.py``)."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from pathlib import Path

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.offsets import ProbeCounts
from sglang_dspark_plugin.probe.verdict import decide
from sglang_dspark_plugin.telemetry.accept import AcceptTelemetry
from sglang_dspark_plugin.telemetry.settings import TelemetrySettings

SETTINGS = TelemetrySettings(summary_every=50, alarm_window=40, alarm_warmup=10)
FORMAT = "[%(asctime)s TP0] %(message)s"


class _FixedTime(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return "2026-12-03 10:00:00"


class Log:
    """A server log written by the real telemetry: one ``AcceptTelemetry`` per process and DP group."""

    def __init__(self, path: Path, fmt: str = FORMAT, fixed_time: bool = False) -> None:
        self.path = path
        self.logger = logging.getLogger(f"server-log-{path}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        self.handler = logging.FileHandler(path, "a")
        self.handler.setFormatter(_FixedTime(fmt) if fixed_time else logging.Formatter(fmt))
        self.logger.addHandler(self.handler)

    def process(self, *, gamma=4, harvest=DsparkHarvest.DSPARK, dp=None, settings=SETTINGS):
        """A new process's telemetry, with its startup line logged."""
        t = AcceptTelemetry(gamma, harvest, "census", settings=settings, logger=self.logger, dp_rank=dp)
        self.logger.info("%s", t.describe())
        return t

    def line(self, text: str) -> None:
        self.logger.info("%s", text)

    def close(self) -> None:
        self.logger.removeHandler(self.handler)
        self.handler.close()


def rounds(t: AcceptTelemetry, n: int, *, collapsed: bool = False, seed: int = 0) -> None:
    """``n`` rounds of batch 1-6: accepted drafts uniform in 0..gamma, or (``collapsed``) mostly none."""
    rng = random.Random(seed)
    for _ in range(n):
        batch = rng.randint(1, 6)
        if collapsed:
            t.on_verify_complete([0 if rng.random() < 0.9 else 1 for _ in range(batch)])
        else:
            t.on_verify_complete([rng.randint(0, t.gamma) for _ in range(batch)])


def probe_line(counts: ProbeCounts, harvest: DsparkHarvest, dp: int | None = None) -> str:
    """The live probe's verdict line on ``counts`` (its own message, as ``LiveProbe.poll`` logs it)."""
    return f"dspark probe: {decide(counts, harvest).message}.{'' if dp is None else f' dp={dp}'}"


LATE = ProbeCounts(own=30, late=300, early=20, compared_own=500, compared_late=500, compared_early=500)
"""Drafts one position late: a shifted drafter read as mask-fill."""


def _collapse(path: Path) -> None:
    log = Log(path, fixed_time=True)
    healthy, collapsing = log.process(dp=0), log.process(dp=1)
    rounds(healthy, 300, seed=1)
    rounds(collapsing, 150, seed=2)
    rounds(collapsing, 150, collapsed=True, seed=3)
    log.close()


def _misaligned(path: Path) -> None:
    log = Log(path, fixed_time=True)
    t = log.process(harvest=DsparkHarvest.DFLASH)
    rounds(t, 100, collapsed=True, seed=4)
    log.line(probe_line(LATE, DsparkHarvest.DFLASH))
    log.close()


LOGS: dict[str, Callable[[Path], None]] = {"collapse.log": _collapse, "misaligned.log": _misaligned}
"""The docs' example logs, by file name."""


__all__ = ["Log", "rounds", "probe_line", "LATE", "SETTINGS", "LOGS"]
