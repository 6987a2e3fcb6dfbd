"""Serving limits, refused or handled during argument resolution through sglang's real pipeline.

* a Markov head that only the tensors declare (no rank in config.json) is served at its real rank and
  head type, not replaced by the zero rank-1 head (which sglang's loader would fail on, or, for a real
  rank-1 head, silently zero);
* a dspark-arm drafter whose vocabulary is not the target's is refused, naming both sizes;
* a draft config without a block size takes it from sglang's block-size flag, and is refused, naming
  the flag, when there is none;
* with data-parallel attention every DP group's first rank keeps the accept telemetry.
"""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

import pytest
from checkpoints import FIXTURES, Fixture, write_checkpoint
from conftest import PluginLog
from features import HAS_MASK_FILL_DSPARK
from sglang.srt.layers import dp_attention
from sglang.srt.runtime_context import get_parallel
from test_server_args import resolve
from transformers import PretrainedConfig

from sglang_dspark_plugin.errors import InvalidCheckpointError, MissingBlockSizeError
from sglang_dspark_plugin.serving import make_plan
from sglang_dspark_plugin.serving.placement import telemetry_placement
from sglang_dspark_plugin.serving.route import ServedHead
from sglang_dspark_plugin.sglang_plugin import register, resolution, workers
from sglang_dspark_plugin.sglang_plugin.draft_model import prepare_dspark_arm_config

SPECFORGE = FIXTURES["specforge_dspark"]
PLAIN = FIXTURES["dspark_markov_rank0"]


@pytest.fixture(autouse=True)
def registered() -> None:
    assert register() is True


def _fixture(name: str, base: Fixture, *, config: dict | None = None, tensors: dict | None = None) -> Fixture:
    return Fixture(name, config if config is not None else base.config, tensors or base.tensors, base.expect)


def _without_rank(config: dict) -> dict:
    """The config with every Markov-rank and head-type key removed (SpecForge nests them)."""
    keys = ("markov_rank", "markov_head_type")
    return {**config, "dflash_config": {k: v for k, v in config["dflash_config"].items() if k not in keys}}


# -- a Markov head only the tensors declare -------------------------------------------------------------
@pytest.mark.parametrize(
    ("rank", "head_params", "head_type"),
    [(8, ("gate_proj.weight", "gate_proj.bias"), "gated"), (1, (), "vanilla")],
    ids=["rank8-gated", "rank1-vanilla"],
)
def test_a_markov_head_only_the_tensors_declare_is_served_at_its_rank(
    rank, head_params, head_type, target_dir: Path, tmp_path: Path, monkeypatch
) -> None:
    tensors = {k: v for k, v in SPECFORGE.tensors.items() if not k.startswith("markov_head.")}
    tensors["markov_head.markov_w1.weight"] = (256, rank)
    tensors["markov_head.markov_w2.weight"] = (256, rank)
    for p in head_params:
        tensors[f"markov_head.{p}"] = (rank, 32 + rank) if p.endswith("weight") else (rank,)
    config = _without_rank(SPECFORGE.config)
    fx = _fixture(f"tensors_only_{head_type}", SPECFORGE, config=config, tensors=tensors)
    draft = write_checkpoint(tmp_path, fx)

    record, view = resolve(target_dir, draft)
    served = resolution.plan_of(record)
    assert served.cfg.markov_rank is None  # config.json says nothing
    assert served.resolution.harvest.name() == "dspark" and view.speculative_num_draft_tokens == 8
    assert served.route.head == ServedHead(rank, head_type)
    assert served.cfg.markov_head.declared_by == "tensors"
    # What the draft model's config becomes inside the route: the real head, not the zero one.
    config = PretrainedConfig(**fx.config)
    zero_head = prepare_dspark_arm_config(config, served.route)
    assert zero_head is False
    assert (config.markov_rank, config.markov_head_type) == (rank, head_type)

    # Mask-fill (forced dflash): DFLASH would drop the head. From 0.5.19 DSPARK serves it with
    # sample_from_anchor=false (b-1 drafts, window b); before, no such layout: refused at argument time.
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", "dflash")
    if not HAS_MASK_FILL_DSPARK:
        with pytest.raises(ValueError, match=f"rank-{rank} Markov head") as info:
            resolve(target_dir, draft)
        assert info.value.kind == "unsupported" and "0.5.19" in info.value.message
        return
    record, view = resolve(target_dir, draft)
    assert view.speculative_algorithm == "DSPARK" and view.speculative_num_draft_tokens == 7
    assert view.speculative_dspark_block_size == 6  # DSPARK's gamma: the b-1 rows trained
    plan = resolution.plan_of(record)
    assert plan.layout.sample_from_anchor is False
    assert plan.route.head == ServedHead(rank, head_type)  # what the parse hook reports to sglang


