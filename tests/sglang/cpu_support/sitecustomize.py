"""Applies the CPU serving patches in every Python process of a served test (tests only).

sglang's schedulers run in spawned processes, which inherit the environment but nothing else; this
folder is put first on their ``PYTHONPATH`` by the served harness, so each of them imports this module
at start-up. It acts only when ``DSPARK_CPU_PATCHES=1``.
"""

import os

if os.environ.get("DSPARK_CPU_PATCHES") == "1":
    import dspark_cpu_patches

    dspark_cpu_patches.install()

if os.environ.get("DSPARK_CPU_PATCHES") == "1" and os.environ.get("DSPARK_BENCH_TIMING") == "1":
    # benchmarks: sglang's own time per round
    import dspark_bench_timing

    dspark_bench_timing.install()
