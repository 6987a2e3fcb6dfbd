"""Fixture draft checkpoints, one per known format and trap, written on demand by the tests.

Each ``Fixture`` is a config.json, a tiny safetensors file (tensor name -> shape, zeros) and
optional extra files, plus what the census must conclude about it:

* ``expect``: ``"dflash"`` / ``"dspark"`` (the resolved harvest with ``MEMRA_DSPARK_HARVEST`` unset),
  or the error kind the checkpoint is refused with (``"conflict"``, ``"unsupported"``, ``"invalid"``);
* ``expect_source``: ``"census"`` or ``"default"`` where the census resolves;
* ``block_size``: the block width the census must read (also set for ``"conflict"``: the census
  itself succeeds there, and an explicit override can still serve it).

Block widths differ between fixtures (4..16) so that a geometry mistake cannot hide behind a
coincidence. Nothing here imports torch at module import time; only the ``training_state.pt``
writers do, when called.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

ExtraFile = str | bytes | Callable[[Path], None]


@dataclass(frozen=True)
class Fixture:
    """One fixture checkpoint and the census verdict it must get."""

    name: str
    config: dict[str, Any]
    tensors: dict[str, tuple[int, ...]]
    expect: str  # "dflash" | "dspark" | "conflict" | "unsupported" | "invalid"
    expect_source: str | None = None  # "census" | "default" where the census resolves
    block_size: int | None = None
    extra_files: dict[str, ExtraFile] = field(default_factory=dict)
    description: str = ""

    @property
    def resolves(self) -> bool:
        """True when the census resolves this checkpoint without an override."""
        return self.expect in ("dflash", "dspark")


def _qwen3(
    *,
    arch: str | None,
    block_size: int | None,
    vocab: int = 256,
    hidden: int = 32,
    num_target_layers: int | None = 4,
    **extra: Any,
) -> dict[str, Any]:
    """The generic Qwen3 keys a SpecForge / z-lab export carries, plus the given extras."""
    cfg: dict[str, Any] = {
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": hidden // 4,
        "vocab_size": vocab,
        "draft_vocab_size": vocab,
        "max_position_embeddings": 4096,
        "layer_types": ["full_attention"],
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "use_cache": True,
        "sliding_window": None,
        "use_sliding_window": False,
    }
    if arch is not None:
        cfg["architectures"] = [arch]
    if block_size is not None:
        cfg["block_size"] = block_size
    if num_target_layers is not None:
        cfg["num_target_layers"] = num_target_layers
    cfg.update(extra)
    return cfg


def _backbone(hidden: int = 32, n_target: int = 1) -> dict[str, tuple[int, ...]]:
    """The DFlash backbone weights (one draft layer), as a SpecForge export names them."""
    h = hidden
    return {
        "fc.weight": (h, h * n_target),
        "hidden_norm.weight": (h,),
        "norm.weight": (h,),
        "layers.0.input_layernorm.weight": (h,),
        "layers.0.post_attention_layernorm.weight": (h,),
        "layers.0.self_attn.q_proj.weight": (h, h),
        "layers.0.self_attn.k_proj.weight": (h // 2, h),
        "layers.0.self_attn.v_proj.weight": (h // 2, h),
        "layers.0.self_attn.o_proj.weight": (h, h),
        "layers.0.self_attn.q_norm.weight": (h // 4,),
        "layers.0.self_attn.k_norm.weight": (h // 4,),
        "layers.0.mlp.gate_proj.weight": (2 * h, h),
        "layers.0.mlp.up_proj.weight": (2 * h, h),
        "layers.0.mlp.down_proj.weight": (h, 2 * h),
    }


def _markov(rank: int, vocab: int = 256, hidden: int = 32, prefix: str = "markov_head.") -> dict:
    """A gated Markov head plus the confidence head SpecForge writes next to it."""
    return {
        f"{prefix}markov_w1.weight": (vocab, rank),
        f"{prefix}markov_w2.weight": (vocab, rank),
        f"{prefix}gate_proj.weight": (rank, hidden + rank),
        f"{prefix}gate_proj.bias": (rank,),
        "confidence_head.proj.weight": (1, hidden),
        "confidence_head.proj.bias": (1,),
    }


def _domino(hidden: int = 32) -> dict[str, tuple[int, ...]]:
    return {
        "prefix_gru.weight_ih_l0": (48, 32),
        "prefix_gru.weight_hh_l0": (48, 16),
        "embed_proj.0.weight": (32, hidden),
        "embed_proj.2.weight": (32, 32),
    }


def _speculators(
    model_type: str, block_size: int, *, tokens: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A vllm-project/speculators config: no ``architectures``, the decoder nested."""
    cfg: dict[str, Any] = {
        "speculators_model_type": model_type,
        "speculators_version": "0.5.0",
        "block_size": block_size,
        "mask_token_id": 255,
        "draft_vocab_size": 256,
        "aux_hidden_state_layer_ids": [1, 2],
        "transformer_layer_config": {
            "model_type": "qwen3",
            "vocab_size": 256,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
        },
    }
    if tokens is not None:
        cfg["speculators_config"] = {
            "algorithm": model_type,
            "default_proposal_method": "greedy",
            "proposal_methods": [{"proposal_type": "greedy", "speculative_tokens": tokens}],
            "verifier": {"name_or_path": "Qwen/Qwen3-8B", "architectures": ["Qwen3ForCausalLM"]},
        }
    cfg.update(extra)
    return cfg


