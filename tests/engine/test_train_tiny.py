"""scripts/train_tiny.py end to end in a tiny configuration, its objectives, and the shipped models."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.embedded import DRAFTERS, EMBEDDED, STRATEGIES
from sglang_dspark_plugin.engine.drafter import load_drafter, new_draft_model

torch.set_num_threads(2)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "train_tiny.py"
TINY = [
    "--files",
    "3",
    "--vocab",
    "300",
    "--hidden",
    "64",
    "--layers",
    "4",
    "--heads",
    "4",
    "--kv-heads",
    "2",
    "--intermediate",
    "128",
    "--seq",
    "48",
    "--target-steps",
    "8",
    "--target-batch",
    "4",
    "--gen-seqs",
    "8",
    "--prompt-len",
    "12",
    "--gen-len",
    "20",
    "--block-size",
    "5",
    "--draft-steps",
    "6",
    "--draft-batch",
    "4",
    "--anchors",
    "4",
    "--n-prompts",
    "2",
    "--markov-rank",
    "4",
    "--quiet",
]
MARKOV = "drafter-dspark-markov"
MASKFILL = "drafter-dspark-maskfill"


def _load_script():
    spec = importlib.util.spec_from_file_location("train_tiny", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory) -> tuple[Path, Path]:
    a, b = tmp_path_factory.mktemp("run_a"), tmp_path_factory.mktemp("run_b")
    _run(a)
    _run(b)
    return a, b


def test_tiny_run_exports_loadable_models(tiny_runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tiny_runs[0]
    tok = AutoTokenizer.from_pretrained(out / "target", local_files_only=True)
    target = AutoModelForCausalLM.from_pretrained(out / "target", local_files_only=True, dtype=torch.float32)
    mask_id = tok.convert_tokens_to_ids("<|MASK|>")
    assert target.config.num_hidden_layers == 4 and target.config.vocab_size == len(tok)
    for strategy in STRATEGIES:
        folder = out / f"drafter-{strategy}"
        cfg = json.loads((folder / "config.json").read_text())
        assert cfg["architectures"] == ["DSparkDraftModel" if strategy == "dspark" else "DFlashDraftModel"]
        assert cfg["model_type"] == "qwen3" and cfg["block_size"] == 5 and cfg["num_target_layers"] == 4
        assert cfg["layer_types"] == ["full_attention"]
        assert cfg["dflash_config"]["mask_token_id"] == mask_id
        assert cfg["dflash_config"].get("projector_type") == ("dspark" if strategy == "dspark" else None)
        drafter = load_drafter(folder)
        assert drafter.block_size == 5 and drafter.mask_token_id == mask_id
        assert all(t < 4 for t in drafter.target_layer_ids)
        assert census(folder).strategy_dspark is (strategy == "dspark")
        from safetensors import safe_open

        with safe_open(str(folder / "model.safetensors"), "pt") as f:
            assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    report = json.loads((out / "training_report.json").read_text())
    assert report["seed"] == 1234 and report["block_size"] == 5
    assert len(report["drafters"]["dflash"]) and report["wall_time_s"]["total_s"] > 0
    prompts = json.loads((out / "prompts.json").read_text())
    assert len(prompts) == 2 and all(isinstance(p, str) and p for p in prompts)


def test_tiny_run_exports_the_specforge_shaped_markov_drafter(tiny_runs):
    from transformers import AutoModelForCausalLM

    from sglang_dspark_plugin.engine import autoregressive_generate, speculative_generate
    from sglang_dspark_plugin.harvest import DsparkHarvest

    out = tiny_runs[0]
    folder = out / MARKOV
    cfg = json.loads((folder / "config.json").read_text())
    # SpecForge's sglang-normalised export: Markov keys hoisted to the top level, nested ones kept
    heads = {
        "markov_rank": 4,
        "markov_head_type": "vanilla",
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
    }
    assert {k: cfg[k] for k in heads} == heads and {k: cfg["dflash_config"][k] for k in heads} == heads
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["block_size"] == 7
    assert cfg["dflash_config"]["projector_type"] == "dspark" and cfg["model_type"] == "qwen3"
    report = json.loads((out / "training_report.json").read_text())["drafters"]
    assert report["dspark-markov"]["block_size"] == 7 and report["dflash"]["block_size"] == 5
    assert set(report["dspark-markov"]["loss_parts_last_50"]) == {"ce", "l1", "confidence_bce"}
    census_cfg = census(folder)
    assert census_cfg.strategy_dspark and census_cfg.markov_rank == 4 and census_cfg.block_size == 7
    drafter = load_drafter(folder)
    assert drafter.describe()["markov_head"] == {"type": "vanilla", "rank": 4}
    assert drafter.describe()["confidence_head"] == {"with_markov": True, "input_width": 64 + 4}
    assert float(drafter.markov_head.markov_w2.weight.detach().abs().max()) > 0
    target = AutoModelForCausalLM.from_pretrained(out / "target", local_files_only=True, dtype=torch.float32)
    prompt = list(range(2, 14))
    ref = autoregressive_generate(target, prompt, 16).tokens
    for harvest in DsparkHarvest:  # the exported drafter runs in the engine, exactly
        assert speculative_generate(target, drafter, prompt, harvest, 16).tokens == ref


def test_tiny_run_exports_the_mask_fill_markov_drafter(tiny_runs):
    """The same architecture and heads trained mask-fill: declared the way sglang 0.5.23 reads it."""
    out = tiny_runs[0]
    cfg = json.loads((out / MASKFILL / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3DSparkModel"] and cfg["sample_from_anchor"] is False
    assert cfg["block_size"] == 5 and cfg["markov_rank"] == 4 and cfg["markov_head_type"] == "vanilla"
    census_cfg = census(out / MASKFILL)
    assert not census_cfg.strategy_dspark and census_cfg.markov_rank == 4  # the explicit flag decides
    report = json.loads((out / "training_report.json").read_text())["drafters"]["dspark-maskfill"]
    assert report["block_size"] == 5 and set(report["loss_parts_last_50"]) == {"ce", "l1", "confidence_bce"}
    drafter = load_drafter(out / MASKFILL)
    assert float(drafter.markov_head.markov_w2.weight.detach().abs().max()) > 0


def test_mask_fill_training_labels_and_markov_predecessors():
    """Mask-fill: row k learns anchor+k (row 0 out of the loss); its Markov bias comes from anchor+k-1."""
    tt = _load_script()
    seqs = torch.arange(100, 140).view(1, -1)
    gen = torch.Generator().manual_seed(0)
    ids, pos, labels, valid, _ = tt.block_batch(seqs, 3, 4, 8, "dflash", 1, gen)
    blocks, pos_b, valid_b = labels.view(1, -1, 4), pos.view(1, -1, 4), valid.view(1, -1, 4)
    inside = pos_b < seqs.shape[1]
    assert torch.equal(valid_b[..., 1:], inside[..., 1:]) and not valid_b[..., 0].any()
    assert torch.equal(blocks[inside], seqs[0, pos_b[inside]])  # row k's label: the token at anchor + k
    prev = torch.cat([ids.view(1, -1, 4)[..., :1], blocks[..., :-1]], dim=-1)  # as train_markov_drafter
    trained = valid_b.clone()
    assert torch.equal(prev[trained], seqs[0, pos_b[trained] - 1])  # the token before each label


def test_a_subset_run_replays_the_other_drafters_draws(tiny_runs, tmp_path):
    a = tiny_runs[0]
    out = tmp_path / "markov-only"
    _run(out, "--drafters", "dspark-markov")
    assert not (out / "drafter-dflash").exists() and not (out / "drafter-dspark").exists()
    assert _digest(out / MARKOV / "model.safetensors") == _digest(a / MARKOV / "model.safetensors")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--drafters", "dspark,eagle"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--drafters: unknown ['eagle']" in proc.stderr


def test_markov_training_logits_are_the_engines_drafting_logits_under_teacher_forcing():
    """Training biases row k by the ground-truth token before its label; when the engine's greedy
    drafts are those tokens, the engine's step logits are exactly the training logits."""
    from sglang_dspark_plugin.engine.markov import build_markov_head, draft_block

    script = _load_script()
    g = torch.Generator().manual_seed(3)
    for head_type in ("vanilla", "gated", "rnn"):
        head = build_markov_head(head_type, vocab_size=11, markov_rank=3, hidden_size=8)
        with torch.no_grad():
            for p in head.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
        base, hidden, anchor = torch.randn(2, 5, 11, generator=g), torch.randn(2, 5, 8, generator=g), [4, 7]
        drafted = [
            draft_block(head, base[i], hidden[i], torch.tensor(anchor[i]), temperature=0, generator=None)[0]
            for i in range(2)
        ]
        prev = torch.stack([torch.cat([torch.tensor(anchor[i : i + 1]), drafted[i][:-1]]) for i in range(2)])
        prev = prev[:, None]  # [n, blocks, b]: one block per sequence
        with torch.no_grad():
            logits = script.markov_logits(head, base, hidden, prev)
        assert torch.equal(logits.argmax(-1), torch.stack(drafted)), head_type
        assert not torch.equal(logits, base)


