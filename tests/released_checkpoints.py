"""Fixture drafters of the formats published after the first held-out set (issue 17), each written
from a real config, its source named above it.

Sizes are shrunk (vocabulary 256, hidden 32, Markov rank 8) so that the tensors stay tiny; the keys,
their nesting, the layer ids, block sizes and weight names are the published ones. Not in
``checkpoints.FIXTURES``: several have no block size (TorchSpec's and Kimi K3's exporters write none),
which the whole-set tests there require.
"""

from __future__ import annotations

from typing import Any

from checkpoints import Fixture, _backbone, _markov

_VOCAB, _HIDDEN, _RANK = 256, 32, 8


def _qwen3_keys(**extra: Any) -> dict[str, Any]:
    """The Qwen3 keys every one of these drafters carries, shrunk."""
    return {
        "hidden_size": _HIDDEN,
        "intermediate_size": 2 * _HIDDEN,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": _HIDDEN // 4,
        "vocab_size": _VOCAB,
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": 4096,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        **extra,
    }


def _torchspec_weights(markov: bool, n_target: int = 5) -> dict[str, tuple[int, ...]]:
    """TorchSpec's native export names (``torchspec/models/draft/dflash.py``: ``context_proj``,
    ``context_norm``, ``final_norm``, a frozen ``embed_tokens``; the decoder layers keep Qwen3 names)."""
    body = {k: v for k, v in _backbone(n_target=n_target).items() if k.startswith("layers.")}
    out = {
        "context_proj.weight": (_HIDDEN, _HIDDEN * n_target),
        "context_norm.weight": (_HIDDEN,),
        "final_norm.weight": (_HIDDEN,),
        "embed_tokens.weight": (_VOCAB, _HIDDEN),
        **body,
    }
    if markov:
        out.update(
            {
                "markov_head.markov_w1.weight": (_VOCAB, _RANK),
                "markov_head.markov_w2.weight": (_VOCAB, _RANK),
                "confidence_head.proj.weight": (1, _HIDDEN + _RANK),
                "confidence_head.proj.bias": (1,),
            }
        )
    return out


def _speculators(model_type: str, arch: str, b: int, tokens: int | None, **extra: Any) -> dict[str, Any]:
    """A vllm-project/speculators 0.7 export, as ``DFlashDraftModel._build_base_config_kwargs``
    (src/speculators/models/dflash/core.py) and the DSpark config class
    (src/speculators/models/dspark/config.py) write it."""
    method: dict[str, Any] = {"proposal_type": "greedy"}
    if tokens is not None:
        method["speculative_tokens"] = tokens
    return {
        "architectures": [arch],
        "speculators_model_type": model_type,
        "speculators_version": "0.7.0",
        "block_size": b,
        "draft_vocab_size": _VOCAB,
        "aux_hidden_state_layer_ids": [2, 3],
        "mask_token_id": _VOCAB - 1,
        "sliding_window_non_causal": False,
        "transformer_layer_config": {
            "model_type": "qwen3",
            **_qwen3_keys(),
            "layer_types": ["full_attention"],
        },
        "speculators_config": {
            "algorithm": model_type,
            "default_proposal_method": "greedy",
            "proposal_methods": [method],
            "verifier": {"name_or_path": "Qwen/Qwen3-8B", "architectures": ["Qwen3ForCausalLM"]},
        },
        **extra,
    }


def _speculators_weights(markov: bool) -> dict[str, tuple[int, ...]]:
    """speculators' saved state dict: the backbone under z-lab names plus its own frozen embedding and
    LM head (``DraftVocabMixin``; ``verifier_lm_head`` / ``verifier_norm`` are left out on save)."""
    out = {
        **_backbone(n_target=2),
        "embed_tokens.weight": (_VOCAB, _HIDDEN),
        "lm_head.weight": (_VOCAB, _HIDDEN),
    }
    if markov:
        out.update(_markov(_RANK))
        out["confidence_head.proj.weight"] = (1, _HIDDEN + _RANK)
    return out


