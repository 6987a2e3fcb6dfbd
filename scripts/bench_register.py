"""Startup time the plugin adds to an sglang process (``load_plugins()`` with and without it).

Usage: python scripts/bench_register.py [--python PY ...] [--repeats R] [--json]

sglang calls ``load_plugins()`` early in every process (the launcher, each scheduler, and on 0.5.23 the
detokenizer and the data-parallel controller): it runs every entry point of ``sglang.srt.plugins`` and
then applies the registered hooks (which imports each hook's target module). Each sample is a fresh
interpreter that imports what ``sglang.launch_server`` imports before it calls ``load_plugins()``, then
times ``load_plugins()`` itself:

  * ``without``: ``SGLANG_PLUGINS`` names no plugin (nothing runs, nothing is hooked);
  * ``with``: ``SGLANG_PLUGINS=dspark_harvest`` (this plugin only: ``register()`` and its hooks).

The difference is what the plugin adds to every sglang process. It also reports whether
``DSPARK_HARVEST`` was registered, and the time of the full contract check (``dspark-harvest doctor``'s,
which imports the worker modules) measured after it, for comparison. Numbers are printed, not asserted;
the target is at most 1 s added per process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

TARGET_ADDED_S = 1.0

_SAMPLE = r"""
import json, time
t0 = time.perf_counter()
from sglang.srt.plugins import load_plugins  # what launch_server imports before load_plugins()
from sglang.srt.server_args import prepare_server_args  # noqa: F401
from sglang.srt.utils import kill_process_tree  # noqa: F401
t1 = time.perf_counter()
load_plugins()
t2 = time.perf_counter()
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
try:
    SpeculativeAlgorithm.from_string("DSPARK_HARVEST")
    registered = True
except ValueError:
    registered = False
full = None
if FULL:
    from sglang_dspark_plugin.sglang_plugin import contract
    t3 = time.perf_counter()
    statuses = contract.check_contract()  # doctor's full check: the workers' entries too
    full = {"seconds": time.perf_counter() - t3, "ok": all(s.ok for s in statuses)}
print(json.dumps({"import_s": t1 - t0, "load_plugins_s": t2 - t1, "registered": registered, "full": full}))
"""


def sample(python: str, plugins: str, full: bool) -> dict:
    """One fresh interpreter: import time, ``load_plugins()`` time, registration."""
    env = dict(os.environ, SGLANG_PLUGINS=plugins)
    code = _SAMPLE.replace("FULL", repr(full))
    out = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{python}: sample failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return json.loads(lines[-1])


def sglang_version(python: str) -> str:
    out = subprocess.run(
        [python, "-c", "from importlib.metadata import version; print(version('sglang'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.stdout.strip() or "?"


def measure(python: str, repeats: int) -> dict:
    """Median seconds over ``repeats`` fresh interpreters, without and with the plugin."""
    without = [sample(python, "__no_plugin__", False) for _ in range(repeats)]
    with_ = [sample(python, "dspark_harvest", i == 0) for i in range(repeats)]
    lp_without = statistics.median(s["load_plugins_s"] for s in without)
    lp_with = statistics.median(s["load_plugins_s"] for s in with_)
    return {
        "python": python,
        "sglang": sglang_version(python),
        "import_s": statistics.median(s["import_s"] for s in without + with_),
        "load_plugins_without_s": lp_without,
        "load_plugins_with_s": lp_with,
        "added_s": lp_with - lp_without,
        "registered": all(s["registered"] for s in with_),
        "full_contract_check": with_[0]["full"],
        "repeats": repeats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--python",
        action="append",
        default=None,
        help="interpreter of an sglang environment (repeatable; default: this one)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="fresh interpreters per cell; median shown")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    results = [measure(py, args.repeats) for py in args.python or [sys.executable]]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(
        f"startup added by the plugin: load_plugins() time, median of {args.repeats} fresh interpreters "
        f"(load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)"
    )
    print(f"  {'sglang':<8}{'imports':>10}{'without':>10}{'with':>10}{'added':>10}  registered  full check")
    for r in results:
        full = r["full_contract_check"]
        full_text = "n/a" if not full else f"{full['seconds']:.2f} s ({'ok' if full['ok'] else 'FAILED'})"
        registered = "yes" if r["registered"] else "NO"
        print(
            f"  {r['sglang']:<8}{r['import_s']:>9.2f}s{r['load_plugins_without_s']:>9.2f}s"
            f"{r['load_plugins_with_s']:>9.2f}s{r['added_s']:>9.2f}s  {registered:<10}  {full_text}"
        )
    worst = max(r["added_s"] for r in results)
    verdict = "MET" if worst <= TARGET_ADDED_S else "MISSED"
    print(f"target: <= {TARGET_ADDED_S:.0f} s added per process: worst {worst:.2f} s -> {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
