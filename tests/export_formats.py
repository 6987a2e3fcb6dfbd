"""Re-export a z-lab / SpecForge drafter folder the way speculators and TorchSpec write theirs.

The layouts follow their exporters: speculators' ``DFlashDraftModel._build_base_config_kwargs`` and its
z-lab converter (vllm-project/speculators src/speculators/models/dflash/core.py and
src/speculators/convert/dflash/converter.py: the decoder under ``transformer_layer_config``,
``aux_hidden_state_layer_ids = target_layer_ids + 1``, the draft count under
``speculators_config``, the target's embedding and LM head saved along); TorchSpec's
``tools/convert_to_hf.py`` and ``torchspec/models/draft/keymap.py`` (``context_proj`` /
``context_norm`` / ``final_norm``, a frozen ``embed_tokens``, ``_torchspec_version``).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

_DECODER_KEYS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "rms_norm_eps",
    "rope_theta",
    "rope_parameters",
    "max_position_embeddings",
    "vocab_size",
    "layer_types",
    "hidden_act",
    "attention_bias",
)


def _read(src: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    return json.loads((src / "config.json").read_text()), load_file(str(src / "model.safetensors"))


def _write(dst: Path, config: dict[str, Any], state: dict[str, torch.Tensor]) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    save_file({k: v.contiguous() for k, v in state.items()}, str(dst / "model.safetensors"))
    return dst


_HEAD_KEYS = ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov")


def _head_keys(config: dict[str, Any]) -> dict[str, Any]:
    """The DSpark head keys, at the top level where both exporters write them."""
    merged = {**(config.get("dflash_config") or {}), **config}
    return {k: merged[k] for k in _HEAD_KEYS if k in merged}


def to_speculators(src: Path, dst: Path, *, model_type: str, sample_from_anchor: bool) -> Path:
    """``src`` as a speculators export of ``model_type`` (``dflash`` / ``dspark``)."""
    config, state = _read(src)
    dflash = config.get("dflash_config") or {}
    b, vocab, hidden = config["block_size"], config["vocab_size"], config["hidden_size"]
    out = {
        "architectures": ["DSparkSpeculator" if model_type == "dspark" else "DFlashSpeculator"],
        "speculators_model_type": model_type,
        "speculators_version": "0.7.0",
        "block_size": b,
        "draft_vocab_size": vocab,
        "aux_hidden_state_layer_ids": [i + 1 for i in dflash["target_layer_ids"]],
        "mask_token_id": dflash["mask_token_id"],
        "sample_from_anchor": sample_from_anchor,
        "transformer_layer_config": {
            "model_type": "qwen3",
            **{k: config[k] for k in _DECODER_KEYS if k in config},
        },
        "speculators_config": {
            "algorithm": model_type,
            "default_proposal_method": "greedy",
            "proposal_methods": [
                {"proposal_type": "greedy", "speculative_tokens": b if sample_from_anchor else b - 1}
            ],
            "verifier": {"name_or_path": "embedded-target", "architectures": ["Qwen3ForCausalLM"]},
        },
        **_head_keys(config),
    }
    g = torch.Generator().manual_seed(0)
    dtype = next(iter(state.values())).dtype
    state = {
        **state,
        "embed_tokens.weight": torch.randn(vocab, hidden, generator=g).to(dtype),
        "lm_head.weight": torch.randn(vocab, hidden, generator=g).to(dtype),
    }
    return _write(dst, out, state)


def to_torchspec(src: Path, dst: Path) -> Path:
    """``src`` as TorchSpec's native export (its keys, its marker, its layer-count dialect)."""
    config, state = _read(src)
    dflash = config.get("dflash_config") or {}
    out = {k: v for k, v in config.items() if k not in ("dflash_config", "num_target_layers")}
    out.update(
        {
            "architectures": ["DFlashDraftModel"],
            "model_type": "dflash",
            "num_target_layers": len(dflash["target_layer_ids"]),
            "target_num_hidden_layers": config["num_target_layers"],
            "target_hidden_size": config["hidden_size"],
            "target_layer_ids": dflash["target_layer_ids"],
            "mask_token_id": dflash["mask_token_id"],
            "_torchspec_version": "0.1.0",
            **_head_keys(config),
        }
    )
    renames = {"fc.": "context_proj.", "hidden_norm.": "context_norm.", "norm.": "final_norm."}
    renamed = {}
    for key, value in state.items():
        prefix = next((p for p in renames if key.startswith(p)), None)
        renamed[renames[prefix] + key[len(prefix) :] if prefix else key] = value
    renamed["embed_tokens.weight"] = torch.zeros(config["vocab_size"], config["hidden_size"]).to(value.dtype)
    return _write(dst, out, renamed)


def copy_folder(src: Path, dst: Path) -> Path:
    """A plain copy (the z-lab / SpecForge layout itself)."""
    return Path(shutil.copytree(src, dst))


__all__ = ["to_speculators", "to_torchspec", "copy_folder"]