_DSPARK_SPECULATORS = {
    "markov_rank": _RANK,
    "markov_head_type": "vanilla",
    "enable_confidence_head": True,
    "confidence_head_with_markov": True,
}


def _deepseek_stages(markov: bool) -> dict[str, tuple[int, ...]]:
    """DeepSeek-V4 DSpark sidecar names (three ``mtp.N`` stages; the Markov and confidence heads on the
    last), as the ds4 DSpark validation lists them; a few layer tensors stand for each stage."""
    out: dict[str, tuple[int, ...]] = {
        "mtp.0.main_proj.weight": (_HIDDEN, 3 * _HIDDEN),
        "mtp.0.main_norm.weight": (_HIDDEN,),
    }
    for stage in range(3):
        out[f"mtp.{stage}.attn_norm.weight"] = (_HIDDEN,)
        out[f"mtp.{stage}.ffn_norm.weight"] = (_HIDDEN,)
    if markov:
        out["mtp.2.markov_head.markov_w1.weight"] = (_VOCAB, _RANK)
        out["mtp.2.markov_head.markov_w2.weight"] = (_VOCAB, _RANK)
        out["mtp.2.confidence_head.proj.weight"] = (_HIDDEN + _RANK,)
    return out


# DeepSeek-V4-Flash's inference/config.json (its keys and DSpark values), as a test of a
# deepspec.megakernel package quotes it (_flash_config, "official V4 Flash config"); the dspark_* keys and
# n_mtp_layers also as Blaizzy/mlx-vlm mlx_vlm/tests/test_deepseek_v4_dspark.py writes them.
_DEEPSEEK_INFERENCE = {
    "vocab_size": _VOCAB,
    "dim": _HIDDEN,
    "moe_inter_dim": 16,
    "n_layers": 43,
    "n_mtp_layers": 3,
    "n_heads": 4,
    "n_routed_experts": 8,
    "n_activated_experts": 2,
    "q_lora_rank": 16,
    "head_dim": 16,
    "rope_head_dim": 4,
    "window_size": 128,
    "hc_mult": 4,
    "dtype": "fp8",
}
_DEEPSEEK_DSPARK_KEYS = {
    "dspark_block_size": 5,
    "dspark_noise_token_id": _VOCAB - 1,
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_markov_rank": _RANK,
}

# lightseekorg/TorchSpec torchspec/config/dspark_draft_config.json, plus what its exporter
# (tools/convert_to_hf.py, _save_without_vocab_pruning) adds: draft_vocab_size, _torchspec_version,
# torch_dtype.
_TORCHSPEC_DSPARK = _qwen3_keys(
    architectures=["DFlashDraftModel"],
    model_type="dflash",
    num_target_layers=5,
    target_hidden_size=_HIDDEN,
    target_num_hidden_layers=36,
    target_layer_ids=[1, 9, 17, 25, 33],
    mask_token_id=_VOCAB - 1,
    markov_rank=_RANK,
    markov_head_type="vanilla",
    enable_confidence_head=True,
    confidence_head_with_markov=True,
    draft_vocab_size=_VOCAB,
    _torchspec_version="0.1.0",
    torch_dtype="bfloat16",
)


