"""scripts/bench_check.py grades a `check --json` report against the issue's targets."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench_check.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_check"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def _run(strategy: str, harvest: str, accept: float, tps: float, exact: bool = True) -> dict:
    return {
        "drafter": strategy,
        "drafter_strategy": strategy,
        "harvest": harvest,
        "matched": strategy == harvest,
        "accept_length": accept,
        "per_position": [],
        "exact_match": exact,
        "tokens_per_s": tps,
        "probe_verdict": "aligned",
    }


def _report(**over) -> dict:
    runs = {
        ("dflash", "dflash"): _run("dflash", "dflash", 3.0, 200.0),
        ("dflash", "dspark"): _run("dflash", "dspark", 1.2, 80.0),
        ("dspark", "dflash"): _run("dspark", "dflash", 1.1, 80.0),
        ("dspark", "dspark"): _run("dspark", "dspark", 3.2, 180.0),
    }
    for key, run in over.items():
        runs[tuple(key.split("_"))] = run
    return {"runs": list(runs.values()), "ar_tokens_per_s": 100.0, "manifest": {}}


def test_all_targets_pass_on_a_good_report():
    results = _bench().grade(_report())
    # four per drafter: ratio, matched accept, speedup, exactness
    assert len(results) == 8 and all(t.ok for t in results)


def test_each_target_can_miss():
    bench = _bench()
    cases = {
        "dflash: matched / mismatched accept length 1.88x >= 2.0x": ("dflash_dspark", 1.6, 80.0, True),
        "dspark: matched accept length 2.40 >= 2.5": ("dspark_dspark", 2.4, 180.0, True),
        "dspark: matched speedup over autoregressive 1.40x >= 1.5x": ("dspark_dspark", 3.2, 140.0, True),
        "dflash: exact in both harvests": ("dflash_dspark", 1.2, 80.0, False),
    }
    for name, (key, accept, tps, exact) in cases.items():
        strategy, harvest = key.split("_")
        run = _run(strategy, harvest, accept, tps, exact)
        missed = [t.name for t in bench.grade(_report(**{key: run})) if not t.ok]
        assert missed == [name], (name, missed)


def test_from_json_prints_pass_and_miss(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_report(dspark_dspark=_run("dspark", "dspark", 2.4, 180.0))))
    assert _bench().main(["--from-json", str(path)]) == 1
    out = capsys.readouterr().out
    assert "MISS  dspark: matched accept length 2.40 >= 2.5" in out
    assert "PASS  dflash: matched accept length 3.00 >= 2.5" in out


def test_two_drafters_of_one_strategy_are_graded_and_printed_apart(tmp_path, capsys):
    report = _report()
    for harvest, accept, tps in (("dflash", 2.9, 150.0), ("dspark", 4.2, 230.0)):
        run = _run("dspark", harvest, accept, tps)
        report["runs"].append({**run, "drafter": "drafter-dspark-markov"})
    results = _bench().grade(report)
    assert len(results) == 12
    missed = [t.name for t in results if not t.ok]
    assert missed == ["drafter-dspark-markov: matched / mismatched accept length 1.45x >= 2.0x"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(report))
    assert _bench().main(["--from-json", str(path)]) == 1
    out = capsys.readouterr().out
    assert "drafter-dspark-markov dspark   dspark   True        4.20" in out
    assert "PASS  drafter-dspark-markov: matched accept length 4.20 >= 2.5" in out
