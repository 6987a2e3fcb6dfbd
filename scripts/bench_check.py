#!/usr/bin/env python
"""Measure the issue's targets on the embedded models and print each one with PASS or MISS.

Runs ``dspark-harvest check --json`` (the embedded target with every embedded drafter under each
harvest, plus plain autoregressive decoding, side by side in one process) and checks, per drafter
(graded by its name: two drafters of one training strategy are graded apart):

  1. matched accept length >= 2.0 x mismatched;
  2. matched accept length >= 2.5 at the drafter's own block size;
  3. speculative tokens/s >= 1.5 x autoregressive tokens/s, for the matched runs;
  4. exact_match in both runs.

The targets and their bounds are ``check``'s own (``check_cmd.targets``), so both grade alike.

These are performance targets, so they are printed, never asserted by the test suite. Exit code:
0 when every target passes, 1 when one is missed, 2 when the check itself failed.

    python scripts/bench_check.py                 # run the check, then grade it
    python scripts/bench_check.py --from-json r.json   # grade a saved `check --json` output
    python scripts/bench_check.py -- --device cuda     # extra arguments go to `check`
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_dspark_plugin.cli.check import targets


@dataclass(frozen=True)
class Target:
    name: str  # what is measured, the measurement and the bound
    ok: bool


def grade(report: dict[str, Any]) -> list[Target]:
    """The issue's targets, graded from one ``check --json`` report (the same ones ``check`` prints)."""
    return [Target(text, ok) for text, ok in targets(report)]


def run_check(extra: list[str]) -> tuple[dict[str, Any], float]:
    cmd = [sys.executable, "-m", "sglang_dspark_plugin", "check", "--json", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        report = None
    # `check` exits non-zero when a run is not exact; that is graded below, not a failure to measure.
    if not isinstance(report, dict) or "runs" not in report:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"bench_check: `{' '.join(cmd[1:])}` failed with exit code {proc.returncode}")
    return report, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--from-json", type=Path, help="grade a saved `dspark-harvest check --json` output")
    parser.add_argument("--save", type=Path, help="also write the raw check report here")
    parser.add_argument("check_args", nargs="*", help="extra arguments for `dspark-harvest check`")
    args = parser.parse_args(argv)
    try:
        if args.from_json:
            report, wall = json.loads(args.from_json.read_text()), None
        else:
            report, wall = run_check(args.check_args)
    except (OSError, ValueError) as exc:
        print(f"bench_check: cannot read the check report: {exc}", file=sys.stderr)
        return 2
    if args.save:
        args.save.write_text(json.dumps(report, indent=2) + "\n")

    width = max([len("drafter"), *(len(r["drafter"]) for r in report["runs"])])
    print(
        f"{'drafter':{width}} {'strategy':8} {'harvest':8} {'matched':8} {'accept':>7} {'tok/s':>8} "
        f"{'exact':>6}  probe"
    )
    for r in report["runs"]:
        print(
            f"{r['drafter']:{width}} {r['drafter_strategy'] or '?':8} {r['harvest']:8} "
            f"{str(r['matched']):8} {r['accept_length']:7.2f} {r['tokens_per_s']:8.1f} "
            f"{str(r['exact_match']):>6}  {r['probe_verdict']}"
        )
    print(
        f"autoregressive tokens/s: {report['ar_tokens_per_s']:.1f}"
        + (f"   (check wall time {wall:.1f} s)" if wall is not None else "")
    )
    print()
    results = grade(report)
    for t in results:
        print(f"{'PASS' if t.ok else 'MISS'}  {t.name}")
    return 0 if all(t.ok for t in results) else 1


if __name__ == "__main__":
    sys.exit(main())
