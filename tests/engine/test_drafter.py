"""The DFlash-family drafter: its math, its context cache, and loading z-lab / SpecForge checkpoints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.engine.drafter import DraftCache, load_drafter, new_draft_model
from sglang_dspark_plugin.errors import InvalidCheckpointError

torch.set_num_threads(2)

H, KV_HEADS, HEADS, HEAD_DIM = 64, 2, 4, 16
LAYER_IDS = [1, 3]


def _config(arch: str = "DFlashDraftModel", *, block_size: int = 5, num_layers: int = 1, **dflash) -> dict:
    """A SpecForge-style export config (config.json keys as SpecForge writes them)."""
    dflash_config = {"mask_token_id": 255, "target_layer_ids": LAYER_IDS, **dflash}
    return {
        "architectures": [arch],
        "model_type": "qwen3",
        "block_size": block_size,
        "num_target_layers": 4,
        "num_hidden_layers": num_layers,
        "layer_types": ["full_attention"] * num_layers,
        "dflash_config": dflash_config,
        "vocab_size": 256,
        "draft_vocab_size": 256,
        "hidden_size": H,
        "intermediate_size": 128,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def _zlab_config(block_size: int = 6) -> dict:
    """The z-lab flavour: an auto_map, block size at the top level, an older rope key only."""
    cfg = _config(block_size=block_size)
    cfg.pop("rope_parameters")
    cfg["auto_map"] = {"AutoModel": "dflash.DFlashDraftModel"}
    return cfg


def _randomize_norms(model: torch.nn.Module, seed: int) -> None:
    # Norm weights start at 1; perturb them so a mix-up between norms cannot go unnoticed.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=g))


def _write(folder: Path, config: dict, state: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def _inputs(seed: int, ctx: int, q: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(1, q, H, generator=g)
    target_hidden = torch.randn(1, ctx, len(LAYER_IDS) * H, generator=g)
    position_ids = torch.arange(ctx + q)[None]
    return noise, target_hidden, position_ids


def _reference_forward(state: dict[str, torch.Tensor], noise, target_hidden, position_ids, eps=1e-6):
    """The z-lab / SpecForge forward written out from the weights, independently of the module."""

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rope(x, pos):
        inv = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        ang = pos[0, :, None].float() * inv
        cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2 :]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    c, q = target_hidden.shape[1], noise.shape[1]
    ctx = rms(target_hidden @ state["fc.weight"].T, state["hidden_norm.weight"])
    x = noise
    p = "layers.0."
    h = rms(x, state[p + "input_layernorm.weight"])
    qs = (h @ state[p + "self_attn.q_proj.weight"].T).view(1, q, HEADS, HEAD_DIM)
    qs = rope(rms(qs, state[p + "self_attn.q_norm.weight"]).transpose(1, 2), position_ids[:, c:])
    kv_in = torch.cat([ctx, h], dim=1)
    ks = (kv_in @ state[p + "self_attn.k_proj.weight"].T).view(1, c + q, KV_HEADS, HEAD_DIM)
    ks = rope(rms(ks, state[p + "self_attn.k_norm.weight"]).transpose(1, 2), position_ids)
    vs = (kv_in @ state[p + "self_attn.v_proj.weight"].T).view(1, c + q, KV_HEADS, HEAD_DIM).transpose(1, 2)
    ks, vs = ks.repeat_interleave(HEADS // KV_HEADS, 1), vs.repeat_interleave(HEADS // KV_HEADS, 1)
    att = torch.softmax(qs @ ks.transpose(-1, -2) / HEAD_DIM**0.5, dim=-1)  # no mask: non-causal
    o = (att @ vs).transpose(1, 2).reshape(1, q, HEADS * HEAD_DIM) @ state[p + "self_attn.o_proj.weight"].T
    x = x + o
    h = rms(x, state[p + "post_attention_layernorm.weight"])
    gate, up = h @ state[p + "mlp.gate_proj.weight"].T, h @ state[p + "mlp.up_proj.weight"].T
    x = x + (torch.nn.functional.silu(gate) * up) @ state[p + "mlp.down_proj.weight"].T
    return rms(x, state["norm.weight"])


def test_parameter_names_are_the_zlab_specforge_names():
    model = new_draft_model(_config(), seed=0)
    layer = {
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "self_attn.q_norm.weight",
        "self_attn.k_norm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
    }
    expected = {f"layers.0.{n}" for n in layer} | {"fc.weight", "hidden_norm.weight", "norm.weight"}
    assert set(model.state_dict()) == expected
    assert model.fc.weight.shape == (H, len(LAYER_IDS) * H)
    assert (model.block_size, model.mask_token_id, model.target_layer_ids) == (5, 255, LAYER_IDS)


def test_forward_matches_the_written_out_reference():
    model = new_draft_model(_config(), seed=1)
    _randomize_norms(model, 1)
    noise, th, pos = _inputs(2, ctx=9, q=5)
    with torch.no_grad():
        got = model(noise, th, pos)
        want = _reference_forward(model.state_dict(), noise, th, pos)
    assert got.shape == (1, 5, H)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_extract_context_feature_takes_layer_outputs():
    model = new_draft_model(_config(), seed=0)
    hs = tuple(torch.full((1, 3, H), float(i)) for i in range(5))  # index 0 = embeddings
    feat = model.extract_context_feature(hs)
    assert feat.shape == (1, 3, 2 * H)
    assert feat[0, 0, 0].item() == LAYER_IDS[0] + 1 and feat[0, 0, -1].item() == LAYER_IDS[1] + 1


@pytest.mark.parametrize("chunks", [[9], [1, 8], [4, 3, 2], [1] * 9, [0, 6, 0, 3]])
def test_incremental_cache_equals_context_at_once(chunks):
    model = new_draft_model(_config(num_layers=2), seed=3)
    _randomize_norms(model, 3)
    noise, th, pos = _inputs(4, ctx=9, q=5)
    with torch.no_grad():
        want = model(noise, th, pos)
        cache, start = DraftCache(2), 0
        for n in chunks:
            block_pos = torch.arange(start + n, start + n + 5)[None]
            ctx_pos = pos[:, start : start + n]
            got = model(noise, th[:, start : start + n], torch.cat([ctx_pos, block_pos], 1), cache)
            start += n
            assert cache.length == start  # block rows are never stored
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_crop_rolls_back_uncommitted_context():
    model = new_draft_model(_config(), seed=5)
    noise, th, pos = _inputs(6, ctx=8, q=5)
    with torch.no_grad():
        want = model(noise, th, pos)
        cache = model.new_cache()
        model(noise, th[:, :6], torch.arange(11)[None], cache)
        # Context that verification then rejects (different features) must leave no trace after crop.
        model(noise, torch.randn(1, 2, 2 * H), torch.arange(6, 13)[None], cache)
        cache.crop(6)
        assert cache.length == 6
        got = model(noise, th[:, 6:], pos[:, 6:], cache)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError):
        cache.crop(-1)


def test_block_is_non_causal():
    model = new_draft_model(_config(), seed=7)
    noise, th, pos = _inputs(8, ctx=4, q=5)
    with torch.no_grad():
        a = model(noise, th, pos)
        changed = noise.clone()
        changed[:, -1] += 1.0
        b = model(changed, th, pos)
    # A change in the LAST block row reaches row 0: every row sees the whole block.
    assert not torch.allclose(a[:, 0], b[:, 0])


def test_load_specforge_format_equals_in_memory(tmp_path):
    cfg = _config(
        "DSparkDraftModel", block_size=7, projector_type="dspark", attention_mode="gqa", markov_rank=0
    )
    model = new_draft_model(cfg, seed=11)
    _randomize_norms(model, 11)
    folder = _write(tmp_path / "sf", cfg, dict(model.state_dict()))
    loaded = load_drafter(folder)
    assert (loaded.block_size, loaded.mask_token_id, loaded.target_layer_ids) == (7, 255, LAYER_IDS)
    assert loaded.config.architectures == ["DSparkDraftModel"]
    noise, th, pos = _inputs(12, ctx=6, q=7)
    # a census the caller already took gives the same model as the one load_drafter takes itself
    from_census = load_drafter(folder, cfg=census(str(folder)))
    with torch.no_grad():
        assert torch.equal(loaded(noise, th, pos), model(noise, th, pos))
        assert torch.equal(from_census(noise, th, pos), model(noise, th, pos))


def test_load_zlab_format_bf16_equals_in_memory(tmp_path):
    cfg = _zlab_config(block_size=6)
    model = new_draft_model(cfg, seed=13)
    _randomize_norms(model, 13)
    state = {k: v.to(torch.bfloat16) for k, v in model.state_dict().items()}
    folder = _write(tmp_path / "zlab", cfg, state)
    loaded = load_drafter(folder, dtype=torch.float32)
    model.load_state_dict({k: v.float() for k, v in state.items()})  # the same rounding as the file
    noise, th, pos = _inputs(14, ctx=5, q=6)
    with torch.no_grad():
        assert torch.equal(loaded(noise, th, pos), model(noise, th, pos))
    assert loaded.block_size == 6
    assert load_drafter(folder, dtype=torch.bfloat16).fc.weight.dtype == torch.bfloat16


def test_legacy_logit_head_prefix_is_normalised(tmp_path):
    cfg = _config()
    model = new_draft_model(cfg, seed=0)
    state = dict(model.state_dict())
    # Old SpecForge heads under logit_head.: loaded under sglang's names, the rank read off markov_w1.
    state["logit_head.confidence_head.proj.weight"] = torch.full((1, H), 0.5)
    state["logit_head.confidence_head.proj.bias"] = torch.ones(1)
    state["logit_head.markov_head.markov_w1.weight"] = torch.full((256, 8), 2.0)
    state["logit_head.markov_head.markov_w2.weight"] = torch.full((256, 8), 3.0)
    loaded = load_drafter(_write(tmp_path / "legacy", cfg, state))
    assert set(loaded.state_dict()) == set(model.state_dict()) | {
        "confidence_head.proj.weight",
        "confidence_head.proj.bias",
        "markov_head.markov_w1.weight",
        "markov_head.markov_w2.weight",
    }
    assert float(loaded.markov_head.markov_w2.weight[0, 0].detach()) == 3.0
    assert loaded.describe()["markov_head"] == {"type": "vanilla", "rank": 8}
    assert loaded.describe()["confidence_head"] == {"with_markov": False, "input_width": H}


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    cfg = _config()
    state = dict(new_draft_model(cfg, seed=0).state_dict())
    del state["layers.0.mlp.up_proj.weight"]
    state["embed_tokens.weight"] = torch.zeros(256, H)
    with pytest.raises(InvalidCheckpointError) as err:
        load_drafter(_write(tmp_path / "bad", cfg, state))
    msg = str(err.value)
    assert "layers.0.mlp.up_proj.weight" in msg and "embed_tokens.weight" in msg
    assert err.value.kind == "invalid" and "model.safetensors" in err.value.where


def test_more_layers_in_config_than_in_weights_is_refused(tmp_path):
    state = dict(new_draft_model(_config(), seed=0).state_dict())
    # refused from the counts, before a layer is built
    with pytest.raises(InvalidCheckpointError, match="num_hidden_layers = 2 but the weights hold 1 layer"):
        load_drafter(_write(tmp_path / "two", _config(num_layers=2), state))


def test_shape_mismatch_is_refused(tmp_path):
    cfg = _config()
    state = dict(new_draft_model(cfg, seed=0).state_dict())
    state["fc.weight"] = torch.zeros(H, 3 * H)  # three target layers' worth, config says two
    with pytest.raises(InvalidCheckpointError, match=r"fc\.weight.*\(64, 192\)"):
        load_drafter(_write(tmp_path / "shape", cfg, state))


def test_missing_weights_file_is_refused(tmp_path):
    folder = tmp_path / "noweights"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_config()))
    with pytest.raises(InvalidCheckpointError, match="model.safetensors"):
        load_drafter(folder)


def test_missing_folder_is_refused(tmp_path):
    with pytest.raises(InvalidCheckpointError):
        load_drafter(tmp_path / "does-not-exist")


def test_a_config_without_target_layers_is_refused_by_name():
    with pytest.raises(InvalidCheckpointError, match="target_layer_ids is missing") as err:
        new_draft_model(_config(target_layer_ids=[]))
    assert err.value.where == "config.json:dflash_config.target_layer_ids"
