"""The layers of the DFlash-family drafter backbone (z-lab dflash / SpecForge parameter names).

Each layer is a Qwen3 decoder layer whose queries come from the block rows only and whose keys/values
are ``[proj(context) ; proj(block)]``. The block is non-causal and sees every cached context row.
``DraftCache`` holds the K/V of committed context positions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


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
        held_k, held_v = self.keys[layer], self.values[layer]
        if held_k is not None and held_v is not None:  # a layer's keys and values are set together
            k = torch.cat([held_k, k], dim=2)
            v = torch.cat([held_v, v], dim=2)
        self.keys[layer], self.values[layer] = k, v
        return k, v

    def crop(self, length: int) -> None:
        """Keep the first ``length`` context positions (rolls back context that was not committed)."""
        if length < 0:
            raise ValueError(f"DraftCache.crop: length must be >= 0, got {length}")
        for i, (k, v) in enumerate(zip(self.keys, self.values, strict=True)):
            if k is not None and v is not None:
                self.keys[i], self.values[i] = k[:, :, :length], v[:, :, :length]


@dataclass(frozen=True)
class LayerInputs:
    """What every layer reads besides the block rows, the same for all layers of one forward."""

    context: torch.Tensor  # the new context rows, ``hidden_norm(fc(target features))``
    rope_ctx: tuple[torch.Tensor, torch.Tensor]  # (cos, sin) at the context rows' positions
    rope_blk: tuple[torch.Tensor, torch.Tensor]  # (cos, sin) at the block rows' positions
    cache: DraftCache | None  # the context K/V cache, appended to by every layer
    attention_mask: torch.Tensor | None  # only when training packs several blocks into one call


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


def rope_theta(config: Any) -> float:
    """The RoPE base of a Qwen3 config, in any spelling transformers has used (default 10000)."""
    params = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", None) or 10000.0)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class RotaryEmbedding(nn.Module):
    """Default (unscaled) RoPE, as in Qwen3."""

    inv_freq: torch.Tensor  # a buffer: recomputed here, never saved

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

    def forward(self, x: torch.Tensor, inputs: LayerInputs) -> torch.Tensor:
        b, q_len, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, q_len, self.n_heads, self.head_dim)).transpose(1, 2)
        q = _apply_rope(q, *inputs.rope_blk)
        k_ctx, v_ctx = self._kv(inputs.context, *inputs.rope_ctx)
        if inputs.cache is not None:
            k_ctx, v_ctx = inputs.cache.append(self.layer_idx, k_ctx, v_ctx)
        k_blk, v_blk = self._kv(x, *inputs.rope_blk)
        k = torch.cat([k_ctx, k_blk], dim=2)
        v = torch.cat([v_ctx, v_blk], dim=2)
        # The block is bidirectional and sees all context: no mask unless training packs several blocks.
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=inputs.attention_mask, enable_gqa=self.n_kv != self.n_heads
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

    def forward(self, x: torch.Tensor, inputs: LayerInputs) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), inputs)
        return x + self.mlp(self.post_attention_layernorm(x))


__all__ = [
    "DraftCache",
    "LayerInputs",
    "RMSNorm",
    "RotaryEmbedding",
    "DraftAttention",
    "DraftMLP",
    "DraftLayer",
    "rope_theta",
]
