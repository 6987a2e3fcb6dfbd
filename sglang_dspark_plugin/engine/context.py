"""How far a generation may reach: the target's context against the prompt, the new tokens and a block.

A decode past the context the target was trained for measures nothing (its positions were never
trained), and it is slow: every arm of ``check`` prefills the prompt anew, and attention over a prompt
of n tokens costs n * n per layer, so a 10,000-word prompt on a 1024-token target (11,312 tokens) ran
for minutes. Both are refused up front instead, with the numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import UsageError
from ..util.validation import is_int

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")
"""The names transformers configs give the context length, in the order they are looked up."""


def target_context(config: Mapping[str, Any] | None) -> int | None:
    """The context length a target's config.json declares (its text config's, for a multimodal one)."""
    if not isinstance(config, Mapping):
        return None
    for node in (config.get("text_config"), config):
        if isinstance(node, Mapping):
            for key in CONTEXT_KEYS:
                value = node.get(key)
                if is_int(value) and value > 0:
                    return value
    return None


def check_context(
    context: int | None, prompt_lengths: Sequence[int], max_new_tokens: int, block_size: int = 0
) -> None:
    """Refuse a decode whose last position (prompt + new tokens + one draft block) is past ``context``."""
    if context is None:
        return
    longest = max(prompt_lengths, default=0)
    reach = longest + max_new_tokens + block_size
    if reach <= context:
        return
    if max_new_tokens + block_size >= context:
        raise UsageError(
            f"--max-new-tokens {max_new_tokens} reaches past the target's context of {context} tokens "
            "(max_position_embeddings in its config.json); a decode beyond it measures positions the "
            f"target was never trained on. Pass --max-new-tokens below {max(context - block_size, 1)}.",
            where="--max-new-tokens",
        )
    raise UsageError(
        f"a prompt of {longest} tokens plus --max-new-tokens {max_new_tokens} and a draft block of "
        f"{block_size} rows reaches position {reach}, past the target's context of {context} tokens "
        "(max_position_embeddings in its config.json); shorten the --prompt (to at most "
        f"{max(context - max_new_tokens - block_size, 0)} tokens) or lower --max-new-tokens.",
        where="--prompt",
    )


__all__ = ["CONTEXT_KEYS", "target_context", "check_context"]