def test_dspark_loss_is_specforges_mixture():
    script = _load_script()
    g = torch.Generator().manual_seed(4)
    logits, teacher_logits = torch.randn(6, 9, generator=g), torch.randn(6, 9, generator=g)
    teacher, labels = torch.softmax(teacher_logits, -1), torch.randint(0, 9, (6,), generator=g)
    confidence, weights = torch.randn(6, generator=g), torch.tensor([1.0, 0.8, 0.5, 0.0, 1.0, 0.3])
    loss, parts = script.dspark_loss(logits, labels, teacher, confidence, weights)
    ce = -torch.log_softmax(logits, -1)[torch.arange(6), labels]
    l1 = (torch.softmax(logits, -1) - teacher).abs().sum(-1)
    accept = (1 - l1 / 2).clamp(0, 1)
    sig = torch.sigmoid(confidence)
    bce = -(accept * torch.log(sig) + (1 - accept) * torch.log(1 - sig))
    want = ((0.1 * ce + 0.9 * l1 + 1.0 * bce) * weights).sum() / weights.sum()
    torch.testing.assert_close(loss, want)
    assert parts["l1"] == pytest.approx(float((l1 * weights).sum() / weights.sum()))


def test_tiny_run_is_reproducible(tiny_runs):
    a, b = tiny_runs
    for rel in ("target", "drafter-dflash", "drafter-dspark", MARKOV, MASKFILL):
        rel = f"{rel}/model.safetensors"
        assert _digest(a / rel) == _digest(b / rel), rel


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_block_batch_labels_follow_the_objective(strategy):
    script = _load_script()
    seqs = torch.arange(100, 130).view(1, 30)  # token value = 100 + position
    gen = torch.Generator().manual_seed(0)
    ids, pos, labels, valid, mask = script.block_batch(seqs, 10, 4, 3, strategy, 7, gen)
    anchors = pos.view(3, 4)[:, 0]
    assert torch.equal(ids.view(3, 4)[:, 0], 100 + anchors) and bool((ids.view(3, 4)[:, 1:] == 7).all())
    offset = 1 if strategy == "dspark" else 0
    lab, ok = labels.view(3, 4), valid.view(3, 4)
    for j, a in enumerate(anchors.tolist()):
        for r in range(4):
            if ok[j, r]:
                assert lab[j, r].item() == 100 + a + r + offset
        # mask-fill never trains the anchor row; shifted trains every row whose label exists
        assert bool(ok[j, 0]) is (strategy == "dspark")


