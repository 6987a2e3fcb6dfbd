"""Per-round cost of the accept-length telemetry (``AcceptTelemetry.on_verify_complete``).

Usage: python scripts/bench_telemetry.py [--rounds N] [--gamma G] [--repeats R] [--json]
       python scripts/bench_telemetry.py --demo [--gamma G]

Each configuration feeds a fresh ``AcceptTelemetry`` (default settings: per-round line at INFO, summary
every 100 rounds, alarm armed) with pre-generated accepted-draft counts, as sglang's
``on_verify_complete_cpu`` would. The accept logger propagates to the root logger, as in sglang, whose
handler is, per configuration:
  * ``file``: a ``logging.FileHandler`` writing to a temporary file with sglang's scheduler formatter
    (``[%(asctime)s TP0] %(message)s``): what a deployment pays, the per-round line included;
  * ``file+metrics``: ``file`` plus Prometheus counters in a fresh registry;
  * ``null-handler``: a ``logging.NullHandler`` (records are built, nothing is formatted or written);
  * ``logger-warning``: ``file`` with the accept logger at WARNING (no per-round line; counting only).
It prints microseconds per round for batch sizes 1, 8, 64 and 256 side by side, as the median of the
repeats and their range (min-max), as CPU time (what the hook costs the scheduler thread, the write
included) and as wall time, the bytes logged per round, and the targets: at most 20 us per round at
batch 64 and 40 us at batch 256 (``file``, CPU time). The targets are reported, never asserted.

``--demo`` instead prints what the telemetry logs for a simulated stream that collapses halfway (a
matched drafter, then a mismatched harvest): per-round lines, summaries, the alarm, the final summary
and the Prometheus metrics. The ``MEMRA_DSPARK_*`` variables apply; the demo's own defaults are a
summary every 4 rounds and a 4-round alarm window after 2 warm-up rounds.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import statistics
import sys
import tempfile
import time

from sglang_dspark_plugin import settings as table
from sglang_dspark_plugin.census.draft_config import TIER_STRUCTURAL, Signal
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import (
    ACCEPT_LOGGER,
    AcceptTelemetry,
    PrometheusMetrics,
    TelemetrySettings,
)

TARGETS = {64: 20.0, 256: 40.0}
"""Per-round budget (us, CPU time) with the default per-round line written by a real handler."""
BATCH_SIZES = (1, 8, 64, 256)


def accepted_drafts(gamma: int, p: float, rng: random.Random) -> int:
    """One request's accepted drafts when each draft is accepted with probability ``p``."""
    n = 0
    while n < gamma and rng.random() < p:
        n += 1
    return n


def make_counts(bs: int, gamma: int, n_lists: int, rng: random.Random) -> list[list[int]]:
    """Accepted-draft counts with a healthy, geometric-like spread (mean accept length about 3)."""
    return [[accepted_drafts(gamma, 0.67, rng) for _ in range(bs)] for _ in range(n_lists)]


