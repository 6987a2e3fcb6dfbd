"""sglang's own time per decode round, measured from the test side (benchmarks only; no sglang edit).

Enabled in a served process by ``DSPARK_BENCH_TIMING=1`` beside ``DSPARK_CPU_PATCHES=1``
(``sitecustomize``). It wraps two of sglang's own methods once their modules are imported (registered
as patches of ``dspark_cpu_patches``, whose import hook applies them):

* ``ModelRunner.forward``: every forward pass (the target's verify and the drafter's) is timed, and the
  time summed since the last round;
* ``SchedulerBatchResultProcessor.process_batch_result_decode``: each call closes a decode round. The
  round's interval is the time since the previous call, and the round's host time is that interval
  minus its forward time.

Every ``DSPARK_BENCH_WINDOW`` rounds (default 20) it prints one line::

    dspark-bench sglang rounds=20 interval_us_median=13010.2 forward_us_median=12200.4
        host_us_median=790.1 interval_us_mean=13113.0

(one line, broken here).

``host_us_median`` is the median over the window's rounds of (interval - forward): sglang's own host
work per round plus the plugin's. ``interval_us_mean`` is the mean round interval: a round delayed
now and then (a thread holding the interpreter's lock when the scheduler wants it) moves the mean, not
the median. ``scripts/bench_served.py --part cost`` subtracts the plugin's own
time (its ``dspark host cost`` lines) to get sglang's. On this CPU harness a forward runs on the
scheduler's thread, so a round is its forward plus its host time; on a GPU the two overlap.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Any

WINDOW = int(os.environ.get("DSPARK_BENCH_WINDOW", "20"))
_MODULES = {
    "sglang.srt.model_executor.model_runner": "_runner",
    "sglang.srt.managers.scheduler_components.batch_result_processor": "_processor",
}
_state = {"forward": 0.0, "last": None, "rounds": []}


def _runner(mod: Any) -> None:
    runner = mod.ModelRunner
    original = runner.forward

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, *args, **kwargs)
        finally:
            _state["forward"] += time.perf_counter() - start

    runner.forward = forward


def _processor(mod: Any) -> None:
    processor = mod.SchedulerBatchResultProcessor
    original = processor.process_batch_result_decode

    def process_batch_result_decode(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        now = time.perf_counter()
        last, forward = _state["last"], _state["forward"]
        _state["last"], _state["forward"] = now, 0.0
        if last is not None:
            _state["rounds"].append((now - last, forward))
        if len(_state["rounds"]) >= WINDOW:
            rounds, _state["rounds"] = _state["rounds"], []
            interval = statistics.median(r[0] for r in rounds) * 1e6
            forward_us = statistics.median(r[1] for r in rounds) * 1e6
            host = statistics.median(r[0] - r[1] for r in rounds) * 1e6
            interval_mean = statistics.fmean(r[0] for r in rounds) * 1e6
            print(
                f"dspark-bench sglang rounds={len(rounds)} interval_us_median={interval:.1f} "
                f"forward_us_median={forward_us:.1f} host_us_median={host:.1f} "
                f"interval_us_mean={interval_mean:.1f}",
                file=sys.stderr,
                flush=True,
            )
        return result

    processor.process_batch_result_decode = process_batch_result_decode


def install() -> None:
    """Wrap now (modules already imported) or on import, through the CPU patches' own import hook."""
    import dspark_cpu_patches

    for name, fn in _MODULES.items():
        dspark_cpu_patches.patch(name)(globals()[fn])
