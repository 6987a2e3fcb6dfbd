"""A drafter checkpoint's weights: their names, its DSpark head keys, and their fit with the model.

Weight names are z-lab's and SpecForge's; old SpecForge exports wrote the heads under ``logit_head.``,
which is normalised away. The DSpark head keys (Markov rank and type, confidence head) are read in any
spelling sglang or SpecForge writes and checked against the tensors the checkpoint holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..census.markov import HEAD_KEY_SPELLINGS
from ..checkpoint.files import describe
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError, printable
from .markov import MARKOV_HEAD_TYPES
from .preflight import WEIGHTS_FILE, weight_files, weight_shapes

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg
    from .formats import ExportFormat

# Old SpecForge checkpoints wrote their heads under this prefix (SpecForge dflash.py normalises it too).
LEGACY_HEAD_PREFIX = "logit_head."
# Buffers some exports write (recomputed here, never trained).
IGNORED_PREFIXES = ("rotary_emb.",)
MARKOV_PREFIX, CONFIDENCE_PREFIX = "markov_head.", "confidence_head."


def _normalize_key(key: str) -> str:
    if key.startswith(LEGACY_HEAD_PREFIX):
        return key[len(LEGACY_HEAD_PREFIX) :]
    return key


def _model_names(named: Mapping[str, Any]) -> dict[str, Any]:
    """``named`` under the model's parameter names, without the buffers no model keeps."""
    out = {_normalize_key(k): v for k, v in named.items()}
    return {k: v for k, v in out.items() if not k.startswith(IGNORED_PREFIXES)}


def header_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape, from the safetensors headers alone (no tensor is read)."""
    return _model_names(weight_shapes(folder))


def read_state_dict(folder: Path) -> dict[str, torch.Tensor]:
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
    return _model_names(state)


def _spellings(raw: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Every non-null spelling of a DSpark head key in the config, as ``{dotted key: value}``, where and
    in the order sglang reads them (``census.markov.HEAD_KEY_SPELLINGS``)."""
    found = {}
    for section, pattern in HEAD_KEY_SPELLINGS:
        node: Any = raw
        for part in section:
            node = node.get(part) if isinstance(node, Mapping) else None
        name = pattern.format(key=key)
        if isinstance(node, Mapping) and node.get(name) is not None:
            found[".".join((*section, name))] = node[name]
    return found


def _markov_rank(folder: Path, cfg: DflashCfg, shapes: Mapping[str, tuple[int, ...]]) -> int:
    """The census's Markov rank, checked against ``markov_w1`` (or read off it when the config is silent)."""
    config = str(folder / "config.json")
    rank = cfg.markov_rank
    if not any(k.startswith(MARKOV_PREFIX) for k in shapes):
        if rank:
            raise InvalidCheckpointError(
                f"{config}: markov_rank {rank} but the weights hold no markov_head.* tensor; export the "
                "checkpoint with its Markov head, or set markov_rank 0 if it was trained without one.",
                where=config,
            )
        return 0
    w1 = shapes.get(f"{MARKOV_PREFIX}markov_w1.weight")
    if w1 is None or len(w1) != 2:
        raise InvalidCheckpointError(
            f"{folder}: Markov head tensors without a 2-d markov_head.markov_w1.weight "
            f"(got {None if w1 is None else tuple(w1)}); every Markov head type has one "
            "[vocab_size, markov_rank] table. Re-export the checkpoint.",
            where=str(folder / WEIGHTS_FILE),
        )
    if rank is None:  # the config is silent: the tensors are the only statement of the rank
        return int(w1[1])
    if rank != int(w1[1]):
        raise InvalidCheckpointError(
            f"{config}: markov_rank {rank} but markov_head.markov_w1.weight has shape "
            f"{tuple(w1)} (rank {int(w1[1])}); set markov_rank to the trained rank.",
            where=config,
        )
    return rank


def _markov_head_type(folder: Path, raw: Mapping[str, Any], rank: int) -> str:
    config = str(folder / "config.json")
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
    return head_type


