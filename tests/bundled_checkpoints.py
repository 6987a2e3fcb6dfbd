"""Targets that bundle their DSpark draft, in the two forms sglang's DSPARK finds without a draft path.

* ``subfolder_target``: the embedded tiny target with an embedded drafter in its ``dspark/`` subfolder
  (``dspark_subfolder``, sglang 0.5.23);
* ``keys_target``: a tiny DeepSeek-V4-style target whose config.json carries sglang's prefixed
  ``dspark_*`` keys and whose weights hold the head as ``mtp.<stage>.*`` tensors, named as sglang's
  ``models/deepseek_v4_dspark.py`` loads them (``dspark_keys``, sglang 0.5.17 and 0.5.23);
* ``hub_cache``: a Hugging Face cache laid out as huggingface_hub writes it, one repo, a revision per
  entry.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from sglang_dspark_plugin.embedded import EMBEDDED

VOCAB, HIDDEN, RANK, LAYERS = 256, 32, 4, 4

V4_CONFIG: dict[str, Any] = {
    # what sglang's DeepSeek-V4 config and model config read at argument resolution, tiny
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS,
    "vocab_size": VOCAB,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,
    "num_nextn_predict_layers": 1,
    "torch_dtype": "bfloat16",
    "head_dim": 16,
    "qk_rope_head_dim": 4,
    "sliding_window": 128,
    "index_head_dim": 16,
    "compress_ratios": [0, 4, 128, 4, 0],
    "rope_scaling": None,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "o_lora_rank": 16,
    "hc_mult": 4,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "intermediate_size": 16,
    "max_position_embeddings": 4096,
}
DSPARK_KEYS: dict[str, Any] = {
    "dspark_block_size": 5,  # sglang's gamma: 5 drafts, verify window 6
    "dspark_noise_token_id": VOCAB - 1,
    "dspark_target_layer_ids": [1, 2, 3],  # DeepSeek-V4 captures layer i itself: the last one too
    "dspark_markov_rank": RANK,
}


def v4_tensors(
    markov: bool = True, spelling: tuple[str, str] = ("embed", "head")
) -> dict[str, tuple[int, ...]]:
    """A few target tensors and the bundled head's stages (the Markov head on the last one)."""
    out: dict[str, tuple[int, ...]] = {
        "embed.weight": (VOCAB, HIDDEN),
        "head.weight": (VOCAB, HIDDEN),
        "layers.0.attn_norm.weight": (HIDDEN,),
        "mtp.0.main_proj.weight": (HIDDEN, 3 * HIDDEN),
    }
    for stage in range(3):
        out[f"mtp.{stage}.attn_norm.weight"] = (HIDDEN,)
    if markov:
        out[f"mtp.2.markov_head.{spelling[0]}.weight"] = (VOCAB, RANK)
        out[f"mtp.2.markov_head.{spelling[1]}.weight"] = (VOCAB, RANK)
    return out


def _write(out: Path, config: dict[str, Any], tensors: dict[str, tuple[int, ...]]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if tensors:
        arrays = {k: np.zeros(shape, dtype=np.float16) for k, shape in tensors.items()}
        save_file(arrays, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def keys_target(out: Path, *, tensors: dict[str, tuple[int, ...]] | None = None, **config: Any) -> Path:
    """A DeepSeek-V4-style target bundling its head by ``dspark_*`` keys (``config`` overrides keys;
    a key set to None is left out)."""
    merged = {k: v for k, v in {**V4_CONFIG, **DSPARK_KEYS, **config}.items() if v is not None}
    return _write(out, merged, v4_tensors() if tensors is None else tensors)


def subfolder_target(out: Path, drafter: str | Path | None, *, weights: bool = False) -> Path:
    """The embedded target (config and tokenizer; its weights with ``weights``) with ``drafter`` (an
    embedded drafter's name, or a folder) copied into ``dspark/``; ``None``: no subfolder."""
    out.mkdir(parents=True, exist_ok=True)
    for f in EMBEDDED.target.iterdir():
        if weights or not f.name.endswith(".safetensors"):
            shutil.copyfile(f, out / f.name)
    if drafter is not None:
        source = drafter if isinstance(drafter, Path) else EMBEDDED.root / drafter
        shutil.copytree(source, out / "dspark")
    return out


def hub_cache(root: Path, repo: str, revisions: dict[str, tuple[str, Path]]) -> Path:
    """``root`` laid out as huggingface_hub's cache: ``{ref: (commit, folder to snapshot)}``."""
    storage = root / ("models--" + repo.replace("/", "--"))
    (storage / "refs").mkdir(parents=True, exist_ok=True)
    for ref, (commit, folder) in revisions.items():
        (storage / "refs" / ref).write_text(commit)
        shutil.copytree(folder, storage / "snapshots" / commit)
    return root


TARGETS: dict[str, Callable[[Path], Path]] = {
    "dspark_subfolder": lambda out: subfolder_target(out, "drafter-dspark-markov"),
    "dspark_keys": keys_target,
    "no_draft": lambda out: subfolder_target(out, None),
}
"""Named targets (the docs' examples write them as ``targets/NAME``): one of each form, and none."""


__all__ = [
    "DSPARK_KEYS",
    "TARGETS",
    "HIDDEN",
    "LAYERS",
    "RANK",
    "V4_CONFIG",
    "VOCAB",
    "hub_cache",
    "keys_target",
    "subfolder_target",
    "v4_tensors",
]