def _training_state(strategy: str) -> Callable[[Path], None]:
    """A SpecForge ``training_state.pt`` (a real torch zip, tensors included) naming ``strategy``."""

    def write(path: Path) -> None:
        import torch

        torch.save(
            {
                "strategy": strategy,
                "global_step": 1200,
                "run_id": "fixture",
                "draft_state_dict": {"fc.weight": torch.zeros(2, 2), "norm.weight": torch.ones(2)},
                "checkpoint_extra": {f"{strategy}_block_size": 7, "batch_size": 4},
            },
            path,
        )

    return write


def _fixtures() -> list[Fixture]:
    dflash_cfg = {"mask_token_id": 255, "target_layer_ids": [2]}
    return [
        Fixture(
            "zlab_dflash",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=16,
                vocab=151936,
                num_target_layers=36,
                auto_map={"AutoModel": "dflash.DFlashDraftModel"},
                dflash_config={"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
            ),
            _backbone(n_target=5),
            "dflash",
            "census",
            16,
            description="z-lab DFlash release: mask-fill by architecture",
        ),
        Fixture(
            "specforge_dflash",
            _qwen3(arch="DFlashDraftModel", block_size=4, dflash_config=dflash_cfg),
            _backbone(),
            "dflash",
            "census",
            4,
            description="SpecForge DFlash export",
        ),
        Fixture(
            "specforge_dspark",
            _qwen3(
                arch="DSparkDraftModel",
                block_size=7,
                dflash_config={
                    "attention_mode": "gqa",
                    "confidence_head_alpha": 1.0,
                    "markov_head_type": "gated",
                    "markov_rank": 8,
                    "mask_token_id": 255,
                    "projector_type": "dspark",
                    "target_layer_ids": [1, 2],
                },
            ),
            {**_backbone(n_target=2), **_markov(8)},
            "dspark",
            "census",
            7,
            description="SpecForge DSpark export, Markov keys nested in dflash_config",
        ),
        Fixture(
            "dspark_markov_rank0",
            _qwen3(
                arch="DSparkDraftModel",
                block_size=5,
                dflash_config={**dflash_cfg, "projector_type": "dspark", "markov_rank": 0},
            ),
            _backbone(),
            "dspark",
            "census",
            5,
            description="DSpark strategy without a Markov head: weights look like DFlash",
        ),
        Fixture(
            "dspark_sample_from_anchor_false",
            _qwen3(
                arch="Qwen3DSparkModel",
                block_size=8,
                sample_from_anchor=False,
                markov_rank=4,
                dflash_config=dflash_cfg,
            ),
            {**_backbone(), **_markov(4)},
            "dflash",
            "census",
            8,
            description="DSpark architecture declared mask-fill by sample_from_anchor=false",
        ),
        Fixture(
            "dspark_bonus_anchor",
            _qwen3(
                arch="DSparkDraftModel",
                block_size=6,
                dspark_bonus_anchor=True,
                dflash_config={**dflash_cfg, "projector_type": "dspark", "markov_rank": 4},
            ),
            {**_backbone(), **_markov(4)},
            "dflash",
            "census",
            6,
            description="DSpark architecture declared mask-fill by dspark_bonus_anchor=true",
        ),
        Fixture(
            "query_zero_predicts_next",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=9,
                dflash_config={**dflash_cfg, "query_zero_predicts_next": True},
            ),
            _backbone(),
            "dspark",
            "census",
            9,
            description="DFlash name, declared anchor-first (DeepSpec / PixelML style)",
        ),
        Fixture(
            "speculators_dspark_anchor_true",
            _speculators("dspark", 8, sample_from_anchor=True, markov_rank=16),
            {**_backbone(n_target=2), **_markov(16)},
            "dspark",
            "census",
            8,
            description="speculators DSpark export, sample_from_anchor=true",
        ),
        Fixture(
            "speculators_dflash_anchor_false",
            _speculators("dflash", 10, sample_from_anchor=False),
            _backbone(n_target=2),
            "dflash",
            "census",
            10,
            description="speculators DFlash export, sample_from_anchor=false",
        ),
        Fixture(
            "speculators_tokens_b_minus_1",
            _speculators("dspark", 12, tokens=11, markov_rank=8),
            {**_backbone(n_target=2), **_markov(8)},
            "dflash",
            "census",
            12,
            description="speculators DSpark that declares b-1 drafts: the 1+N layout, mask-fill",
        ),
        Fixture(
            "speculators_tokens_b",
            _speculators("dflash", 11, tokens=11),
            _backbone(n_target=2),
            "dspark",
            "census",
            11,
            description="speculators DFlash that declares b drafts: anchor-first, shifted",
        ),
        Fixture(
            "speculators_tokens_invalid",
            _speculators("dflash", 13, tokens=5),
            _backbone(n_target=2),
            "invalid",
            description="declared drafts per block neither b-1 nor b",
        ),
        Fixture(
            "sglang_target_bundled_dspark",
            _qwen3(
                arch="Qwen3ForCausalLM",
                block_size=None,
                num_target_layers=None,
                dspark_block_size=6,
                dspark_markov_rank=16,
                dspark_noise_token_id=255,
                dspark_target_layer_ids=[0],
            ),
            {**_backbone(), **_markov(16)},
            "dspark",
            "census",
            6,
            description="sglang dspark_* keys on a target config that bundles its draft head",
        ),
        Fixture(
            "qwen3_dspark_model",
            _qwen3(
                arch="Qwen3DSparkModel",
                block_size=14,
                markov_rank=32,
                markov_head_type="vanilla",
                dspark_config={"markov_rank": 32, "mask_token_id": 255},
                dflash_config={"target_layer_ids": [1, 2]},
            ),
            {**_backbone(n_target=2), **_markov(32)},
            "dspark",
            "census",
            14,
            description="sglang-style Qwen3DSparkModel, Markov keys at the top level and in dspark_config",
        ),
        Fixture(
            "gemma4_dspark_null_rank",
            _qwen3(
                arch="Gemma4DSparkModel",
                block_size=15,
                markov_rank=None,
                dflash_config={**dflash_cfg, "projector_type": "dspark_v4"},
            ),
            _backbone(),
            "dspark",
            "census",
            15,
            description="markov_rank null is no vote; architecture and projector still decide",
        ),
        Fixture(
            "legacy_logit_head_markov",
            _qwen3(arch=None, block_size=13, dflash_config=dflash_cfg),
            {**_backbone(), **_markov(8, prefix="logit_head.markov_head.")},
            "dspark",
            "census",
            13,
            description="old checkpoint: only the logit_head.markov_head.* weights tell",
        ),
        Fixture(
            "dflash_shift_label",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=12,
                dflash_config={**dflash_cfg, "shift_label": True},
            ),
            _backbone(),
            "dflash",
            "census",
            12,
            description="shift_label on a DFlash (non-Domino) drafter is ignored by every trainer",
        ),
        Fixture(
            "dflash2",
            _qwen3(arch="DFlash2DraftModel", block_size=10, dflash_config=dflash_cfg),
            {
                **_backbone(),
                "candidate_selector.proj.weight": (32, 64),
                "candidate_selector.out.weight": (256, 32),
            },
            "dflash",
            "census",
            10,
            description="z-lab DFlash2: a candidate selector is not a Markov head",
        ),
        Fixture(
            "deepspec_training_state",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=7,
                dflash_config={**dflash_cfg, "markov_rank": 0},
            ),
            _backbone(),
            "dspark",
            "census",
            7,
            extra_files={"training_state.pt": _training_state("dspark")},
            description="a DFlash name trained with the DSpark objective: training_state.pt says so",
        ),
        Fixture(
            "domino_shift_true",
            _qwen3(
                arch="DominoDraftModel",
                block_size=8,
                dflash_config={
                    **dflash_cfg,
                    "projector_type": "domino",
                    "shift_label": True,
                    "pure_draft_prefix_len": 1,
                    "emb_dim": 32,
                    "gru_hidden_dim": 16,
                },
            ),
            {**_backbone(), **_domino()},
            "unsupported",
            description="Domino, shift_label=true: a third geometry",
        ),
        Fixture(
            "domino_shift_false",
            _qwen3(
                arch="DominoDraftModel",
                block_size=9,
                dflash_config={
                    **dflash_cfg,
                    "projector_type": "domino",
                    "shift_label": False,
                    "pure_draft_prefix_len": 1,
                    "emb_dim": 32,
                    "gru_hidden_dim": 16,
                },
            ),
            {**_backbone(), **_domino()},
            "unsupported",
            description="Domino, shift_label=false",
        ),
        Fixture(
            "domino_under_dflash_name",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=11,
                dflash_config={**dflash_cfg, "projector_type": "domino", "shift_label": True},
            ),
            {**_backbone(), **_domino()},
            "unsupported",
            description="Domino served under the DFlashDraftModel name (how sglang 0.5.23 labels it)",
        ),
        Fixture(
            "domino_weights_only",
            _qwen3(arch="DFlashDraftModel", block_size=6, dflash_config=dflash_cfg),
            {**_backbone(), **_domino()},
            "unsupported",
            description="nothing in config.json says Domino; the GRU prefix weights do",
        ),
        Fixture(
            "conflicting_flags",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=5,
                sample_from_anchor=True,
                dflash_config={**dflash_cfg, "sample_from_anchor": False},
            ),
            _backbone(),
            "conflict",
            block_size=5,
            description="sample_from_anchor true at the top level, false in dflash_config",
        ),
        Fixture(
            "conflicting_structure",
            _qwen3(arch="DFlashDraftModel", block_size=4, dflash_config=dflash_cfg),
            {**_backbone(), **_markov(8)},
            "conflict",
            block_size=4,
            description="a DFlash architecture carrying Markov head weights, and no declaration",
        ),
        Fixture(
            "no_marker",
            _qwen3(arch=None, block_size=16, dflash_config=dflash_cfg),
            _backbone(),
            "dflash",
            "default",
            16,
            description="no signal at all: the historical default, mask-fill",
        ),
        Fixture(
            "unknown_architecture",
            _qwen3(arch="LlamaForCausalLM", block_size=8, num_target_layers=None),
            {"model.embed_tokens.weight": (256, 32), "lm_head.weight": (256, 32)},
            "unsupported",
            description="not a DFlash-family drafter",
        ),
        Fixture(
            "block_size_one",
            _qwen3(arch="DFlashDraftModel", block_size=1, dflash_config=dflash_cfg),
            _backbone(),
            "invalid",
            description="block_size < 2 yields no mask-fill draft",
        ),
        Fixture(
            "mask_outside_vocab",
            _qwen3(
                arch="DFlashDraftModel",
                block_size=8,
                dflash_config={"mask_token_id": 256, "target_layer_ids": [2]},
            ),
            _backbone(),
            "invalid",
            description="mask_token_id == vocab_size",
        ),
        Fixture(
            "block_sizes_disagree",
            _qwen3(
                arch="DSparkDraftModel",
                block_size=8,
                dflash_config={**dflash_cfg, "block_size": 16, "projector_type": "dspark"},
            ),
            _backbone(),
            "invalid",
            description="top-level block_size and dflash_config.block_size disagree",
        ),
    ]


FIXTURES: dict[str, Fixture] = {f.name: f for f in _fixtures()}
"""Every fixture checkpoint by name."""


def write_checkpoint(directory: str | Path, name_or_fixture: str | Fixture) -> Path:
    """Write a fixture checkpoint into ``directory/<name>`` and return that folder."""
    fixture = FIXTURES[name_or_fixture] if isinstance(name_or_fixture, str) else name_or_fixture
    out = Path(directory) / fixture.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(fixture.config, indent=2) + "\n")
    if fixture.tensors:
        arrays = {k: np.zeros(shape, dtype=np.float16) for k, shape in fixture.tensors.items()}
        save_file(arrays, str(out / "model.safetensors"), metadata={"format": "pt"})
    for rel, content in fixture.extra_files.items():
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(target)
        elif isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content)
    return out


__all__ = ["Fixture", "FIXTURES", "write_checkpoint"]