def test_a_markov_head_of_no_known_type_is_refused_at_argument_time(target_dir: Path, tmp_path: Path) -> None:
    tensors = {**SPECFORGE.tensors, "markov_head.extra_proj.weight": (8, 8)}
    fx = _fixture("unknown_head", SPECFORGE, config=_without_rank(SPECFORGE.config), tensors=tensors)
    with pytest.raises(InvalidCheckpointError) as info:
        resolve(target_dir, write_checkpoint(tmp_path, fx))
    message = info.value.message
    assert "rank-8 Markov head" in message and "markov_head_type" in message
    assert '"markov_rank": 8' in message and "config.json" in info.value.where


# -- vocabulary --------------------------------------------------------------------------------------------
def test_a_dspark_drafter_with_another_vocabulary_than_the_target_is_refused(
    target_dir: Path, tmp_path: Path
) -> None:
    config = {**PLAIN.config, "vocab_size": 512, "draft_vocab_size": 512}
    draft = write_checkpoint(tmp_path, _fixture("vocab512", PLAIN, config=config))
    with pytest.raises(ValueError) as info:
        resolve(target_dir, draft)
    err = info.value
    assert err.kind == "unsupported" and err.where == "vocab_size"
    assert "512 tokens" in err.message and "has 256" in err.message
    assert str(draft) in err.message and str(target_dir) in err.message
    assert "first draft step" in err.message


# -- block size from sglang's flag -------------------------------------------------------------------------
def _no_block_size(name: str, base: Fixture) -> Fixture:
    config = {k: v for k, v in base.config.items() if k != "block_size"}
    config["dflash_config"] = {k: v for k, v in config.get("dflash_config", {}).items() if k != "block_size"}
    return _fixture(name, base, config=config)


@pytest.mark.parametrize(
    ("base", "flag", "arm", "window"),
    [
        ("specforge_dflash", "--speculative-dflash-block-size", "dflash", 8),
        ("dspark_markov_rank0", "--speculative-dspark-block-size", "dspark", 9),
        ("dspark_markov_rank0", "--speculative-dflash-block-size", "dspark", 9),  # the other arm's flag
    ],
)
def test_a_config_without_block_size_takes_it_from_the_flag(
    base: str, flag: str, arm: str, window: int, target_dir: Path, tmp_path: Path, plugin_log: PluginLog
) -> None:
    draft = write_checkpoint(tmp_path, _no_block_size(f"{base}_no_block", FIXTURES[base]))
    record, view = resolve(target_dir, draft, flag, "8")
    served = resolution.plan_of(record)
    assert served.cfg.block_size is None
    assert (served.geometry.harvest.name(), served.geometry.block_size) == (arm, 8)
    assert view.speculative_num_draft_tokens == window
    # The startup line and the manifest say where the block size came from: the flag the user passed.
    startup = [m for m in plugin_log.at(logging.INFO) if m.startswith("DSPARK_HARVEST: harvest=")]
    assert len(startup) == 1 and f"block_size=8 (from {flag})" in startup[0]
    assert f'"block_size_source": "{flag}"' in "\n".join(plugin_log.at(logging.INFO))


def test_a_config_without_block_size_and_no_flag_is_refused_naming_the_flag(
    target_dir: Path, tmp_path: Path
) -> None:
    draft = write_checkpoint(tmp_path, _no_block_size("no_block", FIXTURES["specforge_dflash"]))
    with pytest.raises(MissingBlockSizeError) as info:
        resolve(target_dir, draft)
    assert isinstance(info.value, ValueError) and info.value.kind == "invalid"
    assert info.value.where == "--speculative-dflash-block-size"
    assert "pass --speculative-dflash-block-size B" in info.value.message
    with pytest.raises(InvalidCheckpointError, match="is not a block size"):
        _plan(_args(draft, target_dir, speculative_dflash_block_size="eight"))


