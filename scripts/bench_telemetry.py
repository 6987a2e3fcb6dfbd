"""Per-round cost of the accept-length telemetry (``AcceptTelemetry.on_verify_complete``).

Usage: python scripts/bench_telemetry.py [--rounds N] [--gamma G] [--repeats R] [--json]
       python scripts/bench_telemetry.py --demo [--gamma G]

Each configuration feeds a fresh ``AcceptTelemetry`` (default settings: summary every 100 rounds,
alarm armed) with pre-generated accepted-draft counts, as sglang's ``on_verify_complete_cpu`` would:
  * ``default``: the accept logger at its default level (per-round lines at INFO), written by a real
    ``StreamHandler`` with an sglang-like formatter to a discarded stream (os.devnull);
  * ``logger-warning``: the same handler, the accept logger set to WARNING (per-round lines filtered);
  * ``default+metrics``: ``default`` plus Prometheus counters in a fresh registry.
It prints microseconds per round (median of the repeats) for batch sizes 1, 64 and 256, as CPU time
(what the hook costs the scheduler thread) and as wall time, against the target of at most 20 us per
round at batch 64 (CPU time, default logging). The target is reported, never asserted.

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
import time

from sglang_dspark_plugin.draft_config import TIER_STRUCTURAL, Signal
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import (
    ACCEPT_LOGGER,
    ENV_ALARM_WARMUP,
    ENV_ALARM_WINDOW,
    ENV_SUMMARY_EVERY,
    AcceptTelemetry,
    PrometheusMetrics,
    TelemetrySettings,
)

TARGET_US_AT_64 = 20.0
BATCH_SIZES = (1, 64, 256)


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
    for var, value in ((ENV_SUMMARY_EVERY, "4"), (ENV_ALARM_WARMUP, "2"), (ENV_ALARM_WINDOW, "4")):
        env.setdefault(var, value)
    settings = TelemetrySettings.from_env(env)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout, datefmt="%Y-%m-%d %H:%M:%S",
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


def run_once(
    counts: list[list[int]], rounds: int, gamma: int, level: int, metrics: bool
) -> tuple[float, float]:
    """(CPU, wall) microseconds per round for one fresh telemetry object."""
    logger = logging.getLogger(ACCEPT_LOGGER)
    logger.setLevel(level)
    prom = None
    if metrics:
        from prometheus_client import CollectorRegistry

        from sglang_dspark_plugin.telemetry import PrometheusMetrics

        prom = PrometheusMetrics(gamma, registry=CollectorRegistry())
    telemetry = AcceptTelemetry(gamma, "dspark", "census", settings=TelemetrySettings(), metrics=prom)
    hook = telemetry.on_verify_complete
    n = len(counts)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    for i in range(rounds):
        hook(counts[i % n])
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return cpu / rounds * 1e6, wall / rounds * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20000, help="rounds per measurement (default 20000)")
    parser.add_argument("--gamma", type=int, default=None,
                        help="drafts per round (default 16: dspark, b=16; 4 with --demo)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per cell; the median is shown")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--demo", action="store_true", help="print sample log lines, alarm and metrics")
    args = parser.parse_args(argv)
    if args.demo:
        return demo(args.gamma or 4, rounds=12, batch=3)
    args.gamma = args.gamma or 16

    rng = random.Random(0)
    sink = open(os.devnull, "w")  # noqa: SIM115  # a real stream whose writes are discarded
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s"))  # sglang's default shape
    logger = logging.getLogger(ACCEPT_LOGGER)
    logger.addHandler(handler)
    logger.propagate = False  # only the discarded stream: no console output inside the timed loop

    configs = (
        ("default", logging.INFO, False),
        ("logger-warning", logging.WARNING, False),
        ("default+metrics", logging.INFO, True),
    )
    results: dict[str, dict[str, float]] = {}
    wall: dict[str, dict[str, float]] = {}
    for name, level, metrics in configs:
        results[name], wall[name] = {}, {}
        for bs in BATCH_SIZES:
            counts = make_counts(bs, args.gamma, 256, rng)
            rounds = max(1000, args.rounds // max(1, bs // 64))  # keep batch 256 affordable
            samples = [run_once(counts, rounds, args.gamma, level, metrics) for _ in range(args.repeats)]
            results[name][str(bs)] = statistics.median(s[0] for s in samples)
            wall[name][str(bs)] = statistics.median(s[1] for s in samples)
    logger.removeHandler(handler)
    sink.close()

    at64 = results["default"]["64"]
    verdict = "MET" if at64 <= TARGET_US_AT_64 else "MISSED"
    if args.json:
        print(json.dumps({
            "us_per_round": results,
            "wall_us_per_round": wall,
            "gamma": args.gamma,
            "target_us_at_batch_64": TARGET_US_AT_64,
            "target": verdict,
            "python": sys.version.split()[0],
        }, indent=2))
        return 0
    print(f"accept telemetry, microseconds per round (median of {args.repeats}; gamma={args.gamma}; "
          f"python {sys.version.split()[0]}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")
    for title, table in (("CPU time (the cost to the scheduler thread)", results),
                         ("wall time (includes waiting for a CPU on a busy machine)", wall)):
        print(title)
        print(f"  {'configuration':<18}" + "".join(f"{'batch ' + str(bs):>12}" for bs in BATCH_SIZES))
        for name, row in table.items():
            print(f"  {name:<18}" + "".join(f"{row[str(bs)]:>12.2f}" for bs in BATCH_SIZES))
    print(f"target: <= {TARGET_US_AT_64:.0f} us per round at batch 64 (default logging, CPU time): "
          f"{at64:.2f} us -> {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
