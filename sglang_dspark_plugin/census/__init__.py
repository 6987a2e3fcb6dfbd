"""The checkpoint census: which training strategy a DFlash-family draft checkpoint was trained with.

It reads config.json, the safetensors headers (the 8 length bytes and the header of each file, never
the data), ``model.safetensors.index.json`` and, where one sits in the folder, the ``strategy`` field
of a SpecForge ``training_state.pt`` (unpickled without loading a tensor). No tensor data is read
and torch is never imported. Every file is checked to be a regular file before it is opened, and
every read is bounded (``checkpoint.files``).

Signals come in tiers. Tier 1: explicit declarations. Tier 2: structural defaults. The highest tier
that has votes decides; votes inside it must agree, otherwise ``DflashCfg.conflict`` says why (an
explicit ``MEMRA_DSPARK_HARVEST`` may still serve it). No vote at all: the historical default,
mask-fill.

The package, one concern per module: ``locate`` (a folder or the local Hugging Face cache),
``files`` and ``training_state`` (reading), ``view`` (config.json and its refusal messages),
``rules`` (the signals), ``fields`` (block size, mask token, target layers, Markov rank, declared
draft count) and ``decision`` (the tier rule).
"""

from __future__ import annotations

import os

from ..checkpoint.bounds import bounded_evidence
from .architectures import DFLASH_ARCHITECTURES, DOMINO_ARCHITECTURES, DSPARK_ARCHITECTURES
from .decision import decide_evidence
from .dialects import (
    deepseek_head_type,
    deepseek_signals,
    hidden_size_key,
    target_layer_count_key,
    torchspec_signals,
)
from .draft_config import DflashCfg
from .fields import (
    read_architecture,
    read_block_size,
    read_markov_rank,
    read_mask_token_id,
    read_size,
    read_target_layers,
    speculative_token_signals,
)
from .locate import CONFIG, resolve_checkpoint
from .markov import read_markov_head
from .reading import INDEX, MARKOV_TABLES, read_config, read_tensor_names
from .rules import (
    DOMINO_MESSAGE,
    DOMINO_PREFIXES,
    DSPARK_PROJECTORS,
    INFO_PREFIXES,
    MARKOV_PREFIXES,
    SGLANG_BUNDLE_KEYS,
    SPECULATORS_TYPES,
    STRATEGY_VOTES,
    architecture_signals,
    bundle_signals,
    flag_signals,
    projector_signals,
    refuse_domino,
    shift_label_signals,
    speculators_type_signals,
    training_state_signals,
    weight_signals,
)
from .training_state import MAX_STATE_PICKLE_BYTES, TRAINING_STATE, read_training_strategy
from .view import ConfigView


def census(
    path_or_hub_id: str | os.PathLike[str], revision: str | None = None, *, download: bool = False
) -> DflashCfg:
    """Read a draft checkpoint (a folder, or a hub id at ``revision``: ``locate``) without its weights.

    Returns the ``DflashCfg`` with every signal, its tier and its vote. Raises ``InvalidCheckpointError``
    (missing, malformed or out-of-range input) or ``UnsupportedCheckpointError`` (Domino, not a
    DFlash-family drafter); contradictory evidence is recorded in ``DflashCfg.conflict``, not raised."""
    # the files: config.json, tensor names, a training state's strategy
    folder = resolve_checkpoint(path_or_hub_id, revision, download=download)
    view = ConfigView(str(folder), read_config(folder))
    tensors, markov_tables = read_tensor_names(folder)
    strategy = read_training_strategy(folder / TRAINING_STATE)

    architecture = read_architecture(view)
    block_size = read_block_size(view)

    # tier 1: explicit declarations
    evidence = [
        *flag_signals(view),
        *speculative_token_signals(view, block_size),
        *training_state_signals(view.folder, strategy),
    ]

    # tier 2: structural defaults; a Domino drafter is refused before any of them
    refuse_domino(view, architecture, tensors)
    evidence += speculators_type_signals(view)
    evidence += architecture_signals(view, architecture, tensors)
    evidence += bundle_signals(view) + projector_signals(view)
    markov_rank, rank_signals = read_markov_rank(view, markov_tables)
    evidence += rank_signals
    markov_head = read_markov_head(view, markov_rank, tensors, markov_tables, deepseek_head_type(tensors))
    evidence += weight_signals(tensors)
    evidence += shift_label_signals(view)
    evidence += torchspec_signals(view, tensors) + deepseek_signals(view, tensors)

    # the fields the geometry and the served checks read, in the config's dialect
    vocab_size, hidden_size = read_size(view, "vocab_size"), read_size(view, hidden_size_key(view))
    mask_token_id = read_mask_token_id(view, vocab_size)
    num_target_layers, target_layer_ids = read_target_layers(view, target_layer_count_key(view))

    # the tier rule, once, on evidence bounded in size (every log line and report writes it)
    decision = decide_evidence(bounded_evidence(evidence, view.file))
    return DflashCfg(
        path=view.folder,
        block_size=block_size,
        architecture=architecture,
        mask_token_id=mask_token_id,
        target_layer_ids=target_layer_ids,
        num_target_layers=num_target_layers,
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        markov_rank=markov_rank,
        markov_head=markov_head,
        evidence=tuple(evidence),
        deciding_tier=decision.tier,
        conflict=decision.conflict,
        verdict=decision.vote,
        raw=view.config,
    )


__all__ = [
    "census",
    "resolve_checkpoint",
    "DFLASH_ARCHITECTURES",
    "DSPARK_ARCHITECTURES",
    "DOMINO_ARCHITECTURES",
    "CONFIG",
    "INDEX",
    "TRAINING_STATE",
    "MAX_STATE_PICKLE_BYTES",
    "MARKOV_TABLES",
    "MARKOV_PREFIXES",
    "DOMINO_PREFIXES",
    "INFO_PREFIXES",
    "DSPARK_PROJECTORS",
    "SPECULATORS_TYPES",
    "STRATEGY_VOTES",
    "SGLANG_BUNDLE_KEYS",
    "DOMINO_MESSAGE",
]
