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
from conftest import TARGET_CONFIG, PluginLog
from features import DECLARES, FOREIGN_DEFAULTS, MASK_FILL_DSPARK, RESOLVE_ONCE
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_dspark_plugin.architectures import DSPARK_ARCHITECTURES
from sglang_dspark_plugin.errors import (
    DsparkHarvestError,
    GeometryError,
    HarvestEnvError,
    InvalidCheckpointError,
)
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving.servability import servability, unloadable_layout
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


def expected_outcome(name: str, env: str | None) -> tuple[str, str]:
    """("ok", arm) or ("error", kind) for a fixture under an env value, from the fixture's verdict."""
    fx = FIXTURES[name]
    outcome = _plugin_outcome(name, env)
    if outcome[0] == "ok" and "model_type" not in fx.config:
        # the plugin resolves first (start of argument resolution); sglang's own load of the draft
        # config, after the rewrite to the builtin, then refuses a config without model_type
        return ("sglang", "model_type")
    return outcome


def _plugin_outcome(name: str, env: str | None) -> tuple[str, str]:
    fx = FIXTURES[name]
    if fx.expect in ("unsupported", "invalid"):
        return ("error", fx.expect)  # the census refuses before the env value matters
    if env is not None:
        arm = env.strip().lower()
        if arm not in ("dflash", "dspark"):
            return ("error", "env")
    elif fx.expect == "conflict":
        return ("error", "conflict")
    else:
        arm = fx.expect
    if arm_cannot_build(name, arm):
        return ("error", "unsupported")
    if builtin_for(name, arm) == "DSPARK" and rank_without_head_type(name):
        return ("error", "invalid")  # sglang's own parse of its config.json refuses it
    return ("ok", arm)


DENSE_DSPARK = ("DSparkDraftModel", "Qwen3DSparkModel", "LingDSparkModel")  # sglang's models/dspark.py


def builtin_for(name: str, arm: str) -> str:
    """The builtin serving a fixture under an arm: DSPARK for the shifted arm, and for a mask-fill drafter
    with a DSpark architecture name and a Markov head (DSPARK's sample_from_anchor=false layout)."""
    fx = FIXTURES[name]
    if arm == "dspark":
        return "DSPARK"
    has_markov_head = any(k.startswith("markov_head.") for k in fx.tensors)
    dspark_name = any(a in DSPARK_ARCHITECTURES for a in fx.config.get("architectures") or [])
    return "DSPARK" if has_markov_head and dspark_name else "DFLASH"


def arm_cannot_build(name: str, arm: str) -> bool:
    """The worker serving the arm cannot build this drafter, so argument resolution refuses it already.

    DSPARK: sglang's dense DSpark model (or a DFlash-named drafter) only, with the target's vocabulary;
    a mask-fill drafter served by DSPARK needs DSPARK's mask-fill layout (0.5.19 on). DFLASH: a
    DSpark-named drafter without a Markov head loads as sglang's DFlashDraftModel.
    """
    fx = FIXTURES[name]
    if not _release_builds(name, arm):
        return True
    if builtin_for(name, arm) == "DFLASH":
        return False
    if arm == "dflash" and not MASK_FILL_DSPARK:
        return True
    vocab = fx.config.get("vocab_size")  # the Markov head (the zero head too) is sized from it
    if vocab is not None and vocab != TARGET_CONFIG["vocab_size"]:
        return True
    return not any(a in (*DENSE_DSPARK, "DFlashDraftModel") for a in fx.config.get("architectures") or [])


def _release_builds(name: str, arm: str) -> bool:
    """This sglang release's class lists (``servability``, checked against sglang's own EntryClass lists
    by test_class_lists.py) name a class that builds the drafter, in a layout its loader reads."""
    fx = FIXTURES[name]
    archs = fx.config.get("architectures") or [None]
    rank = max((shape[1] for k, shape in fx.tensors.items() if k.endswith("markov_w1.weight")), default=0)
    unloadable = unloadable_layout(fx.config, list(fx.tensors))
    (verdict,) = servability(DsparkHarvest.from_name(arm), archs[0], rank, unloadable, (sglang.__version__,))
    return verdict.servable


