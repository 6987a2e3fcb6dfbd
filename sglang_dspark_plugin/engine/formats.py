"""Drafter export formats other than z-lab / SpecForge, mapped onto the reference engine's names.

* vllm-project/speculators (``speculators_model_type``): the decoder settings nest under
  ``transformer_layer_config``; ``aux_hidden_state_layer_ids`` count vLLM's auxiliary hidden states,
  which are the INPUT of that layer, so speculators' id k is the output of layer k-1 (its z-lab
  converter writes ``target_layer_ids + 1``; vLLM's reader subtracts 1); the saved state adds the
  target's own embedding and LM head (``embed_tokens``, ``lm_head``; older saves also
  ``verifier_lm_head``, ``verifier_norm``).
* TorchSpec's native export (``_torchspec_version``): ``context_proj`` / ``context_norm`` /
  ``final_norm`` are z-lab's ``fc`` / ``hidden_norm`` / ``norm`` (TorchSpec's own keymap), plus
  a frozen copy of the target's ``embed_tokens``.

The tensors that are the target's are dropped (the engine reads the target's own); a reduced draft
vocabulary (``t2d`` / ``d2t``) cannot be drafted over the target's lm_head and is refused; a missing
tensor is named in the checkpoint's own vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..census.dialects import TORCHSPEC_MARKER, TORCHSPEC_WEIGHT_NAMES
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError, printable

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg

T = TypeVar("T")

VOCAB_MAPS = ("t2d", "d2t")


@dataclass(frozen=True)
class ExportFormat:
    """How one exporter names a drafter's tensors and settings."""

    name: str
    renames: tuple[tuple[str, str], ...] = ()  # (checkpoint prefix, engine prefix)
    target_owned: tuple[str, ...] = ()  # the target's tensors, saved along; the engine reads the target's
    nested_settings: str | None = None  # the section that holds the decoder settings
    layer_id_offset: int = 0  # checkpoint layer id - engine layer id

    def engine_name(self, key: str) -> str | None:
        """The engine's name of checkpoint tensor ``key``; ``None`` for a tensor of the target."""
        if key in self.target_owned:
            return None
        for old, new in self.renames:
            if key.startswith(old):
                return new + key[len(old) :]
        return key

    def checkpoint_name(self, key: str) -> str:
        """The checkpoint's name of engine tensor ``key`` (for messages)."""
        for old, new in self.renames:
            if key.startswith(new):
                return old + key[len(new) :]
        return key

    def to_engine(self, named: Mapping[str, T], folder: Path) -> dict[str, T]:
        """``named`` under the engine's names, the target's tensors dropped; refuses a draft vocabulary."""
        maps = [k for k in VOCAB_MAPS if k in named]
        if maps:
            raise UnsupportedCheckpointError(
                f"{printable(folder)}: a {self.name} drafter with a reduced draft vocabulary "
                f"({', '.join(maps)}): the reference engine drafts with the target's own lm_head over the "
                "full vocabulary; export it with draft_vocab_size equal to the target's vocab_size.",
                where=printable(folder),
            )
        out = {}
        for key, value in named.items():
            name = self.engine_name(key)
            if name is not None:
                out[name] = value
        return out


ZLAB = ExportFormat("z-lab / SpecForge")
SPECULATORS = ExportFormat(
    "speculators",
    target_owned=("embed_tokens.weight", "lm_head.weight", "verifier_lm_head.weight", "verifier_norm.weight"),
    nested_settings="transformer_layer_config",
    layer_id_offset=1,
)
TORCHSPEC = ExportFormat(
    "TorchSpec",
    renames=tuple(TORCHSPEC_WEIGHT_NAMES.items()),
    target_owned=("embed_tokens.weight",),
)


def export_format(cfg: DflashCfg) -> ExportFormat:
    """The export format of the census ``cfg``'s checkpoint."""
    if "speculators_model_type" in cfg.raw:
        return SPECULATORS
    if TORCHSPEC_MARKER in cfg.raw:
        return TORCHSPEC
    return ZLAB


def engine_config(cfg: DflashCfg, fmt: ExportFormat) -> dict[str, Any]:
    """config.json as the engine reads it: a nested decoder's settings hoisted to the top level."""
    raw = dict(cfg.raw)
    nested = raw.get(fmt.nested_settings) if fmt.nested_settings else None
    if isinstance(nested, dict):
        raw.update({k: v for k, v in nested.items() if k not in ("architectures", "model_type")})
    if fmt is not ZLAB and raw.get("draft_vocab_size") not in (None, raw.get("vocab_size")):
        raise UnsupportedCheckpointError(
            f"{cfg.path}/config.json: draft_vocab_size {raw['draft_vocab_size']} != vocab_size "
            f"{raw.get('vocab_size')}: a reduced draft vocabulary, which the reference engine (drafting "
            "with the target's lm_head) cannot map; export it with the target's full vocabulary.",
            where=f"{cfg.path}/config.json:draft_vocab_size",
        )
    return raw


def _layers_from_aux_ids(raw: Mapping[str, Any]) -> bool:
    """Whether the census took the layers from ``aux_hidden_state_layer_ids`` (nothing else names them)."""
    sections = [raw, *(raw.get(s) for s in ("dflash_config", "dspark_config"))]
    named = any(isinstance(s, dict) and s.get("target_layer_ids") is not None for s in sections)
    return (
        raw.get("aux_hidden_state_layer_ids") is not None
        and not named
        and not raw.get("dspark_target_layer_ids")
    )


def engine_layer_ids(cfg: DflashCfg, fmt: ExportFormat) -> tuple[int, ...]:
    """The census's target layer ids as the engine counts them (the output of layer i)."""
    ids = tuple(cfg.target_layer_ids or ())
    if not fmt.layer_id_offset or not _layers_from_aux_ids(cfg.raw):
        return ids
    low = [i for i in ids if i < fmt.layer_id_offset]
    if low:
        raise InvalidCheckpointError(
            f"{cfg.path}/config.json: aux_hidden_state_layer_ids {list(ids)} include {low}, the embedding "
            "output (speculators' id k is the output of target layer k-1), which a DFlash drafter does not "
            "read; fix the ids to the layers the drafter was trained on.",
            where=f"{cfg.path}/config.json:aux_hidden_state_layer_ids",
        )
    return tuple(i - fmt.layer_id_offset for i in ids)


__all__ = [
    "ExportFormat",
    "ZLAB",
    "SPECULATORS",
    "TORCHSPEC",
    "VOCAB_MAPS",
    "export_format",
    "engine_config",
    "engine_layer_ids",
]
