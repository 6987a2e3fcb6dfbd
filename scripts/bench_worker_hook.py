"""Per-round cost of the workers' round hooks against sglang's own (a no-op ``on_verify_complete_cpu``).

Run it in a sglang environment (the round hook lives in the sglang glue):

    ~/.cache/sglang-dspark-plugin/venvs/sglang-0.5.23/bin/python scripts/bench_worker_hook.py

It prints microseconds per verify round at batch sizes 1, 8, 64 and 256 for sglang's ``DSparkWorkerV2``
hook (a no-op) and for ``HarvestDSparkWorker`` (the parent's hook, which the plugin does not override,
then the plugin's one round hook ``dspark_round``, the counts read from the result: the live mask,
the context lengths, the queue with the telemetry and the live probe), as the median and the range
(min-max) of ``--repeats`` measurements, the two hooks interleaved. The per-round accept lines go to
a NullHandler so that the number is the plugin's, not a log sink's.
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import time
from types import SimpleNamespace

import torch
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

from sglang_dspark_plugin.census.draft_config import DflashCfg
from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import ENV_VAR, DsparkHarvest
from sglang_dspark_plugin.serving import SHIFTED, LaunchRequest, ServePlan, SglangSupport
from sglang_dspark_plugin.sglang_plugin.workers import HarvestDSparkWorker
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER


def _per_round_us(worker: object, counts: list[int], rounds: int, width: int) -> float:
    """``on_verify_complete_cpu`` and, for a plugin worker, the round hook after it (``dspark_round``),
    as sglang calls them once per round."""
    hook = worker.on_verify_complete_cpu  # type: ignore[attr-defined]
    after = getattr(type(worker), "dspark_round", None)  # sglang's DSPARK worker forwards unknown names
    bs = len(counts)
    reqs = [
        SimpleNamespace(
            rid=i, is_retracted=False, finished=lambda: False, origin_input_ids=[1] * 100, output_ids=[2] * 40
        )
        for i in range(bs)
    ]
    batch = SimpleNamespace(reqs=reqs)
    result = SimpleNamespace(
        next_token_ids=torch.zeros(bs * width, dtype=torch.int64),
        accept_lens=torch.tensor([n + 1 for n in counts]),
        num_correct_drafts_per_req_cpu=counts,
    )
    committed = [[3] * (n + 1) for n in counts]
    start = time.perf_counter()
    for _ in range(rounds):
        hook(counts, batch_size=bs)
        if after is not None:
            after(worker, committed, result, batch)
    return (time.perf_counter() - start) / rounds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    accept_logger = logging.getLogger(ACCEPT_LOGGER)
    accept_logger.addHandler(logging.NullHandler())
    accept_logger.propagate = False

    cfg = DflashCfg(path="bench", block_size=args.block_size)
    resolution = DsparkHarvest.explain(cfg, environ={ENV_VAR: "dspark"})
    geometry = RoundGeometry(resolution.harvest, cfg.block_size)
    support = SglangSupport.for_version("0.5.23")
    plan = ServePlan(LaunchRequest("bench"), support, cfg, resolution, geometry, SHIFTED, "config.json", {})
    ours = object.__new__(HarvestDSparkWorker)  # the hook needs no GPU state
    ours._dspark_attach(plan, tp_rank=0)
    parent = object.__new__(DSparkWorkerV2)

    rng = random.Random(0)
    print(
        f"gamma={geometry.gamma}  (us per verify round, median (min-max) of {args.repeats}; lower is better)"
    )
    for bs in (1, 8, 64, 256):
        counts = [rng.randint(0, geometry.gamma) for _ in range(bs)]
        rounds = max(1000, args.rounds // max(1, bs // 64))
        base, mine = [], []
        for _ in range(args.repeats):
            base.append(_per_round_us(parent, counts, rounds, geometry.verify_window))
            mine.append(_per_round_us(ours, counts, rounds, geometry.verify_window))
        print(f"bs={bs:4d}  sglang DSparkWorkerV2 hook {_cell(base)}  HarvestDSparkWorker hook {_cell(mine)}")


def _cell(samples: list[float]) -> str:
    return f"{statistics.median(samples):7.2f} ({min(samples):.2f}-{max(samples):.2f})"


if __name__ == "__main__":
    main()
