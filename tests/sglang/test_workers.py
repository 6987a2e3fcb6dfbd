"""The DSPARK_HARVEST workers against the REAL installed sglang (any release 0.5.17-0.5.23), on CPU.

No worker can be constructed here (its ``__init__`` loads a target and a draft on a GPU), so each piece
the workers add or rely on is run directly through sglang's own code: the class choice, the override
signatures, the rows that become drafts in each arm, the zero-Markov route, the draft-model routing
through sglang's model registry, the per-round telemetry hook and the rank-agreement values.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import inspect
import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sglang
import torch
from checkpoints import (
    FIXTURES,
    Fixture,
    write_checkpoint,
)  # tests/ is on sys.path (tests/sglang/conftest.py)
from features import HAS_MASK_FILL_DSPARK, NESTED_DFLASH_CONFIG, POST_LOAD_WEIGHTS, RESOLVE_ONCE
from sglang.srt.models.dspark import DSparkDraftModel, VanillaMarkov, build_markov_head
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2, _DflashDraftSampler
from sglang.srt.speculative.dspark_components import dspark_draft
from sglang.srt.speculative.dspark_components.dspark_config import (
    parse_dspark_draft_config,
    resolve_runtime_config,
)
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
from transformers import PretrainedConfig

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.draft_config import MarkovHead
from sglang_dspark_plugin.errors import (
    DsparkHarvestError,
    GeometryError,
    InvalidCheckpointError,
    UnsupportedCheckpointError,
)
from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import ENV_VAR, DsparkHarvest
from sglang_dspark_plugin.releases import BY_VERSION
from sglang_dspark_plugin.serving import (
    MASK_FILL,
    MASK_FILL_DSPARK,
    SHIFTED,
    LaunchRequest,
    ServePlan,
    make_plan,
)
from sglang_dspark_plugin.serving.layout import ARMS
from sglang_dspark_plugin.serving.rank_agreement import plan_agreement_values
from sglang_dspark_plugin.serving.rounds import NO_WORK
from sglang_dspark_plugin.serving.route import DFLASH_MODEL, DSPARK_MODEL, ZERO_HEAD, DraftRoute, ServedHead
from sglang_dspark_plugin.serving.servability import check_servable
from sglang_dspark_plugin.sglang_plugin import hooks, resolution, workers
from sglang_dspark_plugin.sglang_plugin.draft_model import (
    HarvestDSparkDraftModel,
    draft_route,
    prepare_dspark_arm_config,
)
from sglang_dspark_plugin.sglang_plugin.workers import (
    HarvestDFlashWorker,
    HarvestDSparkWorker,
    worker_class_for,
)
from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER

torch.set_num_threads(2)


def test_the_expected_sglang_is_installed():
    expected = os.environ.get("DSPARK_EXPECT_SGLANG")
    if expected is not None:
        assert sglang.__version__ == expected
    assert sglang.__version__ in BY_VERSION  # a release of the plugin's release table


# ------------------------------------------------------------------ served stand-in


def _served(tmp_path: Path, fixture: str, env: str | None = None) -> ServePlan:
    """The serving plan of a fixture draft on this sglang (no target: its checks are not the point)."""
    request = LaunchRequest(draft=str(write_checkpoint(tmp_path, fixture)), harvest_env=env)
    return make_plan(request, resolution.sglang_support())


def _route(
    rank: int, mask: int | None = None, head_type: str = "vanilla", sample_from_anchor: bool = True, names=()
) -> DraftRoute:
    """A dspark-arm route with a rank-``rank`` head (0: the zero head), as the plan hands it."""
    head = ZERO_HEAD if rank == 0 else ServedHead(rank, head_type)
    return DraftRoute(DSPARK_MODEL, tuple(names), head, mask, sample_from_anchor)


def _req(rid: str, *, live: bool = True) -> SimpleNamespace:
    """A request as the round hook reads it (``serving.rounds.WorkerRounds.round``)."""

    return SimpleNamespace(
        rid=rid,
        is_retracted=False,
        finished=lambda: not live,
        origin_input_ids=[1] * 20,
        output_ids=[5, 6, 7],
    )


def _round(worker, counts: list[int], *, live: list[bool] | None = None) -> None:
    """One round as sglang runs it with the plugin's hook: sglang's resolve of the round sets the counts on
    the result and calls ``on_verify_complete_cpu`` (the parent's, not overridden), then the AFTER hook
    (``hooks.round_after_result``) hands the worker the round: its one entry."""
    reqs = [_req(f"r{i}", live=keep) for i, keep in enumerate(live or [True] * len(counts))]
    width = worker.dspark_plan.geometry.verify_window if worker.dspark_plan is not None else 1
    result = SimpleNamespace(
        next_token_ids=torch.zeros(width * len(reqs), dtype=torch.int64),
        accept_lens=torch.tensor([n + 1 for n in counts]),
        num_correct_drafts_per_req_cpu=counts,
    )
    worker.on_verify_complete_cpu(counts, batch_size=len(counts))
    hooks.round_after_result(
        [[8]] * len(reqs), SimpleNamespace(model_worker=worker), result, SimpleNamespace(reqs=reqs)
    )


def _flush(worker) -> None:
    """Run the worker's queued round steps now (under its plugin work, as a request's end does)."""
    with worker.dspark_rounds.work or contextlib.nullcontext():
        worker.dspark_rounds.queue.run()


def _hf_config(fixture: str) -> PretrainedConfig:
    """The draft ``hf_config`` sglang would hold for a fixture (every config.json key as an attribute)."""
    return PretrainedConfig(**FIXTURES[fixture].config)


# ------------------------------------------------------------------ class choice and signatures


def test_worker_class_for_each_layout_is_a_subclass_of_sglangs_worker_for_that_builtin():
    dflash, dspark = worker_class_for(MASK_FILL), worker_class_for(SHIFTED)
    assert dflash is HarvestDFlashWorker and dspark is HarvestDSparkWorker
    assert issubclass(dflash, DFlashWorkerV2) and not issubclass(dflash, DSparkWorkerV2)
    assert issubclass(dspark, DSparkWorkerV2) and not issubclass(dspark, DFlashWorkerV2)
    # a mask-fill drafter with a DSpark name and a Markov head: DSPARK's worker, sample_from_anchor=false
    maskfill = worker_class_for(MASK_FILL_DSPARK)
    assert maskfill is workers.HarvestMaskFillDSparkWorker and issubclass(maskfill, DSparkWorkerV2)
    assert {cls.dspark_layout for cls in workers.WORKERS.values()} == {MASK_FILL, SHIFTED, MASK_FILL_DSPARK}
    with pytest.raises(GeometryError, match="no DSPARK_HARVEST worker"):
        worker_class_for("dspark")  # type: ignore[arg-type]


def test_each_arm_names_the_sglang_worker_its_worker_subclasses_and_the_docs_say_so():
    """The Arm record is the one place: its parent worker is the class its worker subclasses (and the
    factory compares sglang's choice with), its builtin the algorithm sglang creates it for, and
    docs/workers.md's table names the arm, the class and the parent alike."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "workers.md").read_text(encoding="utf-8")
    for arm in ARMS:
        cls = worker_class_for(arm)
        parent = workers.parent_worker_of(cls)
        assert issubclass(cls, parent) and parent.__name__ == arm.parent_worker
        assert parent is {"DFLASH": DFlashWorkerV2, "DSPARK": DSparkWorkerV2}[arm.builtin]
        row = next(line for line in docs.splitlines() if line.startswith(f"| `{arm.name}` "))
        assert f"| `{cls.__name__}` | `{arm.parent_worker}`" in row, row


def test_the_mask_fill_layout_is_set_at_the_top_level_where_sglang_reads_it(tmp_path):
    # whatever spelling declared it (here dspark_bonus_anchor), the DSpark model reads the top level only
    config = _hf_config("dspark_bonus_anchor")
    config.markov_head_type = "vanilla"
    assert prepare_dspark_arm_config(config, _route(4, sample_from_anchor=False)) is False
    assert config.sample_from_anchor is False
    if HAS_MASK_FILL_DSPARK:
        from sglang.srt.speculative.dspark_components.dspark_config import get_dspark_sample_from_anchor

        assert get_dspark_sample_from_anchor(config) is False
    assert prepare_dspark_arm_config(config, _route(4)) is False  # the shifted arm: anchor-first
    assert config.sample_from_anchor is True


def _shape(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize(
    ("ours", "parent"),
    [
        (HarvestDFlashWorker.__init__, DFlashWorkerV2.__init__),
        (HarvestDSparkWorker.__init__, DSparkWorkerV2.__init__),
        (HarvestDSparkDraftModel.__init__, DSparkDraftModel.__init__),
        (HarvestDSparkDraftModel.load_weights, DSparkDraftModel.load_weights),
    ],
    ids=[
        "dflash.__init__",
        "dspark.__init__",
        "model.__init__",
        "model.load_weights",
    ],
)
def test_each_override_has_its_sglang_parents_signature(ours, parent):
    # Names, kinds and defaults: the scheduler calls these by keyword, so they must match exactly.
    assert _shape(ours) == _shape(parent)


def test_the_workers_override_nothing_on_the_round_path():
    # Drafting, verification, KV handling and overlap stay sglang's: only these names are ours.
    def own(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("__") and n != "_abc_impl"}

    assert own(HarvestDFlashWorker) == {"dspark_layout"}
    assert "__init__" in vars(HarvestDFlashWorker) and "__init__" in vars(HarvestDSparkWorker)
    assert own(HarvestDSparkWorker) == {"dspark_layout"}
    # the mask-fill DSpark worker: its layout (sample_from_anchor=false, from the plan's route), nothing else
    assert own(workers.HarvestMaskFillDSparkWorker) == {"dspark_layout"}
    mixin = set(vars(workers._HarvestWorkerMixin))
    for name in (
        "forward_batch_generation",
        "_maybe_build_draft_sampler",
        "alloc_memory_pool",
        "init_cuda_graphs",
        "init_attention_backends",
    ):
        assert name not in mixin
        assert getattr(HarvestDFlashWorker, name) is getattr(DFlashWorkerV2, name)
        assert getattr(HarvestDSparkWorker, name) is getattr(DSparkWorkerV2, name)


def test_worker_contract_names_resolve_in_the_installed_sglang():
    import importlib

    for module, qualname, params in workers.WORKER_CONTRACT:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        if params is not None:
            names = set(inspect.signature(obj).parameters)
            assert set(params) <= names, (module, qualname, params, names)


# ------------------------------------------------------------------ which rows become drafts


def _row_tagged_hidden(bs: int, rows: int, vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Draft hidden states whose row r of request i argmaxes (through an identity head) to a known token."""
    tokens = torch.tensor([[(7 * i + 3 * r + 1) % vocab for r in range(rows)] for i in range(bs)])
    hidden = torch.nn.functional.one_hot(tokens, vocab).float() * 5.0
    return hidden, tokens


def test_dflash_arm_drafts_are_rows_1_to_b_minus_1_through_sglangs_draft_sampler():
    b, bs, vocab = 6, 3, 32
    geometry = RoundGeometry(DsparkHarvest.DFLASH, b)
    hidden, tokens = _row_tagged_hidden(bs, b, vocab)
    # The graph-path sampler DFlashWorkerV2 builds (HarvestDFlashWorker inherits it unchanged).
    sampler = _DflashDraftSampler(
        weight=torch.eye(vocab), block_size=b, num_org=vocab, org_vocab_start=0, max_bs=bs
    )
    sampler(hidden.reshape(bs * b, vocab))
    drafts = sampler.out[: bs * geometry.gamma].view(bs, geometry.gamma)
    rows = list(geometry.harvested_rows)
    assert rows == list(range(1, b))
    assert torch.equal(drafts, tokens[:, rows])
    assert drafts.shape[1] + 1 == geometry.verify_window == b


def _zero_markov_head(fixture: str) -> tuple[PretrainedConfig, torch.nn.Module]:
    config = _hf_config(fixture)
    assert prepare_dspark_arm_config(config, _route(0, 255)) is True
    head = build_markov_head(config)
    with torch.no_grad():
        for p in head.parameters():
            p.zero_()
    return config, head


def _sglang_dspark_drafts(head: torch.nn.Module, base_logits: torch.Tensor, anchor: torch.Tensor):
    """sglang's own eager DSPARK draft sampler (``dspark_draft.sample_draft_block``), greedy."""
    bs = base_logits.shape[0]
    kwargs = {
        "base_logits": base_logits,
        "anchor_tokens": anchor,
        "draft_hidden": None,
        "sampling_info": None,
        "markov_head": head,
        "device": torch.device("cpu"),
    }
    takes = inspect.signature(dspark_draft.sample_draft_block).parameters
    if "tp_sync" in takes:  # 0.5.19 on
        from sglang.srt.speculative.spec_tp_sync import SpecTpSync

        kwargs["tp_sync"] = SpecTpSync(SimpleNamespace(world_size=1, rank_in_group=0))
    if "noise" in takes:  # 0.5.22 on
        kwargs["noise"] = dspark_draft.DraftNoise(key=1, offset=torch.zeros((), dtype=torch.int64))
        kwargs["greedy_draft"] = True
    result = dspark_draft.sample_draft_block(**kwargs)
    assert result.draft_tokens.shape[0] == bs
    return result.draft_tokens


@pytest.mark.parametrize("bs", [1, 4])
def test_dspark_arm_drafts_are_rows_0_to_b_minus_1_with_the_zero_markov_head(bs):
    # DSpark strategy without a Markov head (markov_rank 0), served through sglang's DSPARK sampler.
    b, vocab = 5, 256
    config, head = _zero_markov_head("dspark_markov_rank0")
    geometry = RoundGeometry(DsparkHarvest.DSPARK, b)
    hidden, tokens = _row_tagged_hidden(bs, geometry.gamma, vocab)
    base_logits = hidden  # identity lm_head: base logits of row r = its hidden state
    anchor = torch.full((bs,), 9, dtype=torch.long)
    drafts = _sglang_dspark_drafts(head, base_logits, anchor)
    rows = list(geometry.harvested_rows)
    assert rows == list(range(0, b))  # the anchor row's output is draft 1
    assert torch.equal(drafts.long(), tokens[:, rows])
    assert geometry.verify_window == b + 1


def test_a_nonzero_markov_head_would_change_the_drafts():
    # Control for the test above: the zeroing is what makes the head an identity.
    b, bs, vocab = 5, 4, 256
    config, _ = _zero_markov_head("dspark_markov_rank0")
    head = build_markov_head(config)
    torch.manual_seed(0)
    with torch.no_grad():
        head.markov_w1.weight.normal_(0.0, 10.0)
        head.markov_w2.weight.normal_(0.0, 10.0)
    hidden, tokens = _row_tagged_hidden(bs, b, vocab)
    drafts = _sglang_dspark_drafts(head, hidden, torch.full((bs,), 9, dtype=torch.long))
    assert not torch.equal(drafts.long(), tokens)


# ------------------------------------------------------------------ the dspark arm's draft config


def test_no_markov_checkpoint_passes_sglangs_dspark_checks_with_the_resolved_geometry(tmp_path):
    served = _served(tmp_path, "dspark_markov_rank0")
    assert served.resolution.harvest is DsparkHarvest.DSPARK
    config = _hf_config("dspark_markov_rank0")
    with pytest.raises(ValueError, match="markov_rank > 0"):
        # What sglang does with this checkpoint unaided.
        resolve_runtime_config(draft_hf_config=config, speculative_num_draft_tokens=6, target_vocab_size=256)
    assert prepare_dspark_arm_config(config, served.route)
    runtime = resolve_runtime_config(
        draft_hf_config=config,
        speculative_num_draft_tokens=served.geometry.verify_window,
        target_vocab_size=256,
    )
    assert runtime.gamma == served.geometry.gamma == 5
    assert runtime.verify_num_draft_tokens == served.geometry.verify_window == 6
    parsed = parse_dspark_draft_config(draft_hf_config=config)
    assert (parsed.markov_rank, parsed.markov_head_type, parsed.gamma) == (1, "vanilla", 5)
    head = build_markov_head(config)
    assert type(head) is VanillaMarkov and head.markov_rank == 1
    assert config.confidence_head_with_markov is False


def test_a_real_markov_head_is_kept_even_where_sglang_does_not_read_its_spelling(tmp_path):
    # SpecForge nests markov_rank/markov_head_type in dflash_config: 0.5.23 reads it there, before it does
    # not (it would see no head and refuse); either way the census's rank-8 gated head must be served.
    served = _served(tmp_path, "specforge_dspark")
    config = _hf_config("specforge_dspark")
    assert parse_dspark_draft_config(draft_hf_config=config).markov_rank == (8 if NESTED_DFLASH_CONFIG else 0)
    assert prepare_dspark_arm_config(config, served.route) is False
    parsed = parse_dspark_draft_config(draft_hf_config=config)
    assert (parsed.markov_rank, parsed.markov_head_type) == (8, "gated")
    assert build_markov_head(config).markov_rank == 8


def test_the_served_markov_head_is_the_census_reading(tmp_path):
    plan = _served(tmp_path, "specforge_dspark")  # dflash_config spelling, gated tensors
    assert plan.cfg.markov_head.rank == 8 and plan.route.head == ServedHead(8, "gated")
    assert _served(tmp_path, "dspark_markov_rank0").route.head is ZERO_HEAD  # rank 1, zeroed
    null_rank = census(str(write_checkpoint(tmp_path, "gemma4_dspark_null_rank")))  # null, no weights
    assert null_rank.markov_rank is None and null_rank.markov_head is None
    assert _served(tmp_path, "specforge_dflash").route.head is None  # DFLASH: no head served


def _head_config(*placed: tuple[tuple[str, ...], str, int, str]) -> PretrainedConfig:
    """The qwen3 DSpark fixture's config with no Markov spelling but ``placed``: (section, key pattern,
    rank, type) each."""
    from sglang_dspark_plugin.census.markov import HEAD_KEY_SPELLINGS

    raw = json.loads(json.dumps(FIXTURES["qwen3_dspark_model"].config))
    for section, pattern in HEAD_KEY_SPELLINGS:  # clear every spelling
        node = raw
        for part in section:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            for key in ("markov_rank", "markov_head_type"):
                node.pop(pattern.format(key=key), None)
    for section, pattern, rank, head_type in placed:
        node = raw
        for part in section:
            node = node.setdefault(part, {})
        node[pattern.format(key="markov_rank")] = rank
        node[pattern.format(key="markov_head_type")] = head_type
    return PretrainedConfig(**raw)


def _read_by_this_release(section: tuple[str, ...]) -> bool:
    return section != ("dflash_config",) or NESTED_DFLASH_CONFIG


def test_sglang_reads_the_markov_head_spellings_where_and_in_the_order_the_package_lists_them():
    """``census.markov.HEAD_KEY_SPELLINGS`` against this release's own parser: each spelling alone is
    read (``dflash_config`` from 0.5.19 on), and of two that disagree the one listed first wins, so a
    config whose spellings agree (what the census requires) means one head to every release."""
    from sglang_dspark_plugin.census.markov import HEAD_KEY_SPELLINGS

    read = [(sec, pat) for sec, pat in HEAD_KEY_SPELLINGS if _read_by_this_release(sec)]
    for section, pattern in read:
        parsed = parse_dspark_draft_config(draft_hf_config=_head_config((section, pattern, 4, "gated")))
        assert (parsed.markov_rank, parsed.markov_head_type) == (4, "gated"), (section, pattern)
    for (first, first_key), (later, later_key) in zip(read[:-1], read[1:], strict=True):
        config = _head_config((later, later_key, 2, "rnn"), (first, first_key, 4, "gated"))
        parsed = parse_dspark_draft_config(draft_hf_config=config)
        assert (parsed.markov_rank, parsed.markov_head_type) == (4, "gated"), (first, later)


def test_markov_keys_in_dspark_config_are_rewritten_too():
    config = PretrainedConfig(
        **{**FIXTURES["qwen3_dspark_model"].config, "markov_rank": 0, "dspark_config": {"markov_rank": 0}}
    )
    assert prepare_dspark_arm_config(config, _route(0, 255))
    assert config.dspark_config["markov_rank"] == 1
    assert parse_dspark_draft_config(draft_hf_config=config).markov_rank == 1


def test_a_markov_head_without_a_head_type_is_refused_by_the_plan_with_the_fix(tmp_path):
    # config.json declares markov_rank 4 and no markov_head_type: the plan refuses before any load
    with pytest.raises(InvalidCheckpointError, match="markov_head_type"):
        _served(tmp_path, "dspark_sample_from_anchor_false", env="dspark")
    with pytest.raises(InvalidCheckpointError, match="draft route names no Markov head"):
        prepare_dspark_arm_config(_hf_config("dspark_markov_rank0"), DraftRoute(DSPARK_MODEL))


def test_the_dspark_arm_is_anchor_first_whatever_the_checkpoint_flag_says():
    config = PretrainedConfig(
        **{**FIXTURES["dspark_sample_from_anchor_false"].config, "markov_head_type": "vanilla"}
    )
    assert config.sample_from_anchor is False
    prepare_dspark_arm_config(config, _route(4))
    assert config.sample_from_anchor is True
    if HAS_MASK_FILL_DSPARK:
        # 0.5.19 on reads the flag (dspark_config.get_dspark_sample_from_anchor) and would otherwise
        # prepend a query row and drop the anchor row's output.
        from sglang.srt.speculative.dspark_components.dspark_config import get_dspark_sample_from_anchor

        assert get_dspark_sample_from_anchor(config) is True
        hidden, _ = _row_tagged_hidden(2, 5, 32)
        kept, _ = dspark_draft.select_draft_hidden_without_anchor(hidden.reshape(10, 32), bs=2, gamma=4)
        assert torch.equal(kept.view(2, 4, 32), hidden[:, 1:])  # the False path: anchor row dropped


def test_the_census_mask_token_fills_a_missing_dspark_mask_id():
    raw = {k: v for k, v in FIXTURES["dspark_markov_rank0"].config.items()}
    raw["dflash_config"] = {k: v for k, v in raw["dflash_config"].items() if k != "mask_token_id"}
    raw.pop("mask_token_id", None)
    config = PretrainedConfig(**raw)
    assert parse_dspark_draft_config(draft_hf_config=config).mask_token_id is None
    prepare_dspark_arm_config(config, _route(0, 200))
    assert parse_dspark_draft_config(draft_hf_config=config).mask_token_id == 200


# ------------------------------------------------------------------ draft-model routing


def test_the_draft_route_swaps_the_checkpoints_architecture_only_while_building():
    from sglang.srt.models.registry import ModelRegistry

    before = ModelRegistry.resolve_model_cls(["DFlashDraftModel"])[0]
    assert before is not HarvestDSparkDraftModel
    with draft_route(_route(0, 255, names=("DFlashDraftModel",))):
        assert ModelRegistry.resolve_model_cls(["DFlashDraftModel"])[0] is HarvestDSparkDraftModel
        assert HarvestDSparkDraftModel._route.mask_token_id == 255
        # Other architectures are untouched.
        assert ModelRegistry.resolve_model_cls(["DSparkDraftModel"])[0] is DSparkDraftModel
    assert ModelRegistry.resolve_model_cls(["DFlashDraftModel"])[0] is before
    assert HarvestDSparkDraftModel._route is None

    with pytest.raises(RuntimeError, match="boom"):
        with draft_route(_route(8, names=("DSparkDraftModel",))):
            raise RuntimeError("boom")
    assert ModelRegistry.resolve_model_cls(["DSparkDraftModel"])[0] is DSparkDraftModel


def test_the_dflash_route_loads_dflash_for_a_dspark_named_drafter_without_markov_head():
    from sglang.srt.models.dflash import DFlashDraftModel
    from sglang.srt.models.registry import ModelRegistry

    with draft_route(DraftRoute(DFLASH_MODEL, ("Qwen3DSparkModel",))):
        assert ModelRegistry.resolve_model_cls(["Qwen3DSparkModel"])[0] is DFlashDraftModel
    assert ModelRegistry.resolve_model_cls(["Qwen3DSparkModel"])[0].__name__ == "Qwen3DSparkModel"
    with draft_route(DraftRoute(None)):  # sglang's own class: nothing swapped
        assert ModelRegistry.resolve_model_cls(["DFlashDraftModel"])[0] is DFlashDraftModel


def test_the_plan_refuses_what_the_routes_cannot_build(tmp_path):
    """DFLASH would drop a Markov head; DSPARK needs a dense class and a mask token: all refused by the
    plan, before any model loads, on every sglang version."""
    plan = _served(tmp_path, "dspark_markov_rank0")
    with_head = plan.cfg.__class__(**{**plan.cfg.__dict__, "markov_head": MarkovHead(4, "vanilla", "config")})
    with pytest.raises(UnsupportedCheckpointError, match="Markov head"):
        check_servable(with_head, MASK_FILL, plan.resolution, None, plan.support)
    no_mask = plan.cfg.__class__(**{**plan.cfg.__dict__, "mask_token_id": None})
    with pytest.raises(InvalidCheckpointError, match="mask_token_id"):
        check_servable(no_mask, SHIFTED, plan.resolution, None, plan.support)


def test_the_plan_refuses_a_non_dense_drafter_before_any_route(tmp_path):
    with pytest.raises(DsparkHarvestError, match="Gemma4DSparkModel") as info:
        _served(tmp_path, "gemma4_dspark_null_rank")
    assert info.value.kind == "unsupported" and "architectures" in info.value.where


# ------------------------------------------------------------------ per-round telemetry hook


def test_the_probe_skips_a_round_of_finished_requests_as_the_telemetry_does(tmp_path):
    """An overlapped round whose every request had already finished: sglang leaves it out of
    ``spec_verify_ct``, the telemetry leaves it out, and so does the probe (its rounds stay equal)."""
    served = _served(tmp_path, "specforge_dflash")
    worker = object.__new__(HarvestDFlashWorker)
    worker._dspark_attach(served, tp_rank=0)
    _round(worker, [0], live=[False])  # every request had finished
    assert worker.dspark_rounds.queue.queued == 0
    _round(worker, [0])
    _flush(worker)
    assert worker.dspark_rounds.probe.rounds == worker.dspark_rounds.telemetry.counts.rounds == 1


@pytest.mark.parametrize("cls", [HarvestDFlashWorker, HarvestDSparkWorker])
def test_the_round_hook_alone_feeds_one_telemetry_record_per_round(tmp_path, caplog, cls):
    fixture = "specforge_dflash" if cls is HarvestDFlashWorker else "dspark_markov_rank0"
    served = _served(tmp_path, fixture)
    worker = object.__new__(cls)  # the real __init__ loads models on a GPU
    worker._dspark_attach(served, tp_rank=0)
    telemetry = worker.dspark_rounds.telemetry
    gamma = served.geometry.gamma
    assert telemetry.gamma == gamma and telemetry.harvest == served.resolution.harvest.name()
    with caplog.at_level(logging.INFO, logger=ACCEPT_LOGGER):
        # sglang's own on_verify_complete_cpu: the plugin does not override it, so it queues nothing
        ours = [k for k in cls.__mro__ if k.__module__.startswith("sglang_dspark_plugin")]
        assert ours and not any("on_verify_complete_cpu" in vars(k) for k in ours)
        assert worker.on_verify_complete_cpu([0, gamma, 1], batch_size=3) is None
        assert telemetry.counts.rounds == 0 and worker.dspark_rounds.queue.queued == 0
        _round(worker, [0, gamma, 1])
        _round(worker, [2])
        queued = worker.dspark_rounds.queue.queued
        assert telemetry.counts.rounds == 0 and queued == 2  # queued, one step a round (DeferredRounds)
        _flush(worker)
    lines = [r.getMessage() for r in caplog.records if "accept round=" in r.getMessage()]
    assert [line.split(" mean=")[0].split("accept_len=")[1] for line in lines] == [
        f"[1,{gamma + 1},2]",
        "[3]",
    ]
    assert f"mean={(1 + gamma + 1 + 2) / 3:.2f}" in lines[0]
    assert telemetry.counts.rounds == 2 and telemetry.counts.request_rounds == 4
    assert telemetry.counts.accepted_drafts == gamma + 3
    assert any(rec.name == ACCEPT_LOGGER for rec in caplog.records)


def test_the_round_hook_on_other_tp_ranks_records_nothing(tmp_path):
    worker = object.__new__(HarvestDSparkWorker)
    worker._dspark_attach(_served(tmp_path, "dspark_markov_rank0"), tp_rank=1)
    assert worker.dspark_rounds is None
    _round(worker, [1, 2])  # still calls the parent; nothing to record
    assert worker.dspark_rounds is None


def test_enable_metrics_attaches_prometheus_counters(tmp_path):
    worker = object.__new__(HarvestDSparkWorker)
    worker._dspark_attach(_served(tmp_path, "dspark_markov_rank0"), tp_rank=0, enable_metrics=True)
    assert worker.dspark_rounds.telemetry.metrics is not None
    _round(worker, [4, 0])
    _flush(worker)
    assert worker.dspark_rounds.telemetry.counts.accepted_drafts == 4


def _timed_plan(tmp_path: Path, **settings: bool) -> ServePlan:
    """A plan whose launch set MEMRA_DSPARK_HOST_TIMING / MEMRA_DSPARK_SYNC_DEBUG (``settings``)."""
    plan = _served(tmp_path, "dspark_markov_rank0")
    request = dataclasses.replace(
        plan.request, telemetry=dataclasses.replace(plan.request.telemetry, summary_every=2, **settings)
    )
    return dataclasses.replace(plan, request=request)


def test_plugin_work_is_nothing_unless_asked_for(tmp_path):
    worker = object.__new__(HarvestDSparkWorker)
    worker._dspark_attach(_served(tmp_path, "dspark_markov_rank0"), tp_rank=0)
    assert worker.dspark_rounds.work is NO_WORK


def test_host_timing_times_the_plugin_work_of_every_round(tmp_path, caplog):
    worker = object.__new__(HarvestDSparkWorker)
    worker._dspark_attach(_timed_plan(tmp_path, host_timing=True), tp_rank=0)
    cost = worker.dspark_rounds.work.cost
    with caplog.at_level(logging.INFO, logger=ACCEPT_LOGGER):
        for _ in range(4):
            _round(worker, [1, 2])
    assert cost.total_rounds == 4 and cost.last is not None
    assert cost.last["plugin_us_per_round"] > 0 and cost.last["round_us_median"] > 0
    lines = [r.getMessage() for r in caplog.records if "dspark host cost" in r.getMessage()]
    assert len(lines) == 2 and lines[0].startswith("dspark host cost rounds=2 plugin_us_per_round=")


def test_sync_debug_wraps_the_plugin_work_in_the_error_mode(tmp_path, monkeypatch):
    import torch

    modes = ["default"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    worker = object.__new__(HarvestDSparkWorker)
    worker._dspark_attach(_timed_plan(tmp_path, sync_debug=True), tp_rank=0)
    seen = []
    telemetry = worker.dspark_rounds.telemetry
    original = telemetry.on_verify_complete
    monkeypatch.setattr(
        telemetry,
        "on_verify_complete",
        lambda v, **kw: (seen.append(modes[-1]), original(v, **kw)),
    )
    _round(worker, [1])  # queued under the mode, restored after
    assert seen == [] and modes == ["default", "error", "default"]
    _flush(worker)  # the queue runs under it too
    assert seen == ["error"] and modes == ["default", "error", "default", "error", "default"]


def test_sync_debug_without_cuda_checks_nothing_and_says_so(tmp_path, caplog, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    worker = object.__new__(HarvestDSparkWorker)
    with caplog.at_level(logging.INFO, logger="sglang_dspark_plugin.sglang_plugin"):
        worker._dspark_attach(_timed_plan(tmp_path, sync_debug=True), tp_rank=0)
    assert worker.dspark_rounds.work is NO_WORK
    assert any("no CUDA device" in r.getMessage() for r in caplog.records)


# ------------------------------------------------------------------ rank agreement and arm checks


def test_rank_agreement_values_name_the_harvest_geometry_and_draft(tmp_path):
    served = _served(tmp_path, "dspark_markov_rank0", env="dspark")
    values = plan_agreement_values(served)
    assert values == {
        "harvest": "dspark",
        "source": "env",
        "env_value": "dspark",
        "block_size": 5,
        "gamma": 5,
        "verify_window": 6,
        "draft": served.draft,  # what the user passed, whatever folder it resolved to on this node
        "draft_content": values["draft_content"],
    }
    assert values["draft_content"].startswith("sha256:")


def test_worker_init_takes_the_plan_the_factory_chose_it_for(tmp_path, monkeypatch):
    """The factory compares the plan's builtin with sglang's worker (``builtin.worker_after_create``);
    the worker re-checks nothing: it takes the plan, agrees ranks and attaches its telemetry."""
    served = _served(tmp_path, "specforge_dflash")
    monkeypatch.setattr(workers, "_tp_cpu_group", lambda: (None, 0))
    ok = object.__new__(worker_class_for(served.layout))
    args = SimpleNamespace(enable_metrics=False, **{resolution.PLAN_ATTR: served})
    assert ok._dspark_harvest_init(args) is served
    assert ok.dspark_rounds is not None
    with pytest.raises(DsparkHarvestError, match="no serving plan"):
        object.__new__(HarvestDFlashWorker)._dspark_harvest_init(SimpleNamespace(enable_metrics=False))


# ------------------------------------------------------------------ the real draft model, built on CPU

_MODEL_SCRIPT = r"""
import json, os, socket, sys, tempfile, types
from pathlib import Path

import torch

torch.set_num_threads(2)
# Construction only: sglang's rotary layer binds vllm's fallback kernel on a non-CUDA device; never called.
ops = types.ModuleType("vllm._custom_ops")
ops.rotary_embedding = None
sys.modules.setdefault("vllm", types.ModuleType("vllm"))
sys.modules.setdefault("vllm._custom_ops", ops)

import test_workers as tw  # noqa: E402

print("RESULT " + json.dumps(getattr(tw, sys.argv[1])(*sys.argv[2:])))
"""


def _run_in_subprocess(fn: str, *args: str) -> dict:
    """Run ``fn(*args)`` of this module in a fresh interpreter (global sglang state stays out of pytest)."""
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _MODEL_SCRIPT, fn, *args],
        cwd=Path(__file__).parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-6000:]
    return json.loads(lines[-1][len("RESULT ") :])


def _init_single_process_sglang_dist() -> None:
    """world=1 gloo process group plus sglang's model-parallel groups (its layers need them at tp=1)."""
    import socket

    from sglang.srt.distributed import parallel_state as ps

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    if importlib.util.find_spec("sglang.test.layer_ut_utils") is not None:  # 0.5.18 on
        from sglang.test.layer_ut_utils import init_single_process_dist

        init_single_process_dist(master_port=port)
    else:
        ps.init_distributed_environment(
            world_size=1,
            rank=0,
            local_rank=0,
            backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{port}",
        )
        ps.initialize_model_parallel(1)


def _build_real_draft_model() -> dict:
    """Subprocess body: what sglang's loader does for the dspark arm, on CPU, with a fixture checkpoint."""
    import tempfile

    from safetensors.torch import load_file
    from sglang.srt.configs.model_config import ModelImpl
    from sglang.srt.layers.vocab_parallel_embedding import ParallelLMHead
    from sglang.srt.model_loader.utils import get_model_architecture
    from sglang.srt.runtime_context import get_context

    _init_single_process_sglang_dist()
    # A DSpark-strategy drafter without a Markov head, named like a DFlash one.
    raw = {**FIXTURES["dspark_markov_rank0"].config, "architectures": ["DFlashDraftModel"]}
    config = PretrainedConfig(**raw)
    model_config = SimpleNamespace(hf_config=config, quantization=None, model_impl=ModelImpl.AUTO)
    out: dict = {"outside": get_model_architecture(model_config)[0].__name__}
    with get_context().override_server_args(device="cpu"):
        with draft_route(_route(0, 255, names=("DFlashDraftModel",))):
            model_cls = get_model_architecture(model_config)[0]
            model = model_cls(config=config, quant_config=None)  # as loader._initialize_model does
        out["after"] = get_model_architecture(model_config)[0].__name__
        out["class"] = type(model).__name__
        out["is_dspark_draft_model"] = isinstance(model, DSparkDraftModel)
        out["sample_from_anchor"] = bool(getattr(model, "sample_from_anchor", config.sample_from_anchor))
        out["gamma"] = int(model.gamma)
        out["head"] = [type(model.markov_head).__name__, int(model.markov_head.markov_rank)]
        out["head_abs_sum_init"] = float(sum(p.abs().sum() for p in model.markov_head.parameters()))

        ckpt = write_checkpoint(tempfile.mkdtemp(), "dspark_markov_rank0")
        weights = load_file(str(ckpt / "model.safetensors"))
        with torch.no_grad():  # weights a real load must overwrite / leave at zero
            model.markov_head.markov_w1.weight.fill_(3.0)
            model.fc.weight.fill_(1.0)
        model.load_weights(iter((k, v.float()) for k, v in weights.items()))
        out["head_abs_sum_loaded"] = float(sum(p.abs().sum() for p in model.markov_head.parameters()))
        out["fc_abs_sum_loaded"] = float(model.fc.weight.abs().sum())
        with torch.no_grad():  # a loader that bypasses load_weights (dummy weights) calls this instead
            model.markov_head.markov_w2.weight.fill_(2.0)
        from sglang.srt.model_loader import loader

        getattr(loader, POST_LOAD_WEIGHTS)(model)
        out["head_abs_sum_post_load"] = float(sum(p.abs().sum() for p in model.markov_head.parameters()))
        runtime = resolve_runtime_config(
            draft_hf_config=config, speculative_num_draft_tokens=6, target_vocab_size=256
        )
        out["runtime"] = [runtime.gamma, runtime.verify_num_draft_tokens, runtime.mask_token_id]

        # The worker's eager draft step: base logits through the target lm_head, then sglang's sampler.
        hidden_size, vocab = int(config.hidden_size), int(config.vocab_size)
        lm_head = ParallelLMHead(vocab, hidden_size)
        with torch.no_grad():
            lm_head.weight.zero_()
            lm_head.weight[:hidden_size] = torch.eye(hidden_size)
        model.attach_shared_modules(embed_tokens=torch.nn.Embedding(vocab, hidden_size), lm_head=lm_head)
        bs, gamma = 3, int(model.gamma)
        hidden, tokens = _row_tagged_hidden(bs, gamma, hidden_size)
        base_logits, _ = model.compute_base_logits(hidden.reshape(bs * gamma, hidden_size))
        drafts = _sglang_dspark_drafts(
            model.markov_head, base_logits.view(bs, gamma, -1), torch.full((bs,), 9, dtype=torch.long)
        )
        out["drafts"] = drafts.long().tolist()
        out["row_tokens"] = tokens.tolist()

        # A real rank-8 gated head whose keys sit in dflash_config (SpecForge): built and loaded as one.
        gated_config = PretrainedConfig(**FIXTURES["specforge_dspark"].config)
        gated_mc = SimpleNamespace(hf_config=gated_config, quantization=None, model_impl=ModelImpl.AUTO)
        with draft_route(_route(8, 255, head_type="gated", names=("DSparkDraftModel",))):
            gated = get_model_architecture(gated_mc)[0](config=gated_config, quant_config=None)
        with torch.no_grad():
            gated.markov_head.markov_w1.weight.fill_(3.0)
        gated_ckpt = write_checkpoint(tempfile.mkdtemp(), "specforge_dspark")
        gated.load_weights(
            (k, v.float()) for k, v in load_file(str(gated_ckpt / "model.safetensors")).items()
        )
        out["gated"] = [
            type(gated.markov_head).__name__,
            int(gated.markov_head.markov_rank),
            bool(gated.dspark_harvest_zero_markov),
            float(gated.markov_head.markov_w1.weight.abs().sum()),
        ]

        # The dflash arm: a DSpark-named drafter without a Markov head loads sglang's DFlashDraftModel.
        plain_config = PretrainedConfig(**FIXTURES["dspark_markov_rank0"].config)
        plain_mc = SimpleNamespace(hf_config=plain_config, quantization=None, model_impl=ModelImpl.AUTO)
        with draft_route(DraftRoute(DFLASH_MODEL, ("DSparkDraftModel",))):
            plain = get_model_architecture(plain_mc)[0](config=plain_config, quant_config=None)
        out["dflash_arm_class"] = type(plain).__name__
    return out


def test_the_real_dspark_draft_model_serves_a_no_markov_checkpoint_named_like_dflash():
    out = _run_in_subprocess("_build_real_draft_model")
    geometry = RoundGeometry(DsparkHarvest.DSPARK, 5)
    assert out["outside"] == out["after"] == "DFlashDraftModel"  # the route is scoped
    assert out["class"] == "HarvestDSparkDraftModel" and out["is_dspark_draft_model"]
    assert out["sample_from_anchor"] is True
    assert out["gamma"] == geometry.gamma
    assert out["head"] == ["VanillaMarkov", 1]
    assert out["head_abs_sum_init"] == 0.0
    assert out["head_abs_sum_loaded"] == 0.0  # re-zeroed after sglang's loader
    assert out["head_abs_sum_post_load"] == 0.0  # sglang's post-load hook for loaders without load_weights
    assert out["fc_abs_sum_loaded"] == 0.0  # the backbone really was loaded (fixture weights are zeros)
    assert out["runtime"] == [geometry.gamma, geometry.verify_window, 255]
    rows = list(geometry.harvested_rows)
    assert out["drafts"] == [[row[r] for r in rows] for row in out["row_tokens"]]
    # The checkpoint's real gated head: rank 8, not zeroed, its weights loaded (the fixture's are zeros).
    assert out["gated"] == ["GatedMarkovHead", 8, False, 0.0]
    assert out["dflash_arm_class"] == "DFlashDraftModel"


# ------------------------------------------------------------------ through the registered algorithm


def _prepared_server_args(target_dir: Path, draft: Path, *extra: str):
    from sglang.srt.server_args import prepare_server_args

    server_args = prepare_server_args(
        [
            "--model-path",
            str(target_dir),
            "--speculative-algorithm",
            "DSPARK_HARVEST",
            "--speculative-draft-model-path",
            str(draft),
            "--device",
            "cuda",
            *extra,
        ]
    )
    if RESOLVE_ONCE:
        server_args.resolve_once()
    return server_args


@pytest.mark.parametrize(
    ("fixture", "env", "arm"),
    [
        ("zlab_dflash", None, DsparkHarvest.DFLASH),
        ("dspark_markov_rank0", None, DsparkHarvest.DSPARK),
        ("specforge_dflash", "dspark", DsparkHarvest.DSPARK),
    ],
    ids=["dflash-census", "dspark-no-markov-census", "dspark-forced"],
)
def test_registered_factory_and_worker_init_agree_on_real_server_args(
    fixture, env, arm, target_dir, checkpoint_dir, monkeypatch
):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    from sglang_dspark_plugin.sglang_plugin import register

    if env is not None:
        monkeypatch.setenv(ENV_VAR, env)
    assert register() is True
    server_args = _prepared_server_args(
        target_dir, write_checkpoint(checkpoint_dir, fixture), "--enable-metrics"
    )
    served_as = resolution.read_arg(server_args, "speculative_algorithm")  # the builtin the plan names
    cls = SpeculativeAlgorithm.from_string(served_as).create_worker(server_args)
    assert cls is (HarvestDFlashWorker if arm is DsparkHarvest.DFLASH else HarvestDSparkWorker)
    # The worker's own start-up steps on the same (real) server args, up to the model load.
    monkeypatch.setattr(workers, "_tp_cpu_group", lambda: (None, 0))
    worker = object.__new__(cls)
    served = worker._dspark_harvest_init(server_args)
    assert served.resolution.harvest is arm
    gamma = worker.dspark_rounds.telemetry.gamma
    assert plan_agreement_values(served)["gamma"] == gamma == served.geometry.gamma
    assert worker.dspark_rounds.telemetry.metrics is not None  # --enable-metrics reached the worker
    with draft_route(served.route):
        from sglang.srt.models.registry import ModelRegistry

        loaded = ModelRegistry.resolve_model_cls(list(served.cfg.raw["architectures"]))[0]
        assert (loaded is HarvestDSparkDraftModel) == (arm is DsparkHarvest.DSPARK)


def _target_side_refusal_site(target_dir: str, draft: str) -> dict:
    """Subprocess body: the plugin loaded the way sglang loads it, then the target runner's draft check."""
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.model_executor.model_runner_components import spec_aux_hidden_state as aux
    from sglang.srt.models import dspark as dspark_models
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import publish
    from sglang.srt.speculative.dspark_components import dspark_config
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
    from sglang.srt.utils.hf_transformers_utils import get_config

    load_plugins()  # entry point -> register() -> HookRegistry.apply_hooks()
    out: dict = {
        "hook_bound_everywhere": dspark_models.parse_dspark_draft_config
        is dspark_config.parse_dspark_draft_config
    }
    draft_config = get_config(draft, trust_remote_code=False)
    before = dspark_config.parse_dspark_draft_config(draft_hf_config=draft_config)
    out["rank_before_publish"] = before.markov_rank
    server_args = _prepared_server_args(Path(target_dir), Path(draft))
    publish(server_args, role="scheduler")  # what sglang does in each scheduler process
    parsed = dspark_config.parse_dspark_draft_config(draft_hf_config=draft_config)
    out["rank_after_publish"] = [parsed.markov_rank, parsed.markov_head_type]
    target_config = get_config(target_dir, trust_remote_code=False)
    out["target_rank"] = dspark_config.parse_dspark_draft_config(draft_hf_config=target_config).markov_rank
    from sglang_dspark_plugin.sglang_plugin.resolution import read_arg

    algo = SpeculativeAlgorithm.from_string(read_arg(server_args, "speculative_algorithm"))
    out["is_dspark"] = algo.is_dspark()
    aux_config = aux.SpecAuxHiddenStateConfig()
    aux._resolve_dflash_aux_hidden_state(
        config=aux_config,
        server_args=server_args,
        model_config=ModelConfig.from_server_args(server_args),
        spec_algorithm=algo,
        is_draft_worker=False,
    )
    out["aux"] = [aux_config.dflash_use_aux_hidden_state, list(aux_config.dflash_target_layer_ids)]
    return out


def test_the_target_runners_markov_check_passes_for_the_served_no_markov_draft(target_dir, checkpoint_dir):
    draft = write_checkpoint(checkpoint_dir, "dspark_markov_rank0")
    out = _run_in_subprocess("_target_side_refusal_site", str(target_dir), str(draft))
    assert out["hook_bound_everywhere"] is True
    assert out["rank_before_publish"] == 0  # not a DSPARK_HARVEST process yet: sglang's own answer
    assert out["rank_after_publish"] == [1, "vanilla"]  # the zero head the draft model will build
    assert out["target_rank"] == 0  # another config (the target's) is left alone
    assert out["is_dspark"] is True
    # sglang's target-side check passed and selected the draft's target layers.
    assert out["aux"] == [True, [2]]


def _tensors_only_head(tmp_path: Path) -> Path:
    """SpecForge's DSpark drafter with every Markov-rank and head-type key removed from config.json:
    only its ``markov_head.*`` tensors declare the rank-8 gated head."""
    base = FIXTURES["specforge_dspark"]
    keys = ("markov_rank", "markov_head_type")
    config = {
        **base.config,
        "dflash_config": {k: v for k, v in base.config["dflash_config"].items() if k not in keys},
    }
    return write_checkpoint(tmp_path, Fixture("tensors_only_head", config, base.tensors, base.expect))


def test_the_target_runners_markov_check_passes_for_a_mask_fill_head_only_the_tensors_declare(
    target_dir, tmp_path, monkeypatch
):
    """The audit's crash: accepted at argument time, then "DSPARK requires markov_rank > 0" in every
    scheduler. The plan's head answers sglang's parse for the mask-fill DSpark route too."""
    monkeypatch.setenv(ENV_VAR, "dflash")  # the mask-fill route: DSPARK with sample_from_anchor=false
    draft = _tensors_only_head(tmp_path)
    # no mask-fill DSPARK layout: refused at argument resolution, never in a scheduler
    if not HAS_MASK_FILL_DSPARK:
        with pytest.raises(ValueError, match="0.5.19"):
            _prepared_server_args(target_dir, draft)
        return
    out = _run_in_subprocess("_target_side_refusal_site", str(target_dir), str(draft))
    assert out["rank_before_publish"] == 0  # what sglang reads from config.json alone
    assert out["rank_after_publish"] == [8, "gated"]  # the tensors' head, as the plan holds it
    assert out["target_rank"] == 0
    assert out["is_dspark"] is True
    assert out["aux"][0] is True


def _publish(monkeypatch, args) -> None:
    from sglang_dspark_plugin.sglang_plugin import hooks

    monkeypatch.setattr(hooks, "published_server_args", lambda: args)


def _with_plan(plan: ServePlan | None, algorithm: str = "DSPARK") -> SimpleNamespace:
    fields = {} if plan is None else {resolution.PLAN_ATTR: plan}
    return SimpleNamespace(speculative_algorithm=algorithm, **fields)


def _parsed(config_path: str, fixture: str):
    config = PretrainedConfig(**FIXTURES[fixture].config)
    config._name_or_path = config_path
    return parse_dspark_draft_config(draft_hf_config=config)


def test_the_parse_hook_answers_only_for_the_served_draft_of_a_dspark_plan(tmp_path, monkeypatch):
    from sglang_dspark_plugin.sglang_plugin.hooks import served_markov_after_parse

    plain = _served(tmp_path, "dspark_markov_rank0")
    gated = _served(tmp_path, "specforge_dspark")

    def answer(config_path: str, fixture: str, plan: ServePlan | None):
        _publish(monkeypatch, _with_plan(plan))
        result = _parsed(config_path, fixture)
        replaced = served_markov_after_parse(
            result, draft_hf_config=PretrainedConfig(_name_or_path=config_path)
        )
        got = result if replaced is None else replaced
        return got.markov_rank, got.markov_head_type

    assert answer(plain.draft, "dspark_markov_rank0", plain) == (1, "vanilla")  # the zero head
    assert answer(gated.draft, "specforge_dspark", gated)[0] == 8
    dflash = _served(tmp_path, "dspark_markov_rank0", env="dflash")  # served by DFLASH: nothing to report
    assert answer(dflash.draft, "dspark_markov_rank0", dflash) == (0, None)
    assert answer(plain.draft, "dspark_markov_rank0", None) == (0, None)  # a plain DSPARK launch
    not_the_draft = answer(gated.draft, "specforge_dspark", plain)[0]
    assert not_the_draft == (8 if NESTED_DFLASH_CONFIG else 0)  # sglang's own parse
    _publish(monkeypatch, None)
    assert (
        served_markov_after_parse(None, draft_hf_config=PretrainedConfig(_name_or_path=plain.draft)) is None
    )
    assert served_markov_after_parse(None, draft_hf_config=PretrainedConfig()) is None  # no path


@pytest.mark.parametrize(
    ("fixture", "cls", "parent", "arch", "loaded"),
    [
        (
            "dspark_markov_rank0",
            HarvestDSparkWorker,
            DSparkWorkerV2,
            "DSparkDraftModel",
            "HarvestDSparkDraftModel",
        ),
        ("zlab_dflash", HarvestDFlashWorker, DFlashWorkerV2, "DFlashDraftModel", "DFlashDraftModel"),
    ],
    ids=["dspark", "dflash"],
)
@pytest.mark.parametrize("positional", [False, True], ids=["keyword", "positional"])
def test_worker_init_checks_ranks_then_builds_its_parent_inside_the_route(
    fixture, cls, parent, arch, loaded, positional, target_dir, checkpoint_dir, monkeypatch
):
    from sglang.srt.models.registry import ModelRegistry

    from sglang_dspark_plugin.sglang_plugin import register

    assert register() is True
    server_args = _prepared_server_args(target_dir, write_checkpoint(checkpoint_dir, fixture))
    calls: list = []
    monkeypatch.setattr(workers, "_tp_cpu_group", lambda: calls.append("rank agreement") or (None, 0))

    parent_signature = inspect.signature(parent.__init__)

    def parent_init(self, *args, **kwargs):  # stands in for the GPU build; records what it would see
        bound = parent_signature.bind(self, *args, **kwargs)  # the real parent would accept the call
        bound.apply_defaults()
        seen = ModelRegistry.resolve_model_cls([arch])[0].__name__
        calls.append(("parent", sorted(bound.arguments), bound.arguments["server_args"] is server_args, seen))

    monkeypatch.setattr(parent, "__init__", parent_init)
    kwargs = {"server_args": server_args, "gpu_id": 0, "nccl_port": 0, "target_worker": None}
    if "ps" in inspect.signature(cls.__init__).parameters:
        kwargs["ps"] = None
    if positional:  # in the parent's order, as sglang's scheduler may call it
        worker = cls(*(kwargs[name] for name in parent_signature.parameters if name in kwargs))
    else:
        worker = cls(**kwargs)
    assert calls == ["rank agreement", ("parent", sorted(parent_signature.parameters), True, loaded)]
    assert ModelRegistry.resolve_model_cls([arch])[0].__name__ == arch  # restored after the build
    assert worker.dspark_rounds is not None
    assert worker.dspark_plan.layout == cls.dspark_layout