def test_packed_training_forward_equals_inference_per_block():
    """The training mask gives each block exactly what inference gives it: context < anchor + block."""
    script = _load_script()
    cfg = {
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "rms_norm_eps": 1e-6,
        "vocab_size": 50,
        "block_size": 4,
        "num_target_layers": 3,
        "dflash_config": {"mask_token_id": 49, "target_layer_ids": [0, 2]},
    }
    model = new_draft_model(cfg, seed=0)
    seqs = torch.randint(0, 49, (2, 20), generator=torch.Generator().manual_seed(1))
    feats = torch.randn(2, 20, 64)
    embed = torch.nn.Embedding(50, 32)
    ids, pos, _, _, mask = script.block_batch(seqs, 5, 4, 3, "dspark", 49, torch.Generator().manual_seed(2))
    with torch.no_grad():
        position_ids = torch.cat([torch.arange(20).expand(2, -1), pos], 1)
        packed = model(embed(ids), feats, position_ids, attention_mask=mask)
        for n in range(2):
            for j in range(3):
                rows = slice(4 * j, 4 * j + 4)
                a = int(pos[n, 4 * j])
                alone = model(
                    embed(ids[n : n + 1, rows]),
                    feats[n : n + 1, :a],
                    torch.cat([torch.arange(a), pos[n, rows]])[None],
                )
                torch.testing.assert_close(packed[n : n + 1, rows], alone, atol=1e-5, rtol=1e-5)


