"""``inspect``'s per-release verdict is the launch's own: the same ``make_plan``, over every fixture, and
over the four drafts where the two once disagreed (no mask token on the dspark arm, no block size, no
model_type, a draft config carrying sglang's ``dspark_*`` keys)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from checkpoints import FIXTURES, write_checkpoint
from plan_expectations import ENVS, EXPECTED, PLAN_TARGET_CONFIG, outcome_of, refused, relative_where
from released_checkpoints import RELEASED

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.cli.inspect import inspect_checkpoint
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import DsparkHarvestError, UsageError
from sglang_dspark_plugin.harvest import ENV_VAR
from sglang_dspark_plugin.releases import TESTED as SGLANG_VERSIONS
from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan

ALL_FIXTURES = {**FIXTURES, **RELEASED}
DFLASH_FLAG, DSPARK_FLAG = "--speculative-dflash-block-size", "--speculative-dspark-block-size"
FLAGS = (DFLASH_FLAG, DSPARK_FLAG)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("inspect-fixtures")
    return {name: write_checkpoint(root, fx) for name, fx in ALL_FIXTURES.items()}


def _verdicts(folder: Path, env: str | None, target: Path | None) -> dict[str, dict]:
    environ = {} if env is None else {ENV_VAR: env}
    report = inspect_checkpoint(str(folder), environ=environ, target=None if target is None else str(target))
    return {s["version"]: s for s in report["servability"]}


@pytest.mark.parametrize("env", ENVS, ids=lambda v: f"env={v!r}")
@pytest.mark.parametrize("name", sorted(ALL_FIXTURES))
def test_inspect_says_per_release_what_the_launch_does(name, env, folders, plan_target) -> None:
    folder = folders[name]
    expected = {v: EXPECTED[name][v][ENVS.index(env)] for v in SGLANG_VERSIONS}
    if _is_bundling_target(folder):
        _check_as_target(folder, env)
        return
    try:
        verdicts = _verdicts(folder, env, plan_target)
    except DsparkHarvestError as err:  # the census refuses before any release is asked
        assert all(e.startswith(f"refused {err.kind} ") for e in expected.values()), (err.kind, expected)
        return
    for version, verdict in verdicts.items():
        flag = next((f for f in FLAGS if expected[version] == refused("invalid", f)), None)
        if flag is not None:
            # the launch without a block size is refused at the flag; inspect says what it does with one
            assert verdict["needs"] in (flag, None)
            _check_trial(folder, env, plan_target, version, flag, verdict)
        elif verdict["servable"]:
            assert verdict["needs"] is None
            mask_fill = verdict["sample_from_anchor"] is False
            assert outcome_of(verdict["builtin"], _harvest(folder, env), mask_fill) == expected[version]
        else:
            got = refused(verdict["kind"], relative_where(verdict["where"], str(folder)))
            assert got == expected[version], verdict["how"]


def _check_trial(folder: Path, env: str | None, target: Path, version: str, flag: str, verdict: dict) -> None:
    """A launch that gives the block size with ``flag`` is served or refused as the verdict says."""
    field = "dflash_block_size" if flag == DFLASH_FLAG else "dspark_block_size"
    request = LaunchRequest(str(folder), target=str(target), harvest_env=env, **{field: 8})
    try:
        plan = make_plan(request, SglangSupport.for_version(version))
    except DsparkHarvestError as err:
        assert not verdict["servable"] and (verdict["kind"], verdict["where"]) == (err.kind, err.where)
        return
    assert verdict["needs"] == flag
    assert (plan.builtin, plan.layout.sample_from_anchor) == (
        verdict["builtin"],
        verdict["sample_from_anchor"],
    )


def _is_bundling_target(folder: Path) -> bool:
    try:
        return inspect_checkpoint(str(folder), environ={})["bundled"] is not None
    except DsparkHarvestError:
        return False


def _check_as_target(folder: Path, env: str | None) -> None:
    """A target bundling its draft: inspect answers for a launch of it with no draft path."""
    verdicts = _verdicts(folder, env, None)
    for version, verdict in verdicts.items():
        request = LaunchRequest(draft=None, target=str(folder), harvest_env=env)
        try:
            plan = make_plan(request, SglangSupport.for_version(version))
        except DsparkHarvestError as err:
            assert not verdict["servable"] and (verdict["kind"], verdict["where"]) == (err.kind, err.where)
            continue
        assert (verdict["builtin"], verdict["sample_from_anchor"]) == (
            plan.builtin,
            plan.layout.sample_from_anchor,
        )


def _harvest(folder: Path, env: str | None) -> str:
    return json.loads(_inspect_json(folder, env))["harvest"]


def _inspect_json(folder: Path, env: str | None) -> str:
    environ = {} if env is None else {ENV_VAR: env}
    return json.dumps(inspect_checkpoint(str(folder), environ=environ))


def _copy(tmp_path: Path, drafter: str, edit) -> Path:
    folder = tmp_path / drafter
    shutil.copytree(EMBEDDED.root / drafter, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _no_mask_token(config: dict) -> None:
    config.pop("mask_token_id", None)
    config.get("dflash_config", {}).pop("mask_token_id", None)


def _both_ways(folder: Path, version: str) -> tuple[dict, Exception | None]:
    """inspect's verdict for ``version`` and the launch's own refusal (None: it plans)."""
    verdict = _verdicts(folder, None, None)[version]
    try:
        make_plan(LaunchRequest(draft=str(folder)), SglangSupport.for_version(version))
    except DsparkHarvestError as err:
        return verdict, err
    return verdict, None


def test_a_dspark_arm_draft_without_a_mask_token_is_refused_by_both(tmp_path) -> None:
    folder = _copy(tmp_path, "drafter-dspark", _no_mask_token)
    for version in SGLANG_VERSIONS:
        verdict, err = _both_ways(folder, version)
        assert err is not None and err.kind == "invalid" and "mask_token_id" in err.where
        assert not verdict["servable"] and (verdict["kind"], verdict["where"]) == (err.kind, err.where)


def test_a_draft_without_a_block_size_is_servable_with_the_flag(tmp_path, capsys) -> None:
    folder = _copy(tmp_path, "drafter-dflash", lambda c: c.pop("block_size"))
    for version in SGLANG_VERSIONS:
        verdict, err = _both_ways(folder, version)
        assert err is not None and err.where == DFLASH_FLAG  # the launch without it is refused
        assert verdict["servable"] and verdict["builtin"] == "DFLASH" and verdict["needs"] == DFLASH_FLAG
    assert main(["inspect", str(folder)]) == 0
    assert f"sglang 0.5.23  DFLASH with {DFLASH_FLAG} N" in capsys.readouterr().out


def test_a_draft_without_a_block_size_refused_for_another_reason_says_that_one(tmp_path) -> None:
    folder = _copy(tmp_path, "drafter-dspark", lambda c: (c.pop("block_size"), _no_mask_token(c)))
    for version in SGLANG_VERSIONS:
        verdict = _verdicts(folder, None, None)[version]
        assert not verdict["servable"] and verdict["needs"] is None and "mask_token_id" in verdict["where"]


def test_a_draft_config_without_model_type_is_refused_by_the_plan_naming_the_key(tmp_path) -> None:
    folder = _copy(tmp_path, "drafter-dflash", lambda c: c.pop("model_type"))
    for version in SGLANG_VERSIONS:
        verdict, err = _both_ways(folder, version)
        assert err is not None and err.kind == "invalid" and err.where.endswith("config.json: model_type")
        assert not verdict["servable"] and verdict["where"] == err.where and "model_type" in verdict["how"]


def test_a_draft_carrying_sglangs_dspark_keys_is_inspected_as_the_draft_it_is(tmp_path) -> None:
    def keys(config: dict) -> None:
        mask = config["dflash_config"]["mask_token_id"]
        config.update(dspark_block_size=config["block_size"], dspark_noise_token_id=mask)

    folder = _copy(tmp_path, "drafter-dspark", keys)
    report = inspect_checkpoint(str(folder), environ={})
    assert report["bundled"] is None and report["harvest"] == "dspark"
    for version in SGLANG_VERSIONS:
        verdict, err = _both_ways(folder, version)
        assert err is None and verdict["servable"] and verdict["builtin"] == "DSPARK"


def test_the_target_flag_adds_the_checks_against_the_target(tmp_path, plan_target) -> None:
    small = tmp_path / "small-vocab-target"
    small.mkdir()
    (small / "config.json").write_text(json.dumps({**PLAN_TARGET_CONFIG, "vocab_size": 7}))
    drafter = EMBEDDED.drafters["dspark"]
    alone = _verdicts(drafter, None, None)
    against = _verdicts(drafter, None, small)
    assert all(v["servable"] for v in alone.values())
    assert all(not v["servable"] and v["where"] == "vocab_size" for v in against.values())
    with pytest.raises(UsageError, match="local folder"):
        inspect_checkpoint(str(drafter), environ={}, target=str(tmp_path / "missing"))