def rank_without_head_type(name: str) -> bool:
    """config.json declares a Markov rank but no markov_head_type: sglang's parse refuses it."""
    cfg = FIXTURES[name].config
    holders = [cfg, *(cfg.get(k) or {} for k in ("dflash_config", "dspark_config"))]
    return any(h.get("markov_rank") for h in holders) and not any(h.get("markov_head_type") for h in holders)


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
    fx = FIXTURES[name]
    draft = write_checkpoint(checkpoint_dir, name)
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    outcome, detail = expected_outcome(name, env)

    if outcome != "ok":
        with pytest.raises(ValueError) as info:
            resolve(target_dir, draft)
        err = info.value
        if outcome == "sglang":
            assert "model_type" in str(err)
            return
        assert isinstance(err, DsparkHarvestError), repr(err)
        assert err.kind == detail
        if detail == "env":
            assert isinstance(err, HarvestEnvError)
            assert "MEMRA_DSPARK_HARVEST" in str(err) and repr(env) in str(err)
        if detail == "conflict":
            assert "MEMRA_DSPARK_HARVEST" in str(err)  # the message names the override
        return

    record, view = resolve(target_dir, draft)
    b = fx.block_size
    assert b is not None
    width = expected_verify_window(b, detail)
    builtin = builtin_for(name, detail)
    assert view.speculative_algorithm == builtin  # served as the builtin it resolves to
    assert resolution.plan_of(record).harvest.name() == detail
    assert view.speculative_num_draft_tokens == width
    assert view.speculative_num_steps == 1
    assert view.speculative_eagle_topk == 1
    assert resolution.plan_of(record).geometry.block_size == b
    if DECLARES:
        assert record.speculative_num_draft_tokens is None  # declared, the raw input untouched
    served = resolution.plan_of(record)
    assert served is not None
    assert served.resolution.harvest.name() == detail
    assert served.resolution.source == ("env" if env is not None else fx.expect_source)
    assert served.geometry.verify_window == width
    algo = SpeculativeAlgorithm.from_string(view.speculative_algorithm)
    assert algo is SpeculativeAlgorithm[builtin]  # sglang's own member: its predicates, its checks
    assert (
        algo.create_worker(record).__name__
        == {
            ("dflash", "DFLASH"): "HarvestDFlashWorker",
            ("dspark", "DSPARK"): "HarvestDSparkWorker",
            ("dflash", "DSPARK"): "HarvestMaskFillDSparkWorker",
        }[detail, builtin]
    )


@pytest.mark.parametrize("env", (None, "dflash", "dspark"), ids=lambda v: f"env={v!r}")
@pytest.mark.parametrize(
    "name", sorted(n for n, f in FIXTURES.items() if f.resolves and "model_type" in f.config)
)
def test_cuda_device_runs_the_builtin_handler(
    name: str, env: str | None, target_dir: Path, checkpoint_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a serving device the builtin _handle_dflash/_handle_dspark runs on our geometry."""
    fx = FIXTURES[name]
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    arm = env or fx.expect
    if arm_cannot_build(name, arm):
        with pytest.raises(ValueError, match="MEMRA_DSPARK_HARVEST|target's tokenizer") as info:
            resolve(target_dir, write_checkpoint(checkpoint_dir, name), device="cuda")
        assert info.value.kind == "unsupported"
        return
    if builtin_for(name, arm) == "DSPARK" and rank_without_head_type(name):
        with pytest.raises(InvalidCheckpointError, match="markov_head_type"):
            resolve(target_dir, write_checkpoint(checkpoint_dir, name), device="cuda")
        return
    _, view = resolve(target_dir, write_checkpoint(checkpoint_dir, name), device="cuda")
    assert view.speculative_num_draft_tokens == expected_verify_window(fx.block_size, arm)
    assert view.max_running_requests == 48  # set only by sglang's builtin DFlash-family handlers
    if builtin_for(name, arm) == "DFLASH":
        assert view.speculative_draft_attention_backend is not None  # _resolve_dflash_draft_attention_backend


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
    arm = env or fx.expect
    if arm_cannot_build(name, arm):  # refused the same way through a config file
        with pytest.raises(ValueError, match="Markov head"):
            resolve(target_dir, write_checkpoint(checkpoint_dir, name), config=config)
        return
    _, view = resolve(target_dir, write_checkpoint(checkpoint_dir, name), config=config)
    assert view.speculative_algorithm == builtin_for(name, arm)
    assert view.speculative_num_draft_tokens == expected_verify_window(fx.block_size, arm)
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
    from conftest import TARGET_CONFIG

    target = tmp_path / "target"
    target.mkdir()
    (target / "config.json").write_text(json.dumps({**TARGET_CONFIG, "num_hidden_layers": layers}))
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
