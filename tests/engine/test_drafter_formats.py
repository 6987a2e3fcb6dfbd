"""speculators and TorchSpec drafters in the reference engine: their names mapped onto z-lab's, the
same model as the z-lab original, and every tensor that does not map named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from export_formats import to_speculators, to_torchspec
from safetensors.torch import load_file, save_file

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.engine.drafter import load_drafter
from sglang_dspark_plugin.engine.fit import check_engine_can_draft
from sglang_dspark_plugin.engine.formats import SPECULATORS, TORCHSPEC, ZLAB, export_format
from sglang_dspark_plugin.errors import InvalidCheckpointError, UnsupportedCheckpointError

torch.set_num_threads(2)

SOURCES = {"dflash": "dflash", "dspark-markov": "dspark"}  # embedded drafter -> speculators model type


def _convert(kind: str, fmt: str, tmp_path: Path) -> Path:
    src = Path(EMBEDDED.drafters[kind])
    if fmt == "speculators":
        shifted = census(src).strategy_dspark
        return to_speculators(src, tmp_path / fmt, model_type=SOURCES[kind], sample_from_anchor=shifted)
    return to_torchspec(src, tmp_path / fmt)


def _draft(model, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    h, q, ctx = model.config.hidden_size, model.block_size, 5
    noise = torch.randn(1, q, h, generator=g)
    target_hidden = torch.randn(1, ctx, len(model.target_layer_ids) * h, generator=g)
    with torch.no_grad():
        return model(noise, target_hidden, torch.arange(ctx + q)[None])


@pytest.mark.parametrize("fmt", ["speculators", "torchspec"])
@pytest.mark.parametrize("kind", list(SOURCES))
def test_an_exported_drafter_is_the_same_model(tmp_path, kind, fmt):
    original = load_drafter(EMBEDDED.drafters[kind])
    folder = _convert(kind, fmt, tmp_path)
    cfg = census(folder)
    assert cfg.strategy_dspark is census(EMBEDDED.drafters[kind]).strategy_dspark
    check_engine_can_draft(cfg)
    loaded = load_drafter(folder, cfg=cfg)
    assert export_format(cfg) is (SPECULATORS if fmt == "speculators" else TORCHSPEC)
    assert loaded.target_layer_ids == original.target_layer_ids  # speculators' aux ids are one higher
    assert (loaded.markov_head is None) is (original.markov_head is None)
    assert (loaded.confidence_head is None) is (original.confidence_head is None)
    assert torch.equal(_draft(loaded, 3), _draft(original, 3))


def test_the_zlab_layout_keeps_its_names():
    assert export_format(census(EMBEDDED.drafters["dflash"])) is ZLAB
    assert ZLAB.engine_name("fc.weight") == "fc.weight" and ZLAB.engine_name("embed_tokens.weight")


def _edit(folder: Path, *, drop: tuple[str, ...] = (), add: dict | None = None, config: dict | None = None):
    state = load_file(str(folder / "model.safetensors"))
    state = {k: v for k, v in state.items() if k not in drop} | (add or {})
    save_file(state, str(folder / "model.safetensors"))
    if config:
        raw = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps(raw | config))


def test_a_missing_tensor_is_named_as_the_format_names_it(tmp_path):
    folder = _convert("dspark-markov", "torchspec", tmp_path)
    _edit(folder, drop=("context_norm.weight", "final_norm.weight"))
    with pytest.raises(InvalidCheckpointError) as info:
        load_drafter(folder)
    msg = info.value.message
    assert "context_norm.weight" in msg and "final_norm.weight" in msg and "2 tensor(s)" in msg
    assert "TorchSpec" in msg and "hidden_norm.weight" not in msg


def test_an_unmapped_tensor_is_named(tmp_path):
    folder = _convert("dflash", "speculators", tmp_path)
    _edit(folder, add={"candidate_selector.proj.weight": torch.zeros(4, 4, dtype=torch.float16)})
    with pytest.raises(InvalidCheckpointError) as info:
        load_drafter(folder)
    assert "candidate_selector.proj.weight" in info.value.message


def test_a_reduced_draft_vocabulary_is_refused(tmp_path):
    folder = _convert("dflash", "speculators", tmp_path)
    _edit(folder, add={"t2d": torch.ones(8, dtype=torch.bool), "d2t": torch.zeros(4, dtype=torch.int64)})
    with pytest.raises(UnsupportedCheckpointError) as info:
        load_drafter(folder)
    assert "t2d" in info.value.message and "draft vocabulary" in info.value.message
    _edit(folder, drop=("t2d", "d2t"), config={"draft_vocab_size": 64})
    with pytest.raises(UnsupportedCheckpointError) as info:
        check_engine_can_draft(census(folder))  # refused from the census, before anything loads
    assert "draft_vocab_size" in info.value.message


def test_an_aux_id_of_the_embedding_output_is_refused(tmp_path):
    folder = _convert("dflash", "speculators", tmp_path)
    _edit(folder, config={"aux_hidden_state_layer_ids": [0, 2, 5]})
    with pytest.raises(InvalidCheckpointError) as info:
        load_drafter(folder)
    assert "aux_hidden_state_layer_ids" in info.value.where
