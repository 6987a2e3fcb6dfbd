"""Whether a drafter checkpoint fits a target: the checks a pairing passes before the engine drafts.

A DFlash-family drafter reads the target's embeddings, lm_head and hidden states, so its hidden size,
target layer ids, mask token and Markov head vocabulary must be the target's. The census's config is
checked first (what the reference engine can load at all); the loaded drafter then against the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidCheckpointError, MissingBlockSizeError, printable
from ..serving.capture import uncapturable_message
from .drafter import DFlashDraftModel, load_drafter
from .formats import engine_config, export_format

if TYPE_CHECKING:
    import torch

    from ..census.draft_config import DflashCfg

MASK_TOKEN = "<|MASK|>"
"""sglang's mask token for a checkpoint that names no mask id: the target tokenizer's own."""


def check_engine_can_draft(cfg: DflashCfg) -> None:
    """Refuse, from the census alone, a checkpoint the reference engine cannot draft with.

    speculators and TorchSpec exports are drafted with their names mapped (``formats``).
    """
    where = printable(Path(cfg.path) / "config.json")
    engine_config(cfg, export_format(cfg))  # a reduced draft vocabulary is refused here
    if cfg.block_size is None:
        raise MissingBlockSizeError(
            f"{where} gives no block size, and check needs it to draft (sglang would take it from "
            "--speculative-dflash-block-size); add block_size, the width the drafter was trained "
            "with, to config.json.",
            where=where,
        )


@dataclass(frozen=True)
class TargetShape:
    """What a drafter must share with its target."""

    hidden_size: int
    num_hidden_layers: int
    vocab_size: int

    @classmethod
    def of(cls, target: Any) -> TargetShape:
        """The shape of a Hugging Face causal LM (its text config, for a multimodal one)."""
        config = target.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return cls(text.hidden_size, text.num_hidden_layers, text.vocab_size)


@dataclass(frozen=True)
class FittedDrafter:
    """A drafter loaded for a target, and why sglang cannot serve the pair (``None`` when it can)."""

    model: DFlashDraftModel
    sglang_cannot_serve: str | None


def tokenizer_mask_token(tokenizer: Any) -> int | None:
    """The tokenizer's ``<|MASK|>`` id, ``None`` when it has no such token."""
    mask = tokenizer.convert_tokens_to_ids(MASK_TOKEN)
    return None if mask is None or mask == tokenizer.unk_token_id else int(mask)


def _mask_token(cfg: DflashCfg, tokenizer: Any, where: str) -> int:
    """The checkpoint's mask id, else sglang's rule: the target tokenizer's ``<|MASK|>`` token."""
    if cfg.mask_token_id is not None:
        return cfg.mask_token_id
    mask = tokenizer_mask_token(tokenizer)
    if mask is None:
        raise InvalidCheckpointError(
            f"{where}: no mask_token_id and the target tokenizer has no <|MASK|> token; set "
            "dflash_config.mask_token_id to the id the drafter was trained with.",
            where=where,
        )
    return mask


def check_fits(model: DFlashDraftModel, target: TargetShape, where: str) -> str | None:
    """Refuse a drafter that does not fit ``target``; returns why sglang cannot serve it, or ``None``.

    The reference engine can read the target's last layer, sglang cannot: such a drafter is measured,
    and the reason is returned.
    """
    hidden = model.config.hidden_size
    if hidden != target.hidden_size:
        raise InvalidCheckpointError(
            f"{where}: drafter hidden_size {hidden} != target hidden_size {target.hidden_size}; a DFlash "
            "drafter reads the target's embeddings and lm_head, so pair it with the target it was "
            "trained on.",
            where=where,
        )
    layers = model.target_layer_ids
    bad_layers = [i for i in layers if not 0 <= i < target.num_hidden_layers]
    if bad_layers:
        raise InvalidCheckpointError(
            f"{where}: target_layer_ids {layers} name layers {bad_layers} the target "
            f"(num_hidden_layers {target.num_hidden_layers}) does not have; pair it with its own target.",
            where=where,
        )
    unservable = uncapturable_message(layers, target.num_hidden_layers) or None
    if not 0 <= model.mask_token_id < target.vocab_size:
        raise InvalidCheckpointError(
            f"{where}: mask_token_id {model.mask_token_id} is outside the target vocabulary "
            f"(vocab_size {target.vocab_size}); set dflash_config.mask_token_id correctly.",
            where=where,
        )
    head = model.markov_head
    if head is not None and head.vocab_size != target.vocab_size:
        raise InvalidCheckpointError(
            f"{where}: the Markov head biases {head.vocab_size} tokens (rows of markov_w2) but the "
            f"target's vocabulary has {target.vocab_size}; a drafter's logits are the target lm_head's "
            "plus that bias, so pair it with the target it was trained on.",
            where=where,
        )
    return unservable


def fit_drafter(
    cfg: DflashCfg, target: Any, tokenizer: Any, *, device: torch.device, dtype: torch.dtype
) -> FittedDrafter:
    """Load the drafter of ``cfg`` for ``target`` (and its tokenizer); typed errors when it does not fit."""
    where = str(Path(cfg.path) / "config.json")
    mask = _mask_token(cfg, tokenizer, where)
    model = load_drafter(cfg.path, device=device, dtype=dtype, cfg=cfg, mask_token_id=mask)
    return FittedDrafter(model, check_fits(model, TargetShape.of(target), where))


__all__ = [
    "MASK_TOKEN",
    "TargetShape",
    "FittedDrafter",
    "check_engine_can_draft",
    "tokenizer_mask_token",
    "check_fits",
    "fit_drafter",
]
