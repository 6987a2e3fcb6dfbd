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


# ---------------------------------------------------------------- the other engines' lines

VLLM_FORMAT = (
    "SpecDecoding metrics: "
    "Mean acceptance length: %.2f, "
    "Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, "
    "Accepted: %d tokens, "
    "Drafted: %d tokens, "
    "Per-position acceptance rate: %s, "
    "Avg Draft acceptance rate: %.1f%%"
)
"""vLLM 0.34.0's line, ``vllm/v1/spec_decode/metrics.py:120-136`` (the same text since v0.9)."""
VLLM_PREFIX = "(APIServer pid=4242) INFO 12-05 10:%02d:%02d [metrics.py:120] "


def drafts_of(rates: list[float], n: int, seed: int) -> list[int]:
    """``n`` drafts' accepted counts whose rate of passing position k is ``rates[k]`` (vLLM's counting)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        u, accepted = rng.random(), 0
        while accepted < len(rates) and u < rates[accepted]:
            accepted += 1
        out.append(accepted)
    return out


def vllm_lines(accepted_per_draft: list[int], gamma: int, per_line: int = 100) -> list[str]:
    """vLLM's lines over drafts that accepted these many tokens each, ``per_line`` drafts a line, with
    its ``SpecDecodingLogging.log`` arithmetic (10 s between lines)."""
    out = []
    for i in range(0, len(accepted_per_draft), per_line):
        chunk = accepted_per_draft[i : i + per_line]
        drafts, accepted = len(chunk), sum(chunk)
        per_pos = [sum(1 for n in chunk if n > k) for k in range(gamma)]  # observe_draft's counting
        rates = ", ".join(f"{p / drafts:.3f}" for p in per_pos)
        text = VLLM_FORMAT % (
            1 + accepted / drafts,
            accepted / 10.0,
            drafts * gamma / 10.0,
            accepted,
            drafts * gamma,
            rates,
            100 * accepted / (drafts * gamma),
        )
        out.append(VLLM_PREFIX % divmod(10 * len(out) % 3600, 60) + text)
    return out


def sglang_line(mean: float, rate: float, running: int = 4, tokens: int = 400, dp: int | None = None) -> str:
    """sglang's decode line (0.5.23 ``metrics_reporter.py:962-1005``; 0.5.17 ``:757-798``, the same text)."""
    tag = "" if dp is None else f" DP{dp} TP{dp}"
    return (
        f"[2026-12-05 10:00:00{tag}] Decode batch, #running-req: {running}, #token: {tokens}, token usage: "
        f"0.10, accept len: {mean:.2f}, accept rate: {rate:.2f}, cuda graph: True, gen throughput "
        "(token/s): 812.20, #queue-req: 0"
    )


MISMATCHED_RATES = [0.37, 0.10, 0.02, 0.02, 0.02, 0.02]
"""The SpecForge-shaped embedded drafter under the wrong harvest (docs/check.md's table)."""


def _vllm(path: Path) -> None:
    path.write_text("\n".join(vllm_lines(drafts_of(MISMATCHED_RATES, 1500, seed=11), 6)) + "\n")


def _sglang_builtin(path: Path) -> None:
    rng = random.Random(12)
    lines = []
    for i in range(20):  # requests from 300 to 4k tokens, healthy; then past 20k, falling
        tokens = 300 + 250 * i if i < 14 else 20_000 + 2_000 * (i - 14)
        mean = 3.3 + rng.uniform(-0.2, 0.2) if tokens <= 4096 else 1.15 + rng.uniform(-0.05, 0.05)
        lines.append(sglang_line(mean, (mean - 1) / 7, running=8, tokens=8 * tokens))
    path.write_text("\n".join(lines) + "\n")


LOGS: dict[str, Callable[[Path], None]] = {
    "collapse.log": _collapse,
    "misaligned.log": _misaligned,
    "vllm.log": _vllm,
    "sglang-builtin.log": _sglang_builtin,
}
"""The docs' example logs, by file name."""


__all__ = [
    "Log",
    "rounds",
    "probe_line",
    "LATE",
    "SETTINGS",
    "LOGS",
    "VLLM_FORMAT",
    "drafts_of",
    "vllm_lines",
    "sglang_line",
    "MISMATCHED_RATES",
]
