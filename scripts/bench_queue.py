"""The telemetry queue's thread (``MEMRA_DSPARK_QUEUE_THREAD``): what its runs cost, by how often a run lets
go of the interpreter's lock (sglang-free).

Usage: python scripts/bench_queue.py [--rounds N] [--repeats R] [--batch-sizes 1,8,64] [--device-wait US]
                                     [--json]

A loop stands in for sglang's scheduler: each round runs a few float32 matrix products on one thread
(torch lets go of the interpreter's lock in them, as a forward pass does), then hands the round to a
``DeferredRounds`` with the live probe and the telemetry at their defaults (per-round line at INFO into a
temporary file, a run every ``MEMRA_DSPARK_DEFER_ROUNDS`` rounds). Policies, measured side by side,
interleaved in each repeat:

  * ``inline``: the runs on the loop's own thread (the default);
  * ``every-step``: on the queue's thread, letting go between every step;
  * ``let-go-200us``: on the queue's thread, letting go once 200 us have passed (``LET_GO_AFTER_NS``,
    what the plugin ships);
  * ``never``: on the queue's thread, never letting go (Python's own switch interval decides).

Per policy and batch size: the loop thread's CPU time per round in the plugin's calls (``sched_us``), the
queue thread's CPU time per round (``thread_us``), how often it let go per run, and the loop's wall time per
round (``wall_us``), each as the median of the repeats and its range. Numbers are printed, never asserted.

``--device-wait US`` models a GPU host: after its matrix products each round also waits ``US``
microseconds with the lock let go and no core busy (``time.sleep``), as sglang's scheduler waits for the
device's result. On such a host the queue's thread can run inside that wait; on this CPU harness it cannot,
where the forward pass itself keeps the cores busy.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import statistics
import sys
import tempfile
import time

import torch

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, AcceptTelemetry, DeferredRounds, TelemetrySettings
from sglang_dspark_plugin.telemetry.deferred import LET_GO_AFTER_NS

GAMMA = 7
POLICIES: dict[str, int | None] = {
    "inline": None,
    "every-step": 0,
    "let-go-200us": LET_GO_AFTER_NS,
    "never": 1 << 62,
}
"""Policy -> how long a run holds the lock before it lets go (ns); ``None``: no thread."""


def run_once(policy: str, bs: int, rounds: int, seed: int, device_wait_us: float = 0.0) -> dict[str, float]:
    """One measurement: ``rounds`` rounds of batch ``bs`` under ``policy``, each round waiting
    ``device_wait_us`` for a stand-in device after its host work."""
    let_go = POLICIES[policy]
    probe = LiveProbe(DsparkHarvest.DFLASH, ProbeSettings())
    telemetry = AcceptTelemetry(
        GAMMA, DsparkHarvest.DFLASH, "census", (), settings=TelemetrySettings(), probe=probe
    )
    queue = DeferredRounds(
        telemetry, probe, thread=let_go is not None, **({} if let_go is None else {"let_go_ns": let_go})
    )
    rng, weights = random.Random(seed), torch.randn(96, 96)
    lengths = [32] * bs
    plugin_ns = 0
    start = time.perf_counter_ns()
    for _ in range(rounds):
        x = weights
        for _ in range(4):  # the round's forward pass, the interpreter's lock let go inside
            x = torch.tanh(x @ weights)
        if device_wait_us:
            time.sleep(device_wait_us / 1e6)
        values = [min(rng.choice((0, 1, 2, 3, 7)), GAMMA) for _ in range(bs)]
        committed = [[5] * (v + 1) for v in values]
        facts = [(rid, 32, lengths[rid], 5, True) for rid in range(bs)]
        t0 = time.thread_time_ns()
        queue.round(values, facts, committed, lambda c=committed: ([], [len(x) for x in c], None))
        plugin_ns += time.thread_time_ns() - t0
        for rid in range(bs):
            lengths[rid] += len(committed[rid])
    t0 = time.thread_time_ns()
    queue.close()
    plugin_ns += time.thread_time_ns() - t0
    wall = time.perf_counter_ns() - start
    runs = max(1, -(-rounds // queue.every))
    return {
        "sched_us": plugin_ns / rounds / 1e3,
        "thread_us": queue.thread_ns / rounds / 1e3,
        "let_go_per_run": queue.let_go_times / runs,
        "wall_us": wall / rounds / 1e3,
    }


def measure(
    batch_sizes: list[int], rounds: int, repeats: int, device_wait_us: float = 0.0
) -> dict[int, dict[str, dict[str, list[float]]]]:
    torch.set_num_threads(1)
    out: dict[int, dict[str, dict[str, list[float]]]] = {}
    for bs in batch_sizes:
        cells: dict[str, dict[str, list[float]]] = {p: {} for p in POLICIES}
        for repeat in range(repeats):
            for policy in POLICIES:  # interleaved: drift on the machine hits every policy alike
                for key, value in run_once(policy, bs, rounds, repeat, device_wait_us).items():
                    cells[policy].setdefault(key, []).append(value)
        out[bs] = cells
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3000, help="rounds per measurement (default 3000)")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per cell (default 5)")
    parser.add_argument("--batch-sizes", default="1,8,64", help="comma-separated (default 1,8,64)")
    parser.add_argument(
        "--device-wait",
        type=float,
        default=0.0,
        metavar="US",
        help="each round also waits US microseconds for a stand-in device, the lock let go (default 0)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    with tempfile.NamedTemporaryFile("w", suffix=".log") as log:
        handler = logging.FileHandler(log.name)
        accept = logging.getLogger(ACCEPT_LOGGER)
        accept.addHandler(handler)
        accept.setLevel(logging.INFO)
        accept.propagate = False
        try:
            samples = measure(batch_sizes, args.rounds, args.repeats, args.device_wait)
        finally:
            accept.removeHandler(handler)
            handler.close()
    if args.json:
        print(json.dumps({str(bs): cells for bs, cells in samples.items()}, indent=1))
        return 0
    wait = f" device wait={args.device_wait:g} us" if args.device_wait else ""
    print(f"rounds={args.rounds} repeats={args.repeats}{wait}: median [min-max] per round")
    print(f"{'bs':>3} {'policy':<13} {'sched_us':>18} {'thread_us':>18} {'let go/run':>10} {'wall_us':>22}")
    for bs, cells in samples.items():
        for policy, cell in cells.items():

            def show(key: str, cell: dict[str, list[float]] = cell) -> str:
                v = cell[key]
                return f"{statistics.median(v):6.1f} [{min(v):.1f}-{max(v):.1f}]"

            let_go = statistics.median(cell["let_go_per_run"])
            shown = f"{show('sched_us'):>18} {show('thread_us'):>18} {let_go:>10.1f} {show('wall_us'):>22}"
            print(f"{bs:>3} {policy:<13} {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