def _confidence_with_markov(
    folder: Path, raw: Mapping[str, Any], rank: int, shape: tuple[int, ...] | None
) -> bool:
    """Whether a confidence head of weight ``shape`` (None: no head) reads the Markov features too."""
    if shape is None:
        return False
    hidden = int(raw.get("hidden_size") or 0)
    width = int(shape[-1]) if len(shape) == 2 else -1  # a projection is a matrix; anything else is refused
    with_markov = bool(rank) and width == hidden + rank
    if width != hidden and not with_markov:
        raise InvalidCheckpointError(
            f"{folder}: confidence_head.proj.weight has shape {tuple(shape)}, but its input is "
            f"hidden_size {hidden} (rows alone) or {hidden} + markov_rank {rank} (with the Markov "
            "features); re-export the checkpoint or fix hidden_size / markov_rank.",
            where=str(folder / WEIGHTS_FILE),
        )
    return with_markov


def head_keys(
    folder: Path, raw: Mapping[str, Any], cfg: DflashCfg, shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, Any]:
    """The DSpark head keys, hoisted to the top level where ``DFlashDraftModel`` reads them."""
    rank = _markov_rank(folder, cfg, shapes)
    head_type = _markov_head_type(folder, raw, rank)
    conf = shapes.get(f"{CONFIDENCE_PREFIX}proj.weight")
    return {
        "markov_rank": rank,
        "markov_head_type": head_type,
        "enable_confidence_head": conf is not None,
        "confidence_head_with_markov": _confidence_with_markov(folder, raw, rank, conf),
    }


def _listed(keys: list[str]) -> str:
    return f"{keys[:8]}{' ...' if len(keys) > 8 else ''} ({len(keys)})"


def check_state_fits(
    expected: Mapping[str, tuple[int, ...]],
    state: Mapping[str, tuple[int, ...]],
    folder: Path,
    head_type: str,
    fmt: ExportFormat | None = None,
) -> None:
    """Refuse weights whose names or shapes differ from the model's (``expected``), naming them.

    Both map a parameter name to its shape: the model's from a skeleton on the meta device, the
    weights' from their headers, so a tensor the config implies but the weights lack (every MLP, every
    layer) is refused before anything is allocated for it. With an export ``fmt`` other than z-lab's,
    every missing tensor is named as that format calls it."""
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if fmt is not None and fmt.renames + fmt.target_owned and (missing or unexpected):
        named = [fmt.checkpoint_name(k) for k in missing]
        raise InvalidCheckpointError(
            f"{folder}: the {fmt.name} weights, mapped onto the reference engine's names, lack "
            f"{len(named)} tensor(s): {named}; and hold {len(unexpected)} it has no place for: "
            f"{_listed([fmt.checkpoint_name(k) for k in unexpected])}. Check num_hidden_layers / "
            "target layer ids / markov_head_type against the weights, or re-export the checkpoint.",
            where=str(folder / WEIGHTS_FILE),
        )
    head_missing = [k for k in missing if k.startswith(MARKOV_PREFIX)]
    head_unexpected = [k for k in unexpected if k.startswith(MARKOV_PREFIX)]
    if head_missing or head_unexpected:
        raise InvalidCheckpointError(
            f"{folder}: the Markov head weights do not fit markov_head_type {head_type!r} "
            f"(missing {head_missing}, unexpected {head_unexpected}); set markov_head_type to the head "
            f"the checkpoint was trained with ({', '.join(MARKOV_HEAD_TYPES)})",
            where=str(folder / "config.json"),
        )
    if missing or unexpected:
        raise InvalidCheckpointError(
            f"{folder}: weights do not match the DFlash drafter described by config.json: "
            f"missing {_listed(missing)}, unexpected {_listed(unexpected)}; check num_hidden_layers / "
            "target_layer_ids against the weights, or re-export the checkpoint in z-lab / SpecForge format",
            where=str(folder / WEIGHTS_FILE),
        )
    bad = [k for k, v in expected.items() if tuple(state[k]) != tuple(v)]
    if bad:
        k = bad[0]
        raise InvalidCheckpointError(
            f"{folder}: tensor {k} has shape {tuple(state[k])} but config.json implies "
            f"{tuple(expected[k])} ({len(bad)} mismatched); fix hidden_size / heads / "
            "target_layer_ids in config.json",
            where=str(folder / WEIGHTS_FILE),
        )


__all__ = [
    "LEGACY_HEAD_PREFIX",
    "IGNORED_PREFIXES",
    "MARKOV_PREFIX",
    "CONFIDENCE_PREFIX",
    "header_shapes",
    "read_state_dict",
    "head_keys",
    "check_state_fits",
]