def demo(gamma: int, rounds: int, batch: int) -> int:
    """Log a stream that is healthy for half the rounds, then collapses (a mismatched harvest)."""
    env = dict(os.environ)
    for var, value in ((table.SUMMARY_EVERY, "4"), (table.ALARM_WARMUP, "2"), (table.ALARM_WINDOW, "4")):
        env.setdefault(var.name, value)
    settings = TelemetrySettings.from_env(env)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        datefmt="%Y-%m-%d %H:%M:%S",
        format="[%(asctime)s] %(levelname)s %(message)s",
    )
    evidence = (Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark"),)
    metrics = registry = None
    try:
        from prometheus_client import CollectorRegistry, generate_latest

        registry = CollectorRegistry()
        metrics = PrometheusMetrics(gamma, registry=registry)
    except ImportError:
        print("(prometheus_client is not installed: no metrics in this demo)")
    telemetry = AcceptTelemetry(gamma, DsparkHarvest.DSPARK, "census", evidence, settings, metrics)
    logging.getLogger(ACCEPT_LOGGER).info("%s", telemetry.describe())
    rng = random.Random(0)
    for i in range(rounds):
        p = 0.75 if i < rounds // 2 else 0.1  # matched drafter, then drafts under the wrong convention
        telemetry.on_verify_complete([accepted_drafts(gamma, p, rng) for _ in range(batch)])
    summary = telemetry.summary()
    summary["alarms"] = [a["round_index"] for a in summary["alarms"]]  # the messages are logged above
    print(json.dumps(summary))
    if registry is not None:
        exposition = generate_latest(registry).decode()
        print("\n".join(line for line in exposition.splitlines() if line and "_created" not in line))
    return 0


SGLANG_FORMAT = "[%(asctime)s TP0] %(message)s"
"""sglang's log format in a scheduler process (``configure_logger`` with the " TP0" prefix)."""
SGLANG_DATEFMT = "%Y-%m-%d %H:%M:%S"

CONFIGS = (
    # name, handler ("file" | "null"), accept logger level, metrics
    ("file", "file", logging.NOTSET, False),
    ("file+metrics", "file", logging.NOTSET, True),
    ("null-handler", "null", logging.NOTSET, False),
    ("logger-warning", "file", logging.WARNING, False),
)
"""``file`` is a deployment's default: the per-round INFO line written by a real handler."""


def install_handler(kind: str, path: str) -> logging.Handler:
    """The root handler sglang installs (``logging.basicConfig(force=True)``), here writing to a file."""
    if kind == "null":
        handler: logging.Handler = logging.NullHandler()
    else:
        handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        handler.setFormatter(logging.Formatter(SGLANG_FORMAT, datefmt=SGLANG_DATEFMT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.INFO)  # sglang's default --log-level info
    return handler


def run_once(
    counts: list[list[int]], rounds: int, gamma: int, level: int, metrics: bool
) -> tuple[float, float]:
    """(CPU, wall) microseconds per round for one fresh telemetry object."""
    logging.getLogger(ACCEPT_LOGGER).setLevel(level)
    prom = None
    if metrics:
        from prometheus_client import CollectorRegistry

        prom = PrometheusMetrics(gamma, registry=CollectorRegistry())
    telemetry = AcceptTelemetry(
        gamma, DsparkHarvest.DSPARK, "census", settings=TelemetrySettings(), metrics=prom
    )
    hook = telemetry.on_verify_complete
    n = len(counts)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(rounds):
        hook(counts[i % n])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu / rounds * 1e6, wall / rounds * 1e6


def measure(gamma: int, rounds_arg: int, repeats: int) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Per configuration and batch size: the CPU and wall microseconds per round of every repeat, and
    the log bytes written per round (``file`` only)."""
    rng = random.Random(0)
    out: dict[str, dict[str, dict[str, list[float]]]] = {"cpu": {}, "wall": {}, "log_bytes": {}}
    with tempfile.TemporaryDirectory() as tmp:
        log_path = os.path.join(tmp, "sglang.log")
        for name, kind, level, metrics in CONFIGS:
            handler = install_handler(kind, log_path)
            out["cpu"][name], out["wall"][name] = {}, {}
            for bs in BATCH_SIZES:
                counts = make_counts(bs, gamma, 256, rng)
                rounds = max(1000, rounds_arg // max(1, bs // 64))  # keep batch 256 affordable
                cpu, wall, written = [], [], []
                for _ in range(repeats):
                    handler.flush()
                    before = os.path.getsize(log_path) if kind == "file" else 0
                    c, w = run_once(counts, rounds, gamma, level, metrics)
                    handler.flush()
                    cpu.append(c)
                    wall.append(w)
                    if name == "file":
                        written.append((os.path.getsize(log_path) - before) / rounds)
                out["cpu"][name][str(bs)], out["wall"][name][str(bs)] = cpu, wall
                if written:
                    out["log_bytes"].setdefault(name, {})[str(bs)] = written
            logging.getLogger().removeHandler(handler)
            handler.close()
    logging.getLogger(ACCEPT_LOGGER).setLevel(logging.NOTSET)
    return out


def _median(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {name: {bs: statistics.median(v) for bs, v in row.items()} for name, row in samples.items()}


def _spread(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, list[float]]]:
    return {name: {bs: [min(v), max(v)] for bs, v in row.items()} for name, row in samples.items()}


def print_table(args: argparse.Namespace, samples: dict[str, dict[str, dict[str, list[float]]]]) -> None:
    """The human-readable report: median (min-max) per configuration and batch size."""
    print(
        f"accept telemetry, microseconds per round: median (min-max) of {args.repeats} repeats; "
        f"gamma={args.gamma}; python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} on "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"  file: the per-round INFO line (the default) through a FileHandler, formatter {SGLANG_FORMAT!r};"
        " null-handler: the same through logging.NullHandler; logger-warning: the accept logger at "
        "WARNING (no per-round line)"
    )
    for title, key in (
        ("CPU time (the cost to the scheduler thread)", "cpu"),
        ("wall time (includes waiting for a CPU on a busy machine)", "wall"),
    ):
        print(title)
        print(f"  {'configuration':<16}" + "".join(f"{'batch ' + str(bs):>22}" for bs in BATCH_SIZES))
        for name, row in samples[key].items():
            cells = [f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})" for v in row.values()]
            print(f"  {name:<16}" + "".join(f"{c:>22}" for c in cells))
    written = _median(samples["log_bytes"])["file"]
    print(
        "log written per round (file): "
        + ", ".join(f"batch {bs}: {written[str(bs)]:.0f} bytes" for bs in BATCH_SIZES)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20000, help="rounds per measurement (default 20000)")
    parser.add_argument(
        "--gamma", type=int, default=None, help="drafts per round (default 16: dspark, b=16; 4 with --demo)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="measurements per cell (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--demo", action="store_true", help="print sample log lines, alarm and metrics")
    args = parser.parse_args(argv)
    if args.demo:
        return demo(args.gamma or 4, rounds=12, batch=3)
    args.gamma = args.gamma or 16
    samples = measure(args.gamma, args.rounds, args.repeats)
    cpu = _median(samples["cpu"])
    verdicts = {
        str(bs): "MET" if cpu["file"][str(bs)] <= target else "MISSED" for bs, target in TARGETS.items()
    }
    if args.json:
        report = {
            "us_per_round": cpu,
            "us_per_round_range": _spread(samples["cpu"]),
            "us_per_round_samples": samples["cpu"],
            "wall_us_per_round": _median(samples["wall"]),
            "wall_us_per_round_range": _spread(samples["wall"]),
            "log_bytes_per_round": _median(samples["log_bytes"])["file"],
            "gamma": args.gamma,
            "repeats": args.repeats,
            "targets_us": {str(bs): t for bs, t in TARGETS.items()},
            "target": "MET" if all(v == "MET" for v in verdicts.values()) else "MISSED",
            "targets": verdicts,
            "python": sys.version.split()[0],
            "load_average": os.getloadavg()[0],
        }
        print(json.dumps(report, indent=2))
        return 0
    print_table(args, samples)
    for bs, target in TARGETS.items():
        print(
            f"target: <= {target:.0f} us per round at batch {bs} (file handler, CPU time): "
            f"{cpu['file'][str(bs)]:.2f} us -> {verdicts[str(bs)]}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