def test_embedded_models_are_shipped_and_census_gives_their_own_convention():
    assert len(EMBEDDED.prompts) >= 4
    # every drafter the training report lists is shipped, keyed by its name, with its own block size
    assert list(EMBEDDED.drafters) == list(DRAFTERS) and set(EMBEDDED.report["drafters"]) == set(DRAFTERS)
    assert EMBEDDED.block_sizes["dspark-markov"] != EMBEDDED.block_sizes["dspark"]
    for name, folder in EMBEDDED.drafters.items():
        assert folder.name == f"drafter-{name}"
        cfg = census(folder)
        assert cfg.strategy_dspark is (EMBEDDED.strategy(name) == "dspark"), name
        assert cfg.block_size == EMBEDDED.block_sizes[name] >= 2, name
        drafter = load_drafter(folder)
        assert drafter.block_size == EMBEDDED.block_sizes[name]
        assert drafter.mask_token_id == EMBEDDED.report["tokenizer"]["mask_token_id"]
        entry = EMBEDDED.report["drafters"][name]
        assert json.loads((folder / "config.json").read_text())["architectures"] == [entry["architecture"]]
        # a Markov head exactly where the report trained one, at the rank it reports
        rank = entry.get("markov_rank", 0)
        assert (cfg.markov_rank or 0) == rank, name
        assert (drafter.markov_head is not None) is (rank > 0), name
    # the SpecForge-shaped drafters (shifted and mask-fill): sglang-normalised spelling, both heads
    for name in ("dspark-markov", "dspark-maskfill"):
        markov = load_drafter(EMBEDDED.drafters[name])
        assert markov.describe()["markov_head"]["type"] == "vanilla"
        assert markov.describe()["confidence_head"]["with_markov"] is True
    maskfill = json.loads((EMBEDDED.drafters["dspark-maskfill"] / "config.json").read_text())
    assert maskfill["sample_from_anchor"] is False and EMBEDDED.strategy("dspark-maskfill") == "dflash"


def test_embedded_models_fit_the_size_bound():
    """Everything under sglang_dspark_plugin/embedded/ ships in the wheel: all of it under 24 MiB."""
    total = sum(f.stat().st_size for f in EMBEDDED.root.rglob("*") if f.is_file())
    assert total <= 24 * 1024 * 1024, f"embedded artifacts are {total / 2**20:.1f} MiB"


def test_the_embedded_docstring_example_runs():
    import doctest

    from sglang_dspark_plugin import embedded

    result = doctest.testmod(embedded)
    assert result.attempted >= 5 and result.failed == 0


def test_inspect_reports_each_embedded_drafters_convention():
    from sglang_dspark_plugin.cli.inspect import inspect_checkpoint

    for name, folder in EMBEDDED.drafters.items():
        strategy = EMBEDDED.strategy(name)
        report = inspect_checkpoint(str(folder), environ={})
        assert (report["harvest"], report["source"]) == (strategy, "census"), report
        assert report["n_drafts"] == EMBEDDED.block_sizes[name] - (strategy == "dflash")
