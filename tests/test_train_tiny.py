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
from sglang_dspark_plugin.embedded import EMBEDDED, STRATEGIES
from sglang_dspark_plugin.engine.drafter import load_drafter, new_draft_model

torch.set_num_threads(2)

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "train_tiny.py"
TINY = [
    "--files", "3", "--vocab", "300", "--hidden", "64", "--layers", "4", "--heads", "4",
    "--kv-heads", "2", "--intermediate", "128", "--seq", "48", "--target-steps", "8",
    "--target-batch", "4", "--gen-seqs", "8", "--prompt-len", "12", "--gen-len", "20",
    "--block-size", "5", "--draft-steps", "6", "--draft-batch", "4", "--anchors", "4",
    "--n-prompts", "2", "--quiet",
]


def _load_script():
    spec = importlib.util.spec_from_file_location("train_tiny", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(out: Path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *TINY, *extra],
        capture_output=True, text=True, timeout=600,
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
    target = AutoModelForCausalLM.from_pretrained(
        out / "target", local_files_only=True, dtype=torch.float32
    )
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


def test_tiny_run_is_reproducible(tiny_runs):
    a, b = tiny_runs
    for rel in ("target", "drafter-dflash", "drafter-dspark"):
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
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "rms_norm_eps": 1e-6, "vocab_size": 50,
        "block_size": 4, "num_target_layers": 3,
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
                alone = model(embed(ids[n : n + 1, rows]), feats[n : n + 1, :a],
                              torch.cat([torch.arange(a), pos[n, rows]])[None])
                torch.testing.assert_close(packed[n : n + 1, rows], alone, atol=1e-5, rtol=1e-5)


def test_embedded_models_are_shipped_and_census_gives_their_own_convention():
    assert EMBEDDED.block_size >= 2 and len(EMBEDDED.prompts) >= 4
    total = sum(f.stat().st_size for f in EMBEDDED.root.rglob("*") if f.is_file())
    assert total <= 24 * 1024 * 1024, f"embedded artifacts are {total / 2**20:.1f} MB"
    for strategy, folder in EMBEDDED.drafters.items():
        cfg = census(folder)
        assert cfg.strategy_dspark is (strategy == "dspark")
        assert cfg.block_size == EMBEDDED.block_size
        drafter = load_drafter(folder)
        assert drafter.mask_token_id == EMBEDDED.report["tokenizer"]["mask_token_id"]


def test_the_embedded_docstring_example_runs():
    import doctest

    from sglang_dspark_plugin import embedded

    result = doctest.testmod(embedded)
    assert result.attempted >= 5 and result.failed == 0


def test_inspect_reports_each_embedded_drafters_convention():
    from sglang_dspark_plugin.inspect_cmd import inspect_checkpoint

    for strategy, folder in EMBEDDED.drafters.items():
        report = inspect_checkpoint(str(folder), environ={})
        assert (report["harvest"], report["source"]) == (strategy, "census"), report
        assert report["n_drafts"] == EMBEDDED.block_size - (strategy == "dflash")
