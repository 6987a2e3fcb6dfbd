"""``scripts/gpu_validate.py --cpu-harness``: the GPU script's deployment checks, run for real here.

sglang's real server on CPU (the served tests' patches and engine arguments), the embedded target and
a DSpark-architecture drafter: on a sglang with DSPARK's mask-fill layout, the mask-fill DSpark drafter
(served by DSPARK with ``sample_from_anchor`` false and its gamma flag); before it, the shifted drafter
with a Markov head (DSPARK), whose forced dflash arm the plan refuses and the server must refuse too.
The script must pass this correct deployment, and its checks must fail once one run is swapped for
another (a broken deployment: the plugin serving other tokens and rounds than its builtin). Without
``--draft``, a draft bundled in the target's ``dspark/`` subfolder: every run launched without a draft
path, served by the plugin as by the builtin DSPARK where sglang looks there, refused by both where not.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path

from bundled_checkpoints import subfolder_target
from features import HAS_MASK_FILL_DSPARK, SUBFOLDER_DRAFT

from sglang_dspark_plugin.embedded import EMBEDDED

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

import validate_deployment as vd  # noqa: E402


def _load_script():
    spec = importlib.util.spec_from_file_location("gpu_validate", REPO / "scripts" / "gpu_validate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_gpu_validate_passes_a_correct_cpu_deployment_and_fails_a_broken_one(tmp_path: Path) -> None:
    from served import free_port

    gv = _load_script()
    drafter = "drafter-dspark-maskfill" if HAS_MASK_FILL_DSPARK else "drafter-dspark-markov"
    census_arm = "dflash" if HAS_MASK_FILL_DSPARK else "dspark"
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in EMBEDDED.prompts), encoding="utf-8")
    argv = [
        "--cpu-harness", "--model-path", str(EMBEDDED.target), "--draft", str(EMBEDDED.root / drafter),
        "--prompts", str(prompts), "--max-new-tokens", "64", "--port", str(free_port()),
        "--workdir", str(tmp_path / "runs"), "--out", str(tmp_path / "report.json"),
        "--alarm-warmup", "64", "--alarm-window", "64", "--startup-timeout", "900",
    ]  # fmt: skip
    code, report, runs, results = gv.validate_deployment(gv.parse_args(argv))
    failed = [c for c in report["checks"] if not c["ok"]]
    assert code == 0 and not failed, failed
    assert report["census_arm"] == census_arm and (tmp_path / "report.json").exists()
    names = {c["check"] for c in report["checks"]}
    assert f"{census_arm}: tokens equal the builtin's" in names  # the census arm against its builtin
    assert f"{census_arm}: batched tokens equal the builtin's" in names
    builtin = next(r for r in runs if r.name == f"builtin-{census_arm}")
    assert builtin.spec_args[:2] == ["--speculative-algorithm", "DSPARK"]
    if HAS_MASK_FILL_DSPARK:  # the builtin with the gamma flag the plan declares (b-1 drafts)
        assert "--speculative-dspark-block-size" in builtin.spec_args
        assert "plugin-dspark: alarm raised" in names and "plugin-auto: probe says matched" in names
    else:  # the forced mask-fill arm of a DSpark drafter: refused by the plan and by the server
        assert "plugin-dflash: refused, as the plan refuses it" in names
    info = report["information"]
    # the settings reached the scheduler's worker through the plan: it timed its work, and said why
    # the sync debug mode checked nothing here
    assert info["sync_debug"]["plugin-auto"] == "not checked: no CUDA device"
    cost = info["host_cost"]["plugin-auto"]
    assert cost["windows"] >= 1 and cost["plugin_us_per_round"] > 0
    assert info["exact_vs_no_speculation"]["plugin-auto"]["requests"] == len(EMBEDDED.prompts)

    # a broken deployment: the plugin's census arm serving what another run served
    other = next(r.name for r in runs if r.plugin and r.name != "plugin-auto")
    broken = dict(results)
    if results[other].outcome is not None:
        broken["plugin-auto"] = results[other]
    else:  # the other arm was refused: the census arm's own run with one token changed
        got = copy.deepcopy(results["plugin-auto"])
        got.outcome.outputs[0][-1] += 1
        broken["plugin-auto"] = got
    bad = {c.name for c in vd.evaluate(runs, broken, census_arm) if not c.ok}
    assert bad & {
        f"{census_arm}: tokens equal the builtin's",
        f"{census_arm}: verify rounds per request equal the builtin's",
        f"{census_arm}: meta_info accept lengths equal the builtin's",
    }, bad


def test_gpu_validate_serves_a_bundled_draft_as_the_builtin_finds_it(tmp_path: Path) -> None:
    from served import free_port

    gv = _load_script()
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov", weights=True)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in EMBEDDED.prompts), encoding="utf-8")
    argv = [
        "--cpu-harness", "--model-path", str(target), "--prompts", str(prompts), "--max-new-tokens", "64",
        "--port", str(free_port()), "--workdir", str(tmp_path / "runs"), "--alarm-warmup", "64",
        "--alarm-window", "64", "--startup-timeout", "900",
    ]  # fmt: skip
    args = gv.parse_args(argv)
    code, report, runs, results = gv.validate_deployment(args)
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    failed = [c for c in report["checks"] if not c["ok"]]
    assert code == 0 and not failed, failed
    assert report["census_arm"] == "dspark"
    for run in runs:  # the plugin's and the builtin's launches alike name no draft
        assert "--speculative-draft-model-path" not in gv.server_command(args, run, [])
    if not SUBFOLDER_DRAFT:  # sglang's DSPARK does not look in dspark/: the plan refuses, the server too
        assert checks["plugin-auto: refused, as the plan refuses it"]
        assert not any(r.name.startswith("builtin-") for r in runs)
        assert "does not look there" in results["plugin-auto"].log
        return
    assert checks["plugin-auto: serves the draft bundled in the target (its dspark/ subfolder)"]
    assert (
        checks["dspark: tokens equal the builtin's"] and checks["dspark: batched tokens equal the builtin's"]
    )
    assert checks["dspark: verify rounds per request equal the builtin's"]
    assert checks["plugin-auto: probe says matched"]
    if HAS_MASK_FILL_DSPARK:  # the forced mask-fill arm served (DSPARK, sample_from_anchor false): caught
        assert (
            checks["plugin-dflash: alarm raised"]
            and checks["plugin-dflash: probe names MEMRA_DSPARK_HARVEST=dspark"]
        )
    else:
        assert checks["plugin-dflash: refused, as the plan refuses it"]
    builtin = next(r for r in runs if r.name == "builtin-dspark")
    assert builtin.spec_args[:2] == ["--speculative-algorithm", "DSPARK"]
