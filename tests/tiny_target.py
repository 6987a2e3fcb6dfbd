"""The tiny random target the engine tests draft against (shared by test_engine and test_markov)."""

from __future__ import annotations

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM


def tiny_target(seed: int = 0, vocab: int = 48, layers: int = 4, hidden: int = 64) -> Qwen3ForCausalLM:
    """A random Qwen3 whose lm_head rows are orthogonal (``lm_head(W[t]) = 16 * e_t``: argmax is t), so a
    drafter, or a scripted row, can aim at any token."""
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    )
    model = Qwen3ForCausalLM(cfg).eval()
    q, _ = torch.linalg.qr(torch.randn(hidden, hidden))
    with torch.no_grad():
        model.lm_head.weight.copy_(4.0 * q[:vocab])
    return model
