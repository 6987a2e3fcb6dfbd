"""Per-round cost of the accept-length telemetry (``AcceptTelemetry.on_verify_complete``).

Usage: python scripts/bench_telemetry.py [--rounds N] [--gamma G] [--repeats R] [--json]

Each configuration feeds a fresh ``AcceptTelemetry`` (default settings: summary every 100 rounds,
alarm armed) with pre-generated accepted-draft counts, as sglang's ``on_verify_complete_cpu`` would:
  * ``default``: the accept logger at its default level (per-round lines at INFO), written by a real
    ``StreamHandler`` with an sglang-like formatter to a discarded stream (os.devnull);
  * ``logger-warning``: the same handler, the accept logger set to WARNING (per-round lines filtered);
  * ``default+metrics``: ``default`` plus Prometheus counters in a fresh registry.
It prints microseconds per round (median of the repeats) for batch sizes 1, 64 and 256, as CPU time
(what the hook costs the scheduler thread) and as wall time, against the target of at most 20 us per
round at batch 64 (CPU time, default logging). The target is reported, never asserted.
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

from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, AcceptTelemetry, TelemetrySettings

TARGET_US_AT_64 = 20.0
BATCH_SIZES = (1, 64, 256)


def make_counts(bs: int, gamma: int, n_lists: int, rng: random.Random) -> list[list[int]]:
    """Accepted-draft counts with a healthy, geometric-like spread (mean accept length about 3)."""
    lists = []
    for _ in range(n_lists):
        row = []
        for _ in range(bs):
            n = 0
            while n < gamma and rng.random() < 0.67:
                n += 1
            row.append(n)
        lists.append(row)
    return lists


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
    parser.add_argument("--gamma", type=int, default=16, help="drafts per round (default 16: dspark, b=16)")
    parser.add_argument("--repeats", type=int, default=3, help="measurements per cell; the median is shown")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)

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
