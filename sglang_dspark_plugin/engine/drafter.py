"""The DFlash-family block drafter (z-lab dflash / SpecForge backbone) and its checkpoint loader.

One drafter forward maps a block ``[anchor, MASK x (q-1)]`` (embedded with the TARGET's input
embeddings) to ``q`` hidden rows; logits are ``target.lm_head(rows)``. Each layer is a Qwen3 decoder
layer whose queries come from the block rows only and whose keys/values are
``[proj(context) ; proj(block)]``, where ``context = hidden_norm(fc(target features))``. The block is
non-causal and sees every cached context row, exactly like z-lab ``dflash/model.py`` and SpecForge
``dflash.py``; the parameter names are theirs, so their checkpoints load unchanged.

The two training strategies (DFlash mask-fill, DSpark shifted) share this backbone; which rows to
harvest is the business of ``DsparkHarvest``, not of the model. A DSpark checkpoint may add a Markov
head (``markov_head.*``: each draft's logits get a bias from the previous draft, see ``markov``) and a
confidence head (``confidence_head.*``); both load under sglang's and SpecForge's names.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from ..checkpoint_files import describe
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError, printable
from .markov import MARKOV_HEAD_TYPES, ConfidenceHead, VanillaMarkov, build_markov_head, describe_heads
from .preflight import (
    WEIGHTS_FILE,
    check_model_settings,
    check_sizes_before_allocating,
    weight_files,
    weight_shapes,
)

if TYPE_CHECKING:
    from ..draft_config import DflashCfg

# Old SpecForge checkpoints wrote their heads under this prefix (SpecForge dflash.py normalises it too).
LEGACY_HEAD_PREFIX = "logit_head."
# Buffers some exports write (recomputed here, never trained).
IGNORED_PREFIXES = ("rotary_emb.",)
MARKOV_PREFIX, CONFIDENCE_PREFIX = "markov_head.", "confidence_head."


class DraftCache:
    """The drafter's K/V of COMMITTED context positions only (block rows are never stored)."""

    def __init__(self, num_layers: int) -> None:
        self.keys: list[torch.Tensor | None] = [None] * num_layers
        self.values: list[torch.Tensor | None] = [None] * num_layers

    @property
    def length(self) -> int:
        """Number of context positions held."""
        k = self.keys[0]
        return 0 if k is None else int(k.shape[2])

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append one layer's new context K/V ``[B, kv_heads, c, d]``; returns the whole cached K/V."""
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=2)
            v = torch.cat([self.values[layer], v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context positions (rolls back context that was not committed)."""
        if length < 0:
            raise ValueError(f"DraftCache.crop: length must be >= 0, got {length}")
        for i, k in enumerate(self.keys):
            if k is not None:
                self.keys[i] = k[:, :, :length]
                self.values[i] = self.values[i][:, :, :length]


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm (computed in float32, weight applied in the input dtype)."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


def _rope_theta(config: Any) -> float:
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", None) or 10000.0)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Default (unscaled) RoPE, as in Qwen3."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, position_ids: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.float()  # [B, L, d/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, L, d]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class DraftAttention(nn.Module):
    """Qwen3 attention whose K/V span [context ; block] and whose queries are the block rows."""

    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__()
        h = config.hidden_size
        self.layer_idx = layer_idx
        self.head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
        self.n_heads = config.num_attention_heads
        self.n_kv = config.num_key_value_heads
        bias = bool(getattr(config, "attention_bias", False))
        self.q_proj = nn.Linear(h, self.n_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(h, self.n_kv * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * self.head_dim, h, bias=bias)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def _kv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, n, _ = x.shape
        k = self.k_norm(self.k_proj(x).view(b, n, self.n_kv, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.n_kv, self.head_dim).transpose(1, 2)
        return _apply_rope(k, cos, sin), v

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        rope_ctx: tuple[torch.Tensor, torch.Tensor],
        rope_blk: tuple[torch.Tensor, torch.Tensor],
        cache: DraftCache | None,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.n_heads, self.head_dim)).transpose(1, 2)
        q = _apply_rope(q, *rope_blk)
        k_ctx, v_ctx = self._kv(context, *rope_ctx)
        if cache is not None:
            k_ctx, v_ctx = cache.append(self.layer_idx, k_ctx, v_ctx)
        k_blk, v_blk = self._kv(x, *rope_blk)
        k = torch.cat([k_ctx, k_blk], dim=2)
        v = torch.cat([v_ctx, v_blk], dim=2)
        # The block is bidirectional and sees all context: no mask unless training packs several blocks.
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=attention_mask, enable_gqa=self.n_kv != self.n_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, q_len, -1))


class DraftMLP(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    """A Qwen3 decoder layer; only the block rows go through the norms and the MLP."""

    def __init__(self, config: Any, layer_idx: int) -> None:
        super().__init__()
        self.self_attn = DraftAttention(config, layer_idx)
        self.mlp = DraftMLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        rope_ctx: tuple[torch.Tensor, torch.Tensor],
        rope_blk: tuple[torch.Tensor, torch.Tensor],
        cache: DraftCache | None,
        attention_mask: torch.Tensor | None,
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), context, rope_ctx, rope_blk, cache, attention_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDraftModel(nn.Module):
    """The DFlash-family drafter backbone (no embedding and no lm_head: both are the target's)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        dcfg = dict(getattr(config, "dflash_config", None) or {})
        self.block_size = int(dcfg.get("block_size") or config.block_size)
        self.mask_token_id = int(dcfg["mask_token_id"]) if dcfg.get("mask_token_id") is not None else -1
        self.target_layer_ids = [int(i) for i in dcfg.get("target_layer_ids") or []]
        if not self.target_layer_ids:
            raise InvalidCheckpointError(
                "dflash_config.target_layer_ids is missing or empty; set it to the target layers whose "
                "outputs the drafter was trained on",
                where="config.json:dflash_config.target_layer_ids",
            )
        h = config.hidden_size
        self.layers = nn.ModuleList(DraftLayer(config, i) for i in range(config.num_hidden_layers))
        self.fc = nn.Linear(len(self.target_layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, config.rms_norm_eps)
        self.norm = RMSNorm(h, config.rms_norm_eps)
        head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
        self.rotary_emb = RotaryEmbedding(head_dim, _rope_theta(config))
        # DSpark heads, from the top-level keys as sglang's model builder reads them (load_drafter
        # hoists every other spelling there first, as SpecForge's export normaliser does)
        rank = int(getattr(config, "markov_rank", None) or 0)
        head_type = str(getattr(config, "markov_head_type", None) or "vanilla").lower()
        self.markov_head: VanillaMarkov | None = (
            build_markov_head(head_type, vocab_size=config.vocab_size, markov_rank=rank, hidden_size=h)
            if rank > 0
            else None
        )
        self.confidence_head: ConfidenceHead | None = (
            ConfidenceHead(
                hidden_size=h,
                markov_rank=rank,
                with_markov=bool(getattr(config, "confidence_head_with_markov", False)),
            )
            if getattr(config, "enable_confidence_head", False)
            else None
        )

    def new_cache(self) -> DraftCache:
        """An empty context cache sized for this model."""
        return DraftCache(len(self.layers))

    def describe(self) -> dict[str, Any]:
        """The drafter's summary: geometry inputs and its DSpark heads (``None`` where absent)."""
        return {
            "architecture": (list(getattr(self.config, "architectures", None) or []) or [None])[0],
            "block_size": self.block_size,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
            **describe_heads(self.markov_head, self.confidence_head),
        }

    def extract_context_feature(self, hidden_states: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """HF ``output_hidden_states`` tuple -> ``[B, S, K*H]`` (layer l's OUTPUT = hidden_states[l+1])."""
        return torch.cat([hidden_states[i + 1] for i in self.target_layer_ids], dim=-1)

    def forward(
        self,
        noise_embedding: torch.Tensor,
        target_hidden: torch.Tensor,
        position_ids: torch.Tensor,
        cache: DraftCache | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Draft one block: ``[B, q, H]`` rows after the final norm.

        ``noise_embedding``: target input embeddings of ``[anchor, MASK x (q-1)]``;
        ``target_hidden``: ``[B, c, K*H]`` features of the NEW committed context positions (c may be 0);
        ``position_ids``: ``[B, c + q]``, positions of those c rows and then of the q block rows.
        The c new context K/V are appended to ``cache`` when one is given. ``attention_mask``
        (boolean, True = may attend, ``[B, 1, q, cached + c + q]``) is only needed when training packs
        several blocks into one call.
        """
        c = target_hidden.shape[1]
        context = self.hidden_norm(self.fc(target_hidden))
        dtype = noise_embedding.dtype
        rope_ctx = self.rotary_emb(position_ids[:, :c], dtype)
        rope_blk = self.rotary_emb(position_ids[:, c:], dtype)
        x = noise_embedding
        for layer in self.layers:
            x = layer(x, context, rope_ctx, rope_blk, cache, attention_mask)
        return self.norm(x)


def _as_config(config: dict[str, Any]) -> Any:
    from transformers import Qwen3Config

    cfg = dict(config)
    cfg.pop("architectures", None)
    cfg.pop("model_type", None)
    out = Qwen3Config(**cfg)
    out.architectures = list(config.get("architectures") or ["DFlashDraftModel"])
    return out


def new_draft_model(config: dict[str, Any], *, seed: int | None = None) -> DFlashDraftModel:
    """A randomly initialised drafter from a config dict (HF Qwen3 keys + block_size + dflash_config)."""
    if seed is not None:
        torch.manual_seed(seed)
    model = DFlashDraftModel(_as_config(config))
    std = float(config.get("initializer_range", 0.02))
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):  # Embedding: a Markov head's markov_w1
            nn.init.normal_(module.weight, std=std)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    return model


def _normalize_key(key: str) -> str:
    if key.startswith(LEGACY_HEAD_PREFIX):
        return key[len(LEGACY_HEAD_PREFIX) :]
    return key


def _read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint's weight files (checked first by ``preflight.weight_files``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    state: dict[str, torch.Tensor] = {}
    for path in weight_files(folder):
        try:
            state.update(load_file(str(path)))
        except (SafetensorError, OSError, ValueError, TypeError) as exc:  # e.g. a dtype torch lacks
            raise InvalidCheckpointError(
                f"{printable(path)}: cannot load its tensors ({describe(exc)}); re-download or re-export it",
                where=printable(path),
            ) from exc
    return state


def load_drafter(
    path: str | Path,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    *,
    cfg: DflashCfg | None = None,
) -> DFlashDraftModel:
    """Load a z-lab or SpecForge format drafter (config.json + model.safetensors), DSpark heads included.

    The config is read through the checkpoint census (pass ``cfg`` when the caller has already taken
    it); the weight names are checked strictly: missing or unexpected keys raise
    ``InvalidCheckpointError`` listing them. A Markov head takes its rank from the census (or from
    ``markov_w1`` when the config names none) and its type from ``markov_head_type`` in any spelling
    sglang or SpecForge writes; a confidence head is loaded when the weights hold one, with or without
    the Markov features as its width says.
    """
    if cfg is None:
        from ..census import census

        cfg = census(str(path))
    folder = Path(cfg.path)
    raw = dict(cfg.raw)
    dcfg = dict(raw.get("dflash_config") or {})
    dcfg["block_size"] = cfg.block_size
    if cfg.target_layer_ids is not None:
        dcfg["target_layer_ids"] = list(cfg.target_layer_ids)
    if cfg.mask_token_id is not None:
        dcfg["mask_token_id"] = cfg.mask_token_id
    raw["dflash_config"] = dcfg
    raw["block_size"] = cfg.block_size
    # the headers' shapes first (meta tensors hold no data): every check runs before a tensor is read
    shapes = {_normalize_key(k): s for k, s in weight_shapes(folder).items()}
    shapes = {k: s for k, s in shapes.items() if not k.startswith(IGNORED_PREFIXES)}
    raw.update(_head_keys(folder, raw, cfg, {k: torch.empty(s, device="meta") for k, s in shapes.items()}))
    where = printable(folder / "config.json")
    check_model_settings(raw, where)
    check_sizes_before_allocating(lambda: DFlashDraftModel(_as_config(raw)), raw, shapes, where)
    state = {_normalize_key(k): v for k, v in _read_state_dict(folder).items()}
    state = {k: v for k, v in state.items() if not k.startswith(IGNORED_PREFIXES)}
    try:
        model = DFlashDraftModel(_as_config(raw))
    except (TypeError, AttributeError, KeyError, ValueError) as exc:
        if isinstance(exc, InvalidCheckpointError):
            raise
        raise InvalidCheckpointError(
            f"{folder / 'config.json'}: cannot build the drafter from this config ({exc}); it needs the "
            "Qwen3 keys hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
            "num_key_value_heads, rms_norm_eps",
            where=str(folder / "config.json"),
        ) from exc

    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    head_missing = [k for k in missing if k.startswith(MARKOV_PREFIX)]
    head_unexpected = [k for k in unexpected if k.startswith(MARKOV_PREFIX)]
    if head_missing or head_unexpected:
        raise InvalidCheckpointError(
            f"{folder}: the Markov head weights do not fit markov_head_type {raw['markov_head_type']!r} "
            f"(missing {head_missing}, unexpected {head_unexpected}); set markov_head_type to the head "
            f"the checkpoint was trained with ({', '.join(MARKOV_HEAD_TYPES)})",
            where=str(folder / "config.json"),
        )
    if missing or unexpected:
        raise InvalidCheckpointError(
            f"{folder}: weights do not match the DFlash drafter described by config.json: "
            f"missing {missing[:8]}{' ...' if len(missing) > 8 else ''} "
            f"({len(missing)}), unexpected {unexpected[:8]}{' ...' if len(unexpected) > 8 else ''} "
            f"({len(unexpected)}); check num_hidden_layers / target_layer_ids against the weights, or "
            "re-export the checkpoint in z-lab / SpecForge format",
            where=str(folder / WEIGHTS_FILE),
        )
    bad = [k for k, v in expected.items() if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        k = bad[0]
        raise InvalidCheckpointError(
            f"{folder}: tensor {k} has shape {tuple(state[k].shape)} but config.json implies "
            f"{tuple(expected[k].shape)} ({len(bad)} mismatched); fix hidden_size / heads / "
            "target_layer_ids in config.json",
            where=str(folder / WEIGHTS_FILE),
        )
    model.load_state_dict(state, strict=True)
    return model.to(device=device, dtype=dtype).eval()


# sglang 0.5.23's precedence (``parse_dspark_draft_config``): the prefixed key, then dspark_config over
# dflash_config, then text_config, then the top level; 0.5.17 reads the same minus dflash_config.
_HEAD_KEY_SECTIONS = ("dspark_config", "dflash_config", "text_config")


def _spellings(raw: dict[str, Any], key: str) -> dict[str, Any]:
    """Every non-null spelling of a DSpark head key in the config, as ``{dotted key: value}``."""
    found = {}
    if raw.get(f"dspark_{key}") is not None:
        found[f"dspark_{key}"] = raw[f"dspark_{key}"]
    for section in _HEAD_KEY_SECTIONS:
        node = raw.get(section)
        if isinstance(node, dict) and node.get(key) is not None:
            found[f"{section}.{key}"] = node[key]
    if raw.get(key) is not None:
        found[key] = raw[key]
    return found


def _head_keys(
    folder: Path, raw: dict[str, Any], cfg: DflashCfg, state: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """The DSpark head keys, hoisted to the top level where ``DFlashDraftModel`` reads them."""
    config = str(folder / "config.json")
    rank = cfg.markov_rank
    if any(k.startswith(MARKOV_PREFIX) for k in state):
        w1 = state.get(f"{MARKOV_PREFIX}markov_w1.weight")
        if w1 is None or w1.dim() != 2:
            raise InvalidCheckpointError(
                f"{folder}: Markov head tensors without a 2-d markov_head.markov_w1.weight "
                f"(got {None if w1 is None else tuple(w1.shape)}); every Markov head type has one "
                "[vocab_size, markov_rank] table. Re-export the checkpoint.",
                where=str(folder / WEIGHTS_FILE),
            )
        if rank is None:  # the config is silent: the tensors are the only statement of the rank
            rank = int(w1.shape[1])
        elif rank != int(w1.shape[1]):
            raise InvalidCheckpointError(
                f"{config}: markov_rank {rank} but markov_head.markov_w1.weight has shape "
                f"{tuple(w1.shape)} (rank {int(w1.shape[1])}); set markov_rank to the trained rank.",
                where=config,
            )
    elif rank:
        raise InvalidCheckpointError(
            f"{config}: markov_rank {rank} but the weights hold no markov_head.* tensor; export the "
            "checkpoint with its Markov head, or set markov_rank 0 if it was trained without one.",
            where=config,
        )
    types = {k: str(v).lower() for k, v in _spellings(raw, "markov_head_type").items()}
    if len(set(types.values())) > 1:
        raise InvalidCheckpointError(
            f"{config}: the Markov head types disagree ({types}); keep the one used in training.",
            where=config,
        )
    head_type = next(iter(types.values()), "vanilla")  # sglang's and SpecForge's default
    if rank and head_type not in MARKOV_HEAD_TYPES:
        raise UnsupportedCheckpointError(
            f"{config}: markov_head_type {head_type!r} is not one sglang builds "
            f"({', '.join(MARKOV_HEAD_TYPES)}); the reference engine drafts with those only.",
            where=config,
        )
    conf = state.get(f"{CONFIDENCE_PREFIX}proj.weight")
    with_markov = False
    if conf is not None:
        hidden = int(raw.get("hidden_size") or 0)
        width = int(conf.shape[-1])
        with_markov = bool(rank) and width == hidden + rank
        if width != hidden and not with_markov:
            raise InvalidCheckpointError(
                f"{folder}: confidence_head.proj.weight has shape {tuple(conf.shape)}, but its input is "
                f"hidden_size {hidden} (rows alone) or {hidden} + markov_rank {rank or 0} (with the Markov "
                "features); re-export the checkpoint or fix hidden_size / markov_rank.",
                where=str(folder / WEIGHTS_FILE),
            )
    return {
        "markov_rank": rank or 0,
        "markov_head_type": head_type,
        "enable_confidence_head": conf is not None,
        "confidence_head_with_markov": with_markov,
    }


__all__ = ["DraftCache", "DFlashDraftModel", "new_draft_model", "load_drafter"]
