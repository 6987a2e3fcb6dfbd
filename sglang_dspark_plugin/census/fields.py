"""The fields the round geometry and the served checks need, each read from every place it is spelled.

Spellings of one field must agree. Two fields also vote: a Markov rank > 0 (a Markov head) and a
declared number of drafts per block (speculators' ``speculative_tokens``, compared with the block size).
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidCheckpointError
from ..limits import MAX_BLOCK_SIZE
from .draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL, VOTE_DFLASH, VOTE_DSPARK, Signal
from .markov import head_spellings
from .reading import TableShapes
from .view import ConfigView


def read_architecture(view: ConfigView) -> str | None:
    """``architectures[0]``; ``None`` when the config names no architecture."""
    archs = view.config.get("architectures")
    if archs is None:
        return None
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise view.invalid(
            "architectures", archs, "it must be a list of class names", 'write e.g. ["DFlashDraftModel"].'
        )
    return archs[0] if archs else None


def read_block_size(view: ConfigView) -> int | None:
    """The agreed block size; ``None`` when the config gives none (sglang then takes its flag)."""
    sources = [
        *view.lookups("block_size", ((), ("dflash_config",), ("dspark_config",))),
        *view.lookups("block_size", (("speculators_config",), ("transformer_layer_config",))),
        *view.lookups("dspark_block_size", ((),)),
    ]
    values = {  # null: not given
        key: view.integer(key, value, minimum=None, what="a block size")
        for key, value in sources
        if value is not None
    }
    agreed = view.agreed(values, "block sizes", "keep one value, the width the drafter was trained with.")
    if agreed is None:
        return None
    key, b = agreed
    if b < 2:
        raise view.invalid(
            key,
            b,
            "a DFlash-family block needs >= 2 rows (anchor plus at least one mask)",
            "set the width the drafter was trained with.",
        )
    if b > MAX_BLOCK_SIZE:
        raise view.invalid(
            key,
            b,
            f"a block is at most {MAX_BLOCK_SIZE} rows (published drafters use 4..16)",
            "set the width the drafter was trained with.",
        )
    return b


def speculative_token_signals(view: ConfigView, block_size: int | None) -> list[Signal]:
    """Tier 1: each declared draft count; b-1 drafts per block is mask-fill, b is shifted."""
    return [_draft_count_signal(view, key, value, block_size) for key, value in _declared_draft_counts(view)]


def _declared_draft_counts(view: ConfigView) -> list[tuple[str, Any]]:
    spec = view.section("speculators_config")
    if spec is None:
        return []
    declared: list[tuple[str, Any]] = []
    if "speculative_tokens" in spec:
        declared.append(("speculators_config.speculative_tokens", spec["speculative_tokens"]))
    methods = spec.get("proposal_methods")
    if methods is None:
        return declared
    if not isinstance(methods, list):
        raise view.invalid(
            "speculators_config.proposal_methods",
            methods,
            "it must be a list of objects",
            "fix the speculators config.",
        )
    for i, method in enumerate(methods):
        key = f"speculators_config.proposal_methods[{i}]"
        if not isinstance(method, dict):
            raise view.invalid(key, method, "it must be an object", "fix the speculators config.")
        if "speculative_tokens" in method:
            declared.append((f"{key}.speculative_tokens", method["speculative_tokens"]))
    return declared


def _draft_count_signal(view: ConfigView, key: str, value: Any, block_size: int | None) -> Signal:
    n = view.integer(key, value, minimum=None, what="a declared draft count")
    if block_size is None:
        return view.signal(key, n, TIER_INFO, None, "no block size to compare it with: no vote")
    if n == block_size - 1:
        return view.signal(key, n, TIER_EXPLICIT, VOTE_DFLASH, f"b-1 drafts for block_size {block_size}")
    if n == block_size:
        return view.signal(key, n, TIER_EXPLICIT, VOTE_DSPARK, f"b drafts for block_size {block_size}")
    raise view.invalid(
        key,
        n,
        f"a block of {block_size} rows yields {block_size - 1} (mask-fill) or {block_size} (shifted) drafts",
        "fix speculative_tokens or block_size to the values the drafter was trained with.",
    )


def read_markov_rank(view: ConfigView, tables: TableShapes) -> tuple[int | None, list[Signal]]:
    """The agreed Markov rank, checked against the Markov tables' shapes, and a signal per spelling.

    A rank > 0 votes shifted (a Markov head); 0 and null are recorded without a vote.
    """
    # every place sglang or SpecForge writes it (``markov.HEAD_KEY_SPELLINGS``); they must agree with
    # each other and with the tables' shapes
    spellings = head_spellings(view, "markov_rank")
    signals: list[Signal] = []
    ranks: dict[str, int] = {}
    for key, value in spellings:
        if value is None:
            signals.append(view.signal(key, None, TIER_INFO, None, "null: no vote"))
            continue
        ranks[key] = value = view.integer(key, value, minimum=0, what="a Markov rank")
        if value > 0:
            signals.append(view.signal(key, value, TIER_STRUCTURAL, VOTE_DSPARK, "a Markov head"))
        else:
            signals.append(view.signal(key, value, TIER_INFO, None, "no Markov head: absence is not a vote"))
    agreed = view.agreed(ranks, "Markov ranks", "keep the rank the drafter was trained with.")
    if agreed is None:
        return None, signals
    key, rank = agreed
    for name, (file, shape) in sorted(tables.items()):
        if len(shape) != 2 or shape[1] != rank:
            raise InvalidCheckpointError(
                f"{view.file}: {key} = {rank} but {file}:{name} has shape {list(shape)}, and "
                "markov_w1 / markov_w2 are [vocab_size, markov_rank]; set the rank the Markov head "
                "was trained with, or re-export the checkpoint.",
                where=f"{view.file}:{key}",
            )
    return rank, signals


def read_size(view: ConfigView, name: str) -> int | None:
    """The first non-null ``name`` at the top level, in transformer_layer_config or text_config."""
    for key, raw in view.lookups(name, ((), ("transformer_layer_config",), ("text_config",))):
        if raw is not None:
            return view.integer(key, raw, minimum=1, what=name)
    return None


def read_mask_token_id(view: ConfigView, vocab_size: int | None) -> int | None:
    """The agreed mask token id, inside the vocabulary where its size is known; ``None`` if not given."""
    found = [
        *view.lookups(
            "mask_token_id",
            ((), ("dflash_config",), ("dspark_config",), ("speculative_config", "dflash_config")),
        ),
        *view.lookups("dspark_noise_token_id", ((),)),
    ]
    values = {k: view.integer(k, v, minimum=0, what="a token id") for k, v in found if v is not None}
    agreed = view.agreed(values, "mask token ids", "keep the one used in training.")
    if agreed is None:
        return None
    key, mask = agreed
    if vocab_size is not None and mask >= vocab_size:
        raise view.invalid(
            key,
            mask,
            f"the vocabulary has {vocab_size} tokens (ids 0..{vocab_size - 1})",
            "set the mask token id the drafter was trained with (often len(tokenizer)).",
        )
    return mask


def read_target_layers(
    view: ConfigView, n_key: str = "num_target_layers"
) -> tuple[int | None, tuple[int, ...] | None]:
    """``(num_target_layers, target_layer_ids)``, each ``None`` when the config does not give it.

    ``n_key`` holds the target's layer count (an exporter's dialect may name it otherwise).
    """
    n = view.config.get(n_key)
    num_target_layers = None if n is None else view.integer(n_key, n, minimum=1, what="a layer count")
    found = [
        *view.lookups("target_layer_ids", ((), ("dflash_config",), ("dspark_config",))),
        *view.lookups("dspark_target_layer_ids", ((),)),
    ]
    # speculators' aux_hidden_state_layer_ids name the same layers; used only when nothing else does.
    found = [(k, v) for k, v in found if v is not None] or [
        (k, v) for k, v in view.lookups("aux_hidden_state_layer_ids", ((),)) if v is not None
    ]
    parsed = {key: _layer_ids(view, key, value, num_target_layers) for key, value in found}
    agreed = view.agreed(parsed, "target layer ids", "keep the ones used in training.")
    return num_target_layers, None if agreed is None else agreed[1]


def _layer_ids(view: ConfigView, key: str, value: Any, num_target_layers: int | None) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise view.invalid(key, value, "it must be a list of layer indices", f"fix {key}.")
    ids = tuple(view.integer(f"{key}[{i}]", v, minimum=0, what="a layer index") for i, v in enumerate(value))
    if num_target_layers is not None:
        for i, layer in enumerate(ids):
            if layer >= num_target_layers:
                raise view.invalid(
                    f"{key}[{i}]",
                    layer,
                    f"the target has {num_target_layers} layers (num_target_layers)",
                    "use layer indices 0..num_target_layers-1.",
                )
    return ids


__all__ = [
    "read_architecture",
    "read_block_size",
    "speculative_token_signals",
    "read_markov_rank",
    "read_size",
    "read_mask_token_id",
    "read_target_layers",
]