def _released() -> list[Fixture]:
    return [
        # -- 1. DSpark families outside architectures.py ----------------------------------------------
        # LiquidAI/LFM2.5-2.6B-DSpark's config.json, as an mlx_vlm test of its DSpark drafter
        # (mlx_vlm.speculative.drafters.qwen3_dspark, _published_config) quotes it; sglang 0.5.23
        # registers the class (srt/models/lfm2_dspark.py).
        Fixture(
            "lfm2_dspark",
            _qwen3_keys(
                architectures=["Lfm2DSparkDraftModel"],
                model_type="qwen3",
                layer_types=["full_attention"],
                block_size=9,
                dflash_config={
                    "mask_token_id": _VOCAB - 1,
                    "target_layer_ids": [2, 9, 17, 21, 27],
                    "num_target_layers": 30,
                },
                markov_rank=_RANK,
                rope_is_neox_style=False,
                enable_confidence_head=True,
                markov_head_type="vanilla",
            ),
            {**_backbone(n_target=5), **_markov(_RANK)},
            "dspark",
            "census",
            9,
            description="LFM2 DSpark family: recognised by pattern plus Markov head, layers and mask token",
        ),
        # The Kimi K3 DSpark drafter of a vLLM fork's DSpark MLA model (vllm.models.kimi_k3.nvidia.
        # dspark_mla), as its test fixture mla_dspark_models writes it: TorchSpec-style keys and weight
        # names (context_proj), no block size.
        Fixture(
            "k3_dspark",
            _qwen3_keys(
                architectures=["K3DSparkModel"],
                model_type="k3_dspark",
                num_target_layers=2,
                target_hidden_size=_HIDDEN,
                target_num_hidden_layers=2,
                target_layer_ids=[0, 1],
                mask_token_id=_VOCAB - 1,
                markov_rank=_RANK,
                draft_vocab_size=_VOCAB,
            ),
            {**_torchspec_weights(markov=True, n_target=2)},
            "dspark",
            "census",
            None,
            description="Kimi K3 DSpark family, model_type k3_dspark, no block size",
        ),
        # The LFM2 config with its DSpark parts taken out: the class name is all that is left.
        Fixture(
            "dspark_pattern_name_only",
            _qwen3_keys(architectures=["Lfm2DSparkDraftModel"], model_type="qwen3", block_size=9),
            _backbone(),
            "unsupported",
            description="a DSpark-family name without the family's structure is refused",
        ),
        # -- 2. TorchSpec exports -----------------------------------------------------------------------
        Fixture(
            "torchspec_dspark",
            _TORCHSPEC_DSPARK,
            _torchspec_weights(markov=True),
            "dspark",
            "census",
            None,
            description="TorchSpec DSpark export: shared DFlashDraftModel class, DSpark head, no block size",
        ),
        # lightseekorg/TorchSpec torchspec/config/dflash_draft_config.json through the same exporter.
        Fixture(
            "torchspec_dflash",
            _qwen3_keys(
                architectures=["DFlashDraftModel"],
                model_type="dflash",
                num_target_layers=5,
                target_hidden_size=_HIDDEN,
                target_num_hidden_layers=28,
                target_layer_ids=None,
                mask_token_id=_VOCAB - 1,
                draft_vocab_size=_VOCAB,
                _torchspec_version="0.1.0",
                torch_dtype="bfloat16",
            ),
            _torchspec_weights(markov=False),
            "dflash",
            "census",
            None,
            description="TorchSpec DFlash export: no DSpark head, the class name votes mask-fill",
        ),
        # -- 3. DeepSeek-V4 inference configs -----------------------------------------------------------
        Fixture(
            "deepseek_v4_inference",
            {**_DEEPSEEK_INFERENCE, **_DEEPSEEK_DSPARK_KEYS},
            _deepseek_stages(markov=True),
            "dspark",
            "census",
            5,
            description="DeepSeek-V4-Flash inference config: dim, n_mtp_layers, mtp.N.markov_head.*",
        ),
        Fixture(
            "deepseek_v4_stages_only",
            dict(_DEEPSEEK_INFERENCE),
            _deepseek_stages(markov=True),
            "dspark",
            "census",
            None,
            description="the same without the dspark_* keys: only the stages' Markov head tells",
        ),
        # A DeepSeek-V4 plain MTP head (enorm / hnorm / e_proj / h_proj, no DSpark stage), the layout
        # vLLM's test for issue 52111 contrasts with the DSpark stages.
        Fixture(
            "deepseek_v4_plain_mtp",
            {**_DEEPSEEK_INFERENCE, "n_mtp_layers": 1},
            {
                "mtp.0.enorm.weight": (_HIDDEN,),
                "mtp.0.hnorm.weight": (_HIDDEN,),
                "mtp.0.e_proj.weight": (_HIDDEN, _HIDDEN),
                "mtp.0.h_proj.weight": (_HIDDEN, _HIDDEN),
            },
            "unsupported",
            description="DeepSeek inference config with a plain MTP head: not a DFlash-family drafter",
        ),
        # -- 4. vllm-project/speculators 0.7 exports ----------------------------------------------------
        Fixture(
            "speculators_dspark_default",
            _speculators("dspark", "DSparkSpeculator", 8, 8, sample_from_anchor=True, **_DSPARK_SPECULATORS),
            _speculators_weights(markov=True),
            "dspark",
            "census",
            8,
            description="speculators DSpark, its default: sample_from_anchor true, b drafts per block",
        ),
        Fixture(
            "speculators_dspark_mask_fill",
            _speculators("dspark", "DSparkSpeculator", 6, 5, sample_from_anchor=False, **_DSPARK_SPECULATORS),
            _speculators_weights(markov=True),
            "dflash",
            "census",
            6,
            description="speculators DSpark trained mask-fill: sample_from_anchor false, b-1 drafts",
        ),
        # speculators' DFlash2SpeculatorConfig inherits DFlash's sample_from_anchor default, false.
        Fixture(
            "speculators_dflash2",
            _speculators("dflash2", "DFlash2Speculator", 10, None),
            _speculators_weights(markov=False),
            "dflash",
            "census",
            10,
            description="speculators DFlash2 without flag or count: its model type's default decides",
        ),
        Fixture(
            "speculators_dspark_type_only",
            _speculators("dspark", "DSparkSpeculator", 7, None, markov_rank=0, enable_confidence_head=False),
            _speculators_weights(markov=False),
            "dspark",
            "census",
            7,
            description="speculators DSpark, no flag, count or head: the weakest signal, its type's default",
        ),
        Fixture(
            "speculators_flag_contradicts_count",
            _speculators("dspark", "DSparkSpeculator", 8, 7, sample_from_anchor=True, **_DSPARK_SPECULATORS),
            _speculators_weights(markov=True),
            "conflict",
            block_size=8,
            description="sample_from_anchor true but b-1 drafts declared: a conflict, never a guess",
        ),
        # speculators' Eagle3SpeculatorConfig (speculators_model_type "eagle3"): not a block drafter.
        Fixture(
            "speculators_eagle3",
            {k: v for k, v in _speculators("eagle3", "Eagle3Speculator", 8, 3).items() if k != "block_size"},
            {"layers.0.self_attn.q_proj.weight": (_HIDDEN, 2 * _HIDDEN)},
            "unsupported",
            description="an unknown speculators model type is refused",
        ),
        # -- 5. self-contradicting exports --------------------------------------------------------------
        # TorchSpec's DSpark draft config exported by another tool (no _torchspec_version, the
        # SpecForge meaning of num_target_layers): a DFlash class label over a DSpark head.
        Fixture(
            "fork_dflash_label_dspark_head",
            {
                k: v
                for k, v in _TORCHSPEC_DSPARK.items()
                if k not in ("_torchspec_version", "target_num_hidden_layers")
            }
            | {"block_size": 7, "num_target_layers": 36},
            {
                **_backbone(n_target=5),
                **{k: v for k, v in _torchspec_weights(markov=True).items() if "head" in k},
            },
            "conflict",
            block_size=7,
            description="a DFlash class label over a Markov head: refused as a conflict, evidence listed",
        ),
    ]


RELEASED: dict[str, Fixture] = {f.name: f for f in _released()}
"""Every released-format fixture by name."""

__all__ = ["RELEASED"]
