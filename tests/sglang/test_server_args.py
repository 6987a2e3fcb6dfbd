"""``prepare_server_args`` with ``--speculative-algorithm DSPARK_HARVEST`` against the real sglang.

Every fixture checkpoint x every ``MEMRA_DSPARK_HARVEST`` value resolves to its geometry or is refused
with a clear, typed ``ValueError`` before any model loads; the same through ``--config FILE.yaml``.
A release with ``resolve_once()`` (0.5.19 on) runs it and is read through ``resolved_view`` (from 0.5.20
its plugin hook receives a recording stand-in); before, ``ServerArgs.__post_init__`` resolves and the
record is read directly (``features.py``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import sglang
import yaml
from checkpoints import FIXTURES, write_checkpoint
from conftest import PluginLog
from features import DECLARES, FOREIGN_DEFAULTS, RESOLVE_ONCE
from plan_expectations import ENVS, EXPECTED, PLAN_TARGET_CONFIG, outcome_of, refused, relative_where
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_dspark_plugin.errors import (
    DsparkHarvestError,
    GeometryError,
    HarvestEnvError,
)
from sglang_dspark_plugin.sglang_plugin import register, resolution

CONFIGS = sorted((Path(__file__).resolve().parents[2] / "configs").glob("*.yaml"))
ENV_VALUES = (None, "dflash", "dspark", "dSpark ", "bogus")


def resolve(target: Path, draft: Path | None, *extra: str, device: str = "cuda", config: Path | None = None):
    """Parse and resolve like ``launch_server``; returns (record, the view that holds the results).

    ``--device cuda`` by default: DSPARK_HARVEST resolves to sglang's builtin, whose own handler refuses
    ``cpu`` exactly as for a plain DFLASH/DSPARK launch. Resolution reads configs only, no GPU needed.
    """
    argv = ["--model-path", str(target), "--device", device]
    if config is not None:
        argv = ["--config", str(config), *argv]
    else:
        argv += ["--speculative-algorithm", "DSPARK_HARVEST"]
    if draft is not None:
        argv += ["--speculative-draft-model-path", str(draft)]
    argv += list(extra)
    server_args = prepare_server_args(argv)
    if RESOLVE_ONCE:
        from sglang.srt.arg_groups.overrides import resolved_view

        server_args.resolve_once()
        return server_args, resolved_view(server_args)
    return server_args, server_args


def expected(name: str, env: str | None) -> str:
    """What a launch of fixture ``name`` must do on this release (``plan_expectations.EXPECTED``), the
    override as sglang reads it (``dSpark `` is dspark); a release outside the table: what ``inspect``
    says of it (the same ``make_plan`` on its support record)."""
    arm = None if env is None else env.strip().lower()
    if arm not in (None, "dflash", "dspark") and FIXTURES[name].expect not in ("invalid", "unsupported"):
        return refused("env", "MEMRA_DSPARK_HARVEST")  # a census that refuses refuses first
    arm = arm if arm in ("dflash", "dspark") else None
    rows = EXPECTED[name].get(sglang.__version__)
    return inspect_says(_FOLDERS[name], arm) if rows is None else rows[ENVS.index(arm)]


def inspect_says(draft: Path, env: str | None, target: Path | None = None) -> str:
    """``inspect``'s verdict for this release, in the table's words: a verdict that needs a block-size
    flag is, for a launch without it, a refusal at that flag."""
    from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport
    from sglang_dspark_plugin.serving.verdict import release_verdict

    folder = str(draft)
    request = LaunchRequest(draft=folder, target=None if target is None else str(target), harvest_env=env)
    verdict = release_verdict(request, SglangSupport.for_version(sglang.__version__))
    if verdict.needs is not None:
        return refused("invalid", verdict.needs)
    if verdict.builtin is None:
        return refused(str(verdict.kind), relative_where(verdict.where, folder))
    harvest = "dflash" if verdict.builtin == "DFLASH" or verdict.sample_from_anchor is False else "dspark"
    return outcome_of(verdict.builtin, harvest, verdict.sample_from_anchor is False)


_FOLDERS: dict[str, Path] = {}


def pipeline_says(name: str, target: Path, checkpoint_dir: Path, **kw) -> tuple[str, object]:
    """What sglang's real argument pipeline does with the fixture, in the table's words, and the
    resolved (record, view) or the error."""
    _FOLDERS.setdefault(name, write_checkpoint(checkpoint_dir, name))
    return pipeline_says_of(_FOLDERS[name], target, **kw)


def pipeline_says_of(draft: Path, target: Path, **kw) -> tuple[str, object]:
    """``pipeline_says`` for any draft folder."""
    try:
        record, view = resolve(target, draft, **kw)
    except DsparkHarvestError as err:
        return refused(err.kind, relative_where(err.where, str(draft))), err
    plan = resolution.plan_of(record)
    assert plan is not None
    return outcome_of(view.speculative_algorithm, plan.harvest.name(), plan.layout.mask_fill_dspark), (
        record,
        view,
    )


def expected_verify_window(block_size: int, arm: str) -> int:
    # mask-fill harvests rows 1..b-1 (verify b); shifted harvests rows 0..b-1 (verify b+1)
    return block_size if arm == "dflash" else block_size + 1


@pytest.fixture(autouse=True)
def registered() -> None:
    assert register() is True


@pytest.mark.parametrize("env", ENV_VALUES, ids=lambda v: f"env={v!r}")
@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_every_fixture_and_env(
    name: str, env: str | None, target_dir: Path, checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang's real pipeline serves or refuses each fixture exactly as the table states, and exactly
    as ``inspect`` reports for this release (an override sglang refuses aside)."""
    fx = FIXTURES[name]
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    said, got = pipeline_says(name, target_dir, checkpoint_dir)
    assert said == expected(name, env), getattr(got, "message", got)
    arm = None if env is None else env.strip().lower()
    if arm in (None, "dflash", "dspark"):
        assert said == inspect_says(_FOLDERS[name], arm, target_dir)
    if isinstance(got, Exception):
        assert isinstance(got, ValueError)  # sglang shows argument errors as ValueError
        if got.kind == "env":
            assert isinstance(got, HarvestEnvError) and repr(env) in str(got)
        if got.kind in ("env", "conflict"):
            assert "MEMRA_DSPARK_HARVEST" in str(got)  # the message names the override
        return
    record, view = got
    served = resolution.plan_of(record)
    b = fx.block_size
    assert served is not None and b is not None
    detail = served.harvest.name()
    assert view.speculative_num_draft_tokens == expected_verify_window(b, detail)
    assert view.speculative_num_steps == 1 and view.speculative_eagle_topk == 1
    # with a serving device (cuda) sglang's builtin _handle_dflash/_handle_dspark ran on the plan's geometry
    assert view.max_running_requests == 48  # set only by sglang's builtin DFlash-family handlers
    if served.builtin == "DFLASH":
        assert view.speculative_draft_attention_backend is not None  # _resolve_dflash_draft_attention_backend
    assert served.geometry.block_size == b
    if DECLARES:
        assert record.speculative_num_draft_tokens is None  # declared, the raw input untouched
    assert served.resolution.source == ("env" if env is not None else fx.expect_source)
    algo = SpeculativeAlgorithm.from_string(view.speculative_algorithm)
    assert algo is SpeculativeAlgorithm[served.builtin]  # sglang's own member: its predicates, its checks
    assert (
        algo.create_worker(record).__name__
        == {
            ("dflash", "DFLASH"): "HarvestDFlashWorker",
            ("dspark", "DSPARK"): "HarvestDSparkWorker",
            ("dflash", "DSPARK"): "HarvestMaskFillDSparkWorker",
        }[detail, served.builtin]
    )


