"""``scripts/bench_cost.py``: the lines it reads and the fraction it prints (the figures themselves are
measured by running it, never asserted here)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import bench_cost


def _log(windows: int, plugin_us: float, host_us: float) -> str:
    lines = []
    for _ in range(windows):
        lines.append(
            f"[t] dspark host cost rounds=20 plugin_us_per_round={plugin_us:.2f} round_us_median=13000.0 "
            "plugin_fraction=0.00500"
        )
        lines.append(
            f"dspark-bench sglang rounds=20 interval_us_median=13000.0 forward_us_median=12000.0 "
            f"host_us_median={host_us:.1f}"
        )
    return "\n".join(lines)


def test_the_fraction_is_the_plugins_time_over_sglangs_own_host_time():
    log = _log(6, plugin_us=50.0, host_us=1050.0)  # sglang's own: 1050 - 50 = 1000 us
    row = bench_cost._row("default", 8, bench_cost.bs.host_windows(log), bench_cost.sglang_windows(log))
    assert row["windows"] == 5  # the first window is the engine's warm-up
    assert row["fraction"] == pytest.approx(0.05) and row["sglang_host_us"][0] == pytest.approx(1000.0)
    assert row["of_a_5ms_gpu_round"] == pytest.approx(0.01)
    assert row["meets_target"] is False  # 5% > 2%
    assert "MISSED" in bench_cost.table([row])


def test_too_few_windows_is_refused():
    log = _log(2, plugin_us=50.0, host_us=1050.0)
    with pytest.raises(SystemExit, match="too few windows"):
        bench_cost._row("every", 1, bench_cost.bs.host_windows(log), bench_cost.sglang_windows(log))


def test_the_queues_thread_time_is_printed_beside_and_counted_in_the_second_fraction():
    """With ``MEMRA_DSPARK_QUEUE_THREAD`` the thread's CPU time is not the scheduler's: the first
    fraction leaves it out, the second counts it; the mean round interval is read where logged."""
    lines = []
    for _ in range(4):
        lines.append(
            "[t] dspark host cost rounds=20 plugin_us_per_round=10.00 round_us_median=13000.0 "
            "plugin_fraction=0.00077 queue_thread_us_per_round=30.00"
        )
        lines.append(
            "dspark-bench sglang rounds=20 interval_us_median=13000.0 forward_us_median=12000.0 "
            "host_us_median=1010.0 interval_us_mean=13400.0"
        )
    log = "\n".join(lines)
    row = bench_cost._row(
        "default", 1, bench_cost.bs.host_windows(log), bench_cost.sglang_windows(log), "thread"
    )
    assert row["queue"] == "thread" and row["thread_us"][0] == pytest.approx(30.0)
    assert row["fraction"] == pytest.approx(0.01)  # 10 us of sglang's own 1000
    assert row["fraction_with_thread"][0] == pytest.approx(0.04)  # (10 + 30) us of 1000
    assert row["interval_us_mean"][0] == pytest.approx(13400.0)
    assert " thread " in bench_cost.table([row])
