"""``scripts/bench_queue.py``: every policy measured, each the way it claims (the figures themselves are
printed by running it, never asserted here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_queue.py"


def test_each_policy_runs_where_it_says_and_lets_go_as_often_as_it_says():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "130", "--repeats", "1", "--batch-sizes", "1,8", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert sorted(out) == ["1", "8"]
    for cells in out.values():
        assert list(cells) == ["inline", "every-step", "let-go-200us", "never"]
        inline, every, _, never = (cells[p] for p in cells)
        assert inline["thread_us"] == [0.0] and inline["let_go_per_run"] == [0.0]  # on the loop's thread
        assert all(cell["thread_us"][0] > 0 for p, cell in cells.items() if p != "inline")
        # 130 rounds in runs of 64, 64 and 2: every step lets go (130 / 3 runs), never none
        assert every["let_go_per_run"][0] == 130 / 3 and never["let_go_per_run"][0] == 0.0
        assert all(cell["wall_us"][0] > 0 and cell["sched_us"][0] > 0 for cell in cells.values())


def test_a_device_wait_is_part_of_every_round():
    """``--device-wait`` adds its wait to every round of every policy (the GPU host's model)."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "40", "--repeats", "1", "--batch-sizes", "1"]
        + ["--device-wait", "3000", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    cells = json.loads(proc.stdout)["1"]
    assert all(cell["wall_us"][0] >= 3000 for cell in cells.values()), cells
