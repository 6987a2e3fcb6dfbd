"""A launch without ``--speculative-draft-model-path`` whose target bundles its DSPARK draft, through
sglang's real argument pipeline: ``DSPARK_HARVEST`` resolves every field as a plain ``--speculative-
algorithm DSPARK`` launch does (sglang's handler declares the draft path, the plan censused that very
folder), and refuses where the builtin refuses. The two forms: the target config's ``dspark_*`` keys
(sglang 0.5.17 and 0.5.23) and a ``dspark/`` subfolder (0.5.23; 0.5.17 refuses both launches)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from bundled_checkpoints import hub_cache, keys_target, subfolder_target
from features import RESOLVE_ONCE, SUBFOLDER_DRAFT
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_dspark_plugin.serving import ServeRefusal
from sglang_dspark_plugin.serving.bundled import KEYS, SUBFOLDER
from sglang_dspark_plugin.serving.stages import check_served_draft
from sglang_dspark_plugin.sglang_plugin import register
from sglang_dspark_plugin.sglang_plugin.resolution import plan_of
from sglang_dspark_plugin.sglang_plugin.workers import HarvestDSparkWorker

IS_0523 = SUBFOLDER_DRAFT  # the dspark/ subfolder form: 0.5.23
BUILTIN_REFUSAL = "requires setting --speculative-draft-model-path"


@pytest.fixture(autouse=True)
def registered() -> None:
    assert register() is True


def resolve(target: str | Path, algorithm: str, *extra: str):
    """``launch_server``'s parse and resolution, no draft path; (record, resolved view)."""
    argv = ["--model-path", str(target), "--device", "cuda", "--speculative-algorithm", algorithm, *extra]
    args = prepare_server_args(argv)
    if RESOLVE_ONCE:  # 0.5.19 on: the resolution pipeline runs here, not in ServerArgs' __post_init__
        from sglang.srt.arg_groups.overrides import resolved_view

        args.resolve_once()
        return args, resolved_view(args)
    return args, args


def _fields() -> list[str]:
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return sorted({a.dest for a in parser._actions if a.dest not in ("help", "config", "random_seed")})


def outcome(target: str | Path, algorithm: str, *extra: str):
    """Every resolved field, or the refusal."""
    try:
        _, view = resolve(target, algorithm, *extra)
    except Exception as err:  # noqa: BLE001 - the refusal IS the outcome compared
        return ("refused", type(err).__name__, str(err))
    return ("resolved", {n: getattr(view, n, "<unset>") for n in _fields()})


def assert_parity(target: str | Path, *extra: str) -> None:
    want, got = outcome(target, "DSPARK", *extra), outcome(target, "DSPARK_HARVEST", *extra)
    assert got[0] == want[0] == "resolved", (got, want)
    differs = {k: (got[1][k], want[1][k]) for k in want[1] if got[1][k] != want[1][k]}
    assert not differs


def served_plan(target: str | Path, *extra: str):
    record, view = resolve(target, "DSPARK_HARVEST", *extra)
    plan = plan_of(record)
    assert plan is not None and plan.bundled is not None
    check_served_draft(plan, view.speculative_draft_model_path)  # what the worker checks
    assert SpeculativeAlgorithm[str(view.speculative_algorithm)].create_worker(record) is HarvestDSparkWorker
    return plan, view


def test_the_adapter_detects_the_subfolder_form_in_sglangs_code() -> None:
    from sglang_dspark_plugin.sglang_plugin.resolution import sglang_support

    assert sglang_support().dspark_subfolder is IS_0523


def test_dspark_keys_resolve_as_the_builtin_on_every_version(tmp_path: Path) -> None:
    target = keys_target(tmp_path / "v4")
    assert_parity(target)
    plan, view = served_plan(target)
    assert plan.bundled.form == KEYS
    assert view.speculative_draft_model_path == plan.draft == plan.cfg.path == str(target)
    assert view.speculative_num_draft_tokens == plan.geometry.verify_window == 6


def test_a_narrower_gamma_of_a_bundled_head_is_served_as_the_builtin_serves_it(tmp_path: Path) -> None:
    target = keys_target(tmp_path / "v4")
    assert_parity(target, "--speculative-dspark-block-size", "3")
    plan, view = served_plan(target, "--speculative-dspark-block-size", "3")
    assert plan.narrowed and view.speculative_num_draft_tokens == 4


def test_a_dspark_subfolder_is_served_where_the_builtin_finds_it(tmp_path: Path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    if not IS_0523:  # no subfolder form: the builtin refuses, and the plugin with it, saying so
        want = outcome(target, "DSPARK")
        assert want[0] == "refused" and BUILTIN_REFUSAL in want[2]
        with pytest.raises(ServeRefusal) as info:
            resolve(target, "DSPARK_HARVEST")
        assert BUILTIN_REFUSAL in info.value.message and "0.5.23" in info.value.message
        return
    assert_parity(target)
    plan, view = served_plan(target)
    assert plan.bundled.form == SUBFOLDER
    assert view.speculative_draft_model_path == plan.draft == os.path.join(str(target), "dspark")
    assert plan.cfg.path == str(target / "dspark")
    assert view.speculative_draft_model_revision is None  # as the builtin leaves it


def test_no_bundled_draft_is_refused_by_both(tmp_path: Path) -> None:
    target = subfolder_target(tmp_path / "target", None)
    want = outcome(target, "DSPARK")
    assert want[0] == "refused" and BUILTIN_REFUSAL in want[2]
    with pytest.raises(ValueError) as info:
        resolve(target, "DSPARK_HARVEST")
    assert "--speculative-draft-model-path" in str(info.value) and "dspark_block_size" in str(info.value)


_HUB_SCRIPT = r"""
import json, sys
from sglang.srt import plugins
plugins.load_plugins()
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/.."]
import test_bundled as t
out = {a: t.outcome(sys.argv[2], a) for a in ("DSPARK", "DSPARK_HARVEST")}
if out["DSPARK_HARVEST"][0] == "resolved":
    record, view = t.resolve(sys.argv[2], "DSPARK_HARVEST")
    plan = t.plan_of(record)
    out["plan"] = [plan.cfg.path, plan.draft, view.speculative_draft_model_path]
print("RESULT " + json.dumps(out, sort_keys=True, default=str))
"""


def test_a_hub_target_bundles_its_subfolder_from_the_same_cache(tmp_path: Path) -> None:
    """huggingface_hub reads HF_HUB_CACHE and HF_HUB_OFFLINE at import: a fresh process."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = subfolder_target(tmp_path / "main", "drafter-dspark-markov")
    cache = hub_cache(tmp_path / "hub", "org/tiny-target", {"main": (commit, folder)})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMRA_DSPARK_", "HF_"))}
    env.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", _HUB_SCRIPT, str(Path(__file__).parent), "org/tiny-target"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT ") :])
    want, ours = got["DSPARK"], got["DSPARK_HARVEST"]
    if not IS_0523:
        assert want[0] == ours[0] == "refused" and BUILTIN_REFUSAL in want[2] and "0.5.23" in ours[2]
        return
    assert ours == want and want[0] == "resolved"
    snapshot_dspark = str(cache / "models--org--tiny-target" / "snapshots" / commit / "dspark")
    assert got["plan"] == [snapshot_dspark, "org/tiny-target/dspark", snapshot_dspark]