# -- data-parallel attention: one telemetry per DP group ---------------------------------------------------
def _sglang_ranks(tp_rank: int, tp_size: int, dp_size: int, cp_size: int, dp_attention_on: bool):
    """(attn_tp_rank, attn_tp_size, attn_dp_rank, attn_dp_size, attn_cp_rank) from sglang's own helper."""
    helper = dp_attention.compute_dp_attention_world_info
    if "enable_dp_attention" in inspect.signature(helper).parameters:  # 0.5.17
        a_tp, a_tp_size, a_dp, a_dp_size = helper(dp_attention_on, tp_rank, tp_size, dp_size, cp_size)
    else:  # 0.5.23 takes the attention-DP width itself
        attn_dp_size = dp_size if dp_attention_on else 1
        a_tp, a_tp_size, a_dp, a_dp_size = helper(tp_rank, tp_size, attn_dp_size, cp_size)
    return a_tp, a_tp_size, a_dp, a_dp_size, (tp_rank // a_tp_size) % cp_size


@pytest.mark.parametrize(
    ("tp_size", "dp_size", "cp_size", "dp_attention_on"),
    [(8, 1, 1, False), (8, 4, 1, True), (8, 2, 2, True), (4, 4, 1, True), (4, 2, 1, False), (8, 1, 2, False)],
)
def test_every_attention_dp_group_keeps_one_telemetry_tagged_with_its_dp_rank(
    tp_size: int, dp_size: int, cp_size: int, dp_attention_on: bool
) -> None:
    watchers: dict[int, int | None] = {}
    groups: dict[int, list[int]] = {}
    for tp_rank in range(tp_size):
        a_tp, a_tp_size, a_dp, a_dp_size, a_cp = _sglang_ranks(
            tp_rank, tp_size, dp_size, cp_size, dp_attention_on
        )
        groups.setdefault(a_dp, []).append(tp_rank)
        # Read back through sglang's published topology (get_parallel), as the worker does.
        with get_parallel().override(
            tp_size=tp_size,
            tp_rank=tp_rank,
            attn_tp_size=a_tp_size,
            attn_tp_rank=a_tp,
            attn_dp_size=a_dp_size,
            attn_dp_rank=a_dp,
            attn_cp_size=cp_size,
            attn_cp_rank=a_cp,
        ):
            ranks = workers.attention_ranks(tp_rank)
        assert (ranks.attn_tp_rank, ranks.attn_dp_rank, ranks.attn_dp_size) == (a_tp, a_dp, a_dp_size)
        watches, tag = telemetry_placement(ranks)
        if watches:
            watchers[tp_rank] = tag
    # One telemetry per DP group, on its first TP rank; tagged only where there are several groups.
    assert sorted(watchers) == sorted(min(ranks) for ranks in groups.values())
    if dp_attention_on and dp_size > 1:
        assert sorted(watchers.values()) == list(range(dp_size))
    else:
        assert watchers == {0: None}


def _plan(args: object):
    """The serving plan of these server args on this sglang (what the rewrite makes)."""
    return make_plan(resolution.launch_request(args, {}), resolution.sglang_support())


def _args(draft: Path, target: Path, **flags: object) -> object:
    """A stand-in for sglang's server args: the fields ``resolution.launch_request`` reads."""
    fields = {"speculative_dflash_block_size": None, "speculative_dspark_block_size": None, **flags}
    fields.update(speculative_draft_model_path=str(draft), model_path=str(target))
    return type("Args", (), fields)()


def test_the_worker_keeps_the_telemetry_on_its_dp_groups_first_rank(target_dir: Path, tmp_path: Path) -> None:
    # No published topology (a CPU test): the TP rank alone decides, as before data-parallel attention.
    assert telemetry_placement(workers.attention_ranks(0)) == (True, None)
    assert telemetry_placement(workers.attention_ranks(3)) == (False, None)
    served = _plan(_args(write_checkpoint(tmp_path, PLAIN), target_dir))
    worker = object.__new__(workers.HarvestDSparkWorker)
    topology = dict(tp_size=4, attn_tp_size=2, attn_dp_size=2, attn_cp_size=1, attn_cp_rank=0)
    with get_parallel().override(tp_rank=2, attn_tp_rank=0, attn_dp_rank=1, **topology):
        worker._dspark_attach(served, tp_rank=2)
    assert worker.dspark_rounds is not None and worker.dspark_rounds.telemetry.dp_rank == 1
    assert worker.dspark_rounds.telemetry.summary_line().endswith(" dp=1")
    with get_parallel().override(tp_rank=3, attn_tp_rank=1, attn_dp_rank=1, **topology):
        worker._dspark_attach(served, tp_rank=3)
    assert worker.dspark_rounds is None  # its group's first rank logs these rounds
