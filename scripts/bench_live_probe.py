#!/usr/bin/env python
"""The live offset probe's host time per verify round, as the worker would spend it.

Replays synthetic rounds (gamma 7, aligned drafts, 1-3 tokens committed a round) through the worker's
per-round calls (``begin_round``, ``wants``/``observe`` with ``verify_row`` on sglang's output row,
``poll``) at batch sizes 1, 8 and 64, under three schedules: every round sampled, the default schedule
after its first rounds (1 in 16), and never sampled. Prints the median, min and max over repeats of
the mean microseconds per round. Building the rows (sglang's work) is outside the timing.

    python scripts/bench_live_probe.py [--rounds 320] [--repeats 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings, row_of_round, verify_row

GAMMA = 7
SCHEDULES = {
    "every round": ProbeSettings(rounds=10**9),
    "1 in 16": ProbeSettings(rounds=0, every=16),
    "never": ProbeSettings(rounds=0, every=0),
}


def _rounds(bs: int, n: int) -> list[list[tuple[int, int, list[int], int]]]:
    """``n`` batch rounds of ``bs`` requests: (rid, anchor position, sglang's row, commit length)."""
    seq = [(i * 729) % 1000 for i in range(n * 4 + GAMMA + 16)]
    pos, out = [10] * bs, []
    for _ in range(n):
        batch = []
        for rid in range(bs):
            p = pos[rid]
            committed = seq[p + 1 : p + 2 + (p + rid) % 3]
            drafts = [seq[p + j] for j in range(1, GAMMA + 1)]
            batch.append((rid, p, row_of_round(drafts, committed), len(committed)))
            pos[rid] = p + len(committed)
        out.append(batch)
    return out


def per_round_us(settings: ProbeSettings, rounds: list, anchors: list) -> float:
    probe = LiveProbe(DsparkHarvest.DFLASH, settings)
    start = time.perf_counter()
    for batch, tokens in zip(rounds, anchors, strict=True):
        probe.begin_round()
        if probe.busy:
            for (rid, p, row, commit), anchor in zip(batch, tokens, strict=True):
                if probe.wants(rid):
                    probe.observe(rid, p, anchor, verify_row(row, commit))
        probe.poll()
    return (time.perf_counter() - start) / len(rounds) * 1e6


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=320)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"{'batch':>5}  {'schedule':<12} {'median us/round':>16} {'min':>8} {'max':>8}")
    for bs in (1, 8, 64):
        rounds = _rounds(bs, args.rounds)
        anchors = [[(p * 729) % 1000 for _, p, _, _ in batch] for batch in rounds]
        for name, settings in SCHEDULES.items():
            times = [per_round_us(settings, rounds, anchors) for _ in range(args.repeats)]
            print(
                f"{bs:>5}  {name:<12} {statistics.median(times):>16.1f} {min(times):>8.1f} {max(times):>8.1f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