@pytest.mark.parametrize("arm", ("dflash", "dspark"))
def test_a_builtin_handler_that_changes_the_plans_window_is_refused(
    arm: str, target_dir: Path, checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check after sglang's own speculative handling runs on every release's route (0.5.17's
    ``__post_init__``, 0.5.19's ``resolve_once``, the resolution hooks from 0.5.20): a builtin handler
    that moves the verify window the plan declared stops the launch."""
    from sglang.srt.arg_groups import overrides, speculative_hook

    handler = "_handle_dflash" if arm == "dflash" else "_handle_dspark"
    real = getattr(speculative_hook, handler)

    def widening(server_args):  # writes the way this release's own handlers write
        real(server_args)
        if DECLARES:
            overrides.declare_resolution(server_args, "test", speculative_num_draft_tokens=99)
        else:
            server_args.speculative_num_draft_tokens = 99

    monkeypatch.setattr(speculative_hook, handler, widening)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", arm)
    with pytest.raises(GeometryError, match="changed what the") as info:
        resolve(target_dir, write_checkpoint(checkpoint_dir, "specforge_dflash"))
    assert "speculative_num_draft_tokens = 99" in info.value.message


@pytest.mark.parametrize("arm", ("dflash", "dspark"))
def test_num_draft_tokens_flag(arm: str, target_dir: Path, checkpoint_dir: Path, monkeypatch) -> None:
    name = "specforge_dflash"  # both arms can build it (its vocabulary is the target's)
    b = FIXTURES[name].block_size
    draft = write_checkpoint(checkpoint_dir, name)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", arm)
    right = expected_verify_window(b, arm)
    _, view = resolve(target_dir, draft, "--speculative-num-draft-tokens", str(right))
    assert view.speculative_num_draft_tokens == right
    # a wider window verifies drafts from rows never trained: exactly the silent-collapse mistake
    wrong = right + 1
    with pytest.raises(GeometryError) as info:
        resolve(target_dir, draft, "--speculative-num-draft-tokens", str(wrong))
    msg = str(info.value)
    assert isinstance(info.value, ValueError)
    assert f"--speculative-num-draft-tokens {wrong}" in msg and "wider" in msg
    assert f"the widest: --speculative-num-draft-tokens {right}" in msg
    assert f"block_size {b}" in msg and arm in msg
    assert "silent collapse" in msg
    assert str(draft) in msg


@pytest.mark.parametrize("arm", ("dflash", "dspark"))
def test_a_narrower_window_is_served_as_the_builtin_serves_it(
    arm: str, target_dir: Path, checkpoint_dir: Path, monkeypatch
) -> None:
    """Fewer drafts from the same aligned rows (high batch sizes want it): served; the plan, the
    telemetry's gamma and sglang's resolved window all say the served width."""
    name = "specforge_dflash"
    b = FIXTURES[name].block_size
    draft = write_checkpoint(checkpoint_dir, name)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", arm)
    narrower = expected_verify_window(b, arm) - 1
    record, view = resolve(target_dir, draft, "--speculative-num-draft-tokens", str(narrower))
    plan = resolution.plan_of(record)
    assert view.speculative_num_draft_tokens == narrower == plan.geometry.verify_window
    assert plan.narrowed and plan.trained_block_size == b and plan.manifest["trained_block_size"] == b
    assert plan.geometry.gamma == narrower - 1
    if arm == "dspark":  # DSPARK takes its gamma from its block-size flag: the plan declares it
        assert view.speculative_dspark_block_size == plan.geometry.gamma


@pytest.mark.parametrize("flag", ("--speculative-dflash-block-size", "--speculative-dspark-block-size"))
@pytest.mark.parametrize("arm", ("dflash", "dspark"))
def test_block_size_flags(flag: str, arm: str, target_dir: Path, checkpoint_dir: Path, monkeypatch) -> None:
    name = "specforge_dflash"  # both arms can build it (its vocabulary is the target's)
    b = FIXTURES[name].block_size
    draft = write_checkpoint(checkpoint_dir, name)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", arm)
    _, view = resolve(target_dir, draft, flag, str(b))
    assert view.speculative_num_draft_tokens == expected_verify_window(b, arm)
    with pytest.raises(GeometryError) as info:
        resolve(target_dir, draft, flag, str(b + 1))
    msg = str(info.value)
    assert f"{flag} {b + 1}" in msg and "wider" in msg and "silent collapse" in msg


def test_missing_draft_path_is_refused(target_dir: Path) -> None:
    with pytest.raises(ValueError) as info:
        resolve(target_dir, None)
    assert "--speculative-draft-model-path" in str(info.value)


def test_manifest_and_startup_log(
    target_dir: Path, checkpoint_dir: Path, tmp_path: Path, monkeypatch, plugin_log: PluginLog
) -> None:
    import logging

    name = "specforge_dflash"
    draft = write_checkpoint(checkpoint_dir, name)
    out = tmp_path / "manifest.json"
    monkeypatch.setenv("MEMRA_DSPARK_MANIFEST", str(out))
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", "dspark")  # contradicts the census: one warning
    resolve(target_dir, draft)
    manifest = json.loads(out.read_text())
    b = FIXTURES[name].block_size
    assert manifest["producer"] == "sglang-plugin"
    assert manifest["harvest"] == "dspark" and manifest["source"] == "env"
    assert manifest["census_harvest"] == "dflash"
    assert manifest["block_size"] == b and manifest["verify_window"] == b + 1
    assert manifest["harvested_rows"] == list(range(0, b))
    assert manifest["speculative_num_draft_tokens"] == b + 1
    assert manifest["checkpoint"] == str(draft)
    assert manifest["versions"]["sglang"] == sglang.__version__
    infos = plugin_log.at(logging.INFO)
    assert any("harvest=dspark" in m and "MEMRA_DSPARK_HARVEST='dspark'" in m for m in infos)
    assert sum("geometry manifest:" in m for m in infos) == 1
    warnings = plugin_log.at(logging.WARNING)
    assert len([w for w in warnings if "contradicts the checkpoint census" in w]) == 1
    resolve(target_dir, draft)  # a second launch in the same process announces its own plan
    assert sum("geometry manifest:" in m for m in plugin_log.at(logging.INFO)) == 2


def test_unwritable_manifest_path_is_refused(target_dir: Path, checkpoint_dir: Path, tmp_path, monkeypatch):
    monkeypatch.setenv("MEMRA_DSPARK_MANIFEST", str(tmp_path / "no-such-dir" / "m.json"))
    with pytest.raises(ValueError) as info:
        resolve(target_dir, write_checkpoint(checkpoint_dir, "specforge_dflash"))
    assert "MEMRA_DSPARK_MANIFEST" in str(info.value)


def test_configs_exist() -> None:
    assert [p.name for p in CONFIGS] and all(p.suffix == ".yaml" for p in CONFIGS)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
@pytest.mark.parametrize("env", (None, "dflash", "dspark"), ids=lambda v: f"env={v!r}")
@pytest.mark.parametrize("name", ("zlab_dflash", "specforge_dspark", "dspark_markov_rank0"))
def test_config_files(
    config: Path, env: str | None, name: str, target_dir: Path, checkpoint_dir: Path, monkeypatch
) -> None:
    fx = FIXTURES[name]
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    settings = yaml.safe_load(config.read_text())
    assert settings["speculative-algorithm"] == "DSPARK_HARVEST"
    said, got = pipeline_says(name, target_dir, checkpoint_dir, config=config)
    assert said == expected(name, env)  # served or refused the same way through a config file
    if isinstance(got, Exception):
        return
    _, view = got
    assert view.speculative_num_draft_tokens == expected_verify_window(fx.block_size, said.split()[-1])
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    options = {a.dest for a in parser._actions}
    for key, value in settings.items():
        field = key.replace("-", "_")
        assert field in options, key  # every key is a real server argument
        if field != "speculative_algorithm":
            assert getattr(view, field) == value, key


@pytest.mark.parametrize("flag", ("--speculative-num-steps", "--speculative-eagle-topk"))
def test_steps_and_topk_are_overridden_with_a_warning(
    flag: str, target_dir: Path, checkpoint_dir: Path, plugin_log: PluginLog
) -> None:
    import logging

    _, view = resolve(target_dir, write_checkpoint(checkpoint_dir, "specforge_dflash"), flag, "3")
    assert view.speculative_num_steps == 1 and view.speculative_eagle_topk == 1
    warnings = [w for w in plugin_log.at(logging.WARNING) if flag in w]
    assert len(warnings) == 1 and "overriding 3 to 1" in warnings[0]


def test_the_plan_is_read_through_the_record_and_the_recording_stand_in(
    target_dir: Path, checkpoint_dir: Path
) -> None:
    record, _ = resolve(target_dir, write_checkpoint(checkpoint_dir, "specforge_dspark"))
    first = resolution.plan_of(record)
    assert first is not None
    assert resolution.unwrap_record(record) is record
    assert resolution.launch_request(record, {}).draft == first.request.draft
    window = first.geometry.verify_window
    assert resolution.read_arg(record, "speculative_num_draft_tokens") == window
    assert record.speculative_num_draft_tokens == (None if DECLARES else window)  # declared, or set in place
    if FOREIGN_DEFAULTS:
        from sglang.srt.arg_groups.overrides import _ForeignDefaults

        stand_in = _ForeignDefaults(record)  # what 0.5.20 on hands a plugin's handle_server_args
        assert resolution.unwrap_record(stand_in) is record
        assert resolution.plan_of(stand_in) is first
        assert resolution.read_arg(stand_in, "speculative_num_draft_tokens") == window


@pytest.mark.parametrize("layers", (7, 8))
def test_uncapturable_target_layers_are_refused_before_any_load(layers, tmp_path, checkpoint_dir) -> None:
    """sglang captures layer i's output before layer i+1: a Qwen3 target of N layers can give a
    drafter layers 0..N-2 only. The embedded-style drafter reads [1, 4, 6]: servable from 8 layers,
    not from 7 (layer 6 is then the last one)."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**PLAN_TARGET_CONFIG, "num_hidden_layers": layers}))
    draft = write_checkpoint(checkpoint_dir, "specforge_dflash")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["dflash_config"]["target_layer_ids"] = [1, 4, 6]
    cfg["num_target_layers"] = layers
    servable = tmp_path / "draft"
    servable.mkdir()
    for f in draft.iterdir():
        (servable / f.name).write_bytes(f.read_bytes())
    (servable / "config.json").write_text(json.dumps(cfg))
    if layers == 8:
        _, view = resolve(target, servable)
        assert int(view.speculative_num_draft_tokens) == 4  # mask-fill, block 4: the verify window
        return
    with pytest.raises(ValueError) as info:
        resolve(target, servable)
    err = info.value
    assert isinstance(err, DsparkHarvestError) and err.kind == "unsupported"
    msg = str(err)
    assert "sglang cannot serve this drafter" in msg and "[1, 4, 6]" in msg and "[6]" in msg
    assert "7 layers" in msg and "<= 5" in msg


def _no_mask_token(config: dict) -> None:
    config.pop("mask_token_id", None)
    config.get("dflash_config", {}).pop("mask_token_id", None)


def _with_dspark_keys(config: dict) -> None:
    config.update(
        dspark_block_size=config["block_size"], dspark_noise_token_id=config["dflash_config"]["mask_token_id"]
    )


ONCE_DISAGREED = {  # drafts where inspect and the launch once disagreed: (drafter, config edit)
    "dspark-arm-without-mask-token": ("drafter-dspark", _no_mask_token),
    "without-block-size": ("drafter-dflash", lambda c: c.pop("block_size")),
    "without-model-type": ("drafter-dflash", lambda c: c.pop("model_type")),
    "with-sglangs-dspark-keys": ("drafter-dspark", _with_dspark_keys),
}


@pytest.mark.parametrize("case", sorted(ONCE_DISAGREED))
def test_inspect_and_the_pipeline_agree_where_they_once_did_not(case: str, tmp_path: Path) -> None:
    """Through sglang's own pipeline, with the embedded target: what inspect reports for this release."""
    import shutil

    from sglang_dspark_plugin.embedded import EMBEDDED

    drafter, edit = ONCE_DISAGREED[case]
    folder = tmp_path / drafter
    shutil.copytree(EMBEDDED.root / drafter, folder)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    said, got = pipeline_says_of(folder, EMBEDDED.target)
    assert said == inspect_says(folder, None, EMBEDDED.target), getattr(got, "message", got)
    served = not isinstance(got, Exception)
    assert served == (case == "with-sglangs-dspark-keys")  # the other three are refused, typed


def test_a_dflash_parser_that_reads_the_anchor_first_keys_never_gets_a_layout_shifted_twice(
    target_dir: Path, checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang PR 40203 makes DFLASH's draft-config parser honour sample_from_anchor /
    query_zero_predicts_next (PR 40181 refuses them). The plugin feature-detects such a parser; with a
    stand-in that honours the keys, a draft declaring the anchor-first layout, forced mask-fill, is
    refused by the real pipeline instead of being shifted twice."""
    import dataclasses

    from sglang.srt.speculative import dflash_utils

    assert resolution.dflash_reads_layout() is False  # no release up to 0.5.23 reads them
    real = dflash_utils.parse_dflash_draft_config

    def honouring(*, draft_hf_config):  # answers differently where the keys declare anchor-first
        parsed = real(draft_hf_config=draft_hf_config)
        get = (
            draft_hf_config.get
            if isinstance(draft_hf_config, dict)
            else lambda k: getattr(draft_hf_config, k, None)
        )
        nested = get("dflash_config") or {}
        declared = get("sample_from_anchor") is True or any(
            nested.get(k) is True for k in ("sample_from_anchor", "query_zero_predicts_next")
        )
        return (
            dataclasses.replace(parsed, mask_token=parsed.mask_token + "|anchor-first")
            if declared
            else parsed
        )

    monkeypatch.setattr(dflash_utils, "parse_dflash_draft_config", honouring)
    assert resolution.dflash_reads_layout() is True
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", "dflash")
    said, got = pipeline_says("query_zero_predicts_next", target_dir, checkpoint_dir)
    assert said == refused("unsupported", "config.json: dflash_config.query_zero_predicts_next"), got
    assert "second time" in str(got)
