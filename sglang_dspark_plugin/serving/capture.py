"""Which target layers sglang can hand a drafter (sglang-free).

sglang captures target layer i's output as the input of layer i+1 in almost every target family
(``set_dflash_layers_to_capture``: ``layers_to_capture = [i + 1 for i in layer_ids]``), so the last
layer's output is never captured: a drafter's ``target_layer_ids`` must all satisfy
``0 <= i <= num_target_layers - 2``. A few families capture a layer's output directly and accept the
last layer too (``DIRECT_CAPTURE``). docs/sglang.md lists the families, checked in sglang 0.5.17 and
0.5.23.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..util.validation import is_int

DIRECT_CAPTURE: frozenset[str] = frozenset(
    {
        # sglang 0.5.23 targets whose DFlash capture takes layer i's own output (ids 0..N-1)
        "BeamForCausalLM",
        "MiniMaxM3SparseForConditionalGeneration",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "MuseSparkTextForCausalLM",
        "KimiK3ForConditionalGeneration",
        "KimiK3LinearForCausalLM",
        "InklingForConditionalGeneration",
        "InklingForConditionalGenerationMTP",
        # DeepSeek-V4 hands its bundled DSpark head the attention input of layer i itself
        # (set_dspark_layers_to_capture; 0.5.17 and 0.5.23)
        "DeepseekV4ForCausalLM",
    }
)
"""Target architectures whose last layer sglang can capture; every other one stops at N-2."""


def last_capturable_layer(num_target_layers: int, target_architecture: str | None = None) -> int:
    """The highest target layer id sglang can hand a drafter for this target."""
    direct = target_architecture in DIRECT_CAPTURE
    return num_target_layers - 1 if direct else num_target_layers - 2


def uncapturable_layers(
    layer_ids: Iterable[int], num_target_layers: int, target_architecture: str | None = None
) -> list[int]:
    """The ids in ``layer_ids`` sglang cannot capture from a target of ``num_target_layers`` layers."""
    last = last_capturable_layer(num_target_layers, target_architecture)
    return [i for i in layer_ids if not 0 <= i <= last]


def uncapturable_message(
    layer_ids: Iterable[int],
    num_target_layers: int,
    *,
    where: str = "",
    target_architecture: str | None = None,
) -> str:
    """Why sglang cannot serve a drafter reading these layers, and the fix (empty when it can)."""
    ids = list(layer_ids)
    bad = uncapturable_layers(ids, num_target_layers, target_architecture)
    if not bad:
        return ""
    last = last_capturable_layer(num_target_layers, target_architecture)
    source = f"{where}: " if where else ""
    return (
        f"{source}target_layer_ids {ids} include {bad}, but sglang captures target layer i's output as "
        f"the input of layer i+1, so from a target of {num_target_layers} layers it can capture layers "
        f"0..{last} only; retrain/re-export the drafter with target layer ids <= {last}."
    )


def _text_int(cfg: Mapping[str, Any], key: str) -> int | None:
    """``key`` from the text config (multimodal targets nest it), else the top level; a positive int."""
    nested = cfg.get("text_config")
    text: Mapping[str, Any] = nested if isinstance(nested, dict) else cfg
    value = text.get(key, cfg.get(key))
    if not is_int(value) or value < 1:
        return None
    return value


def target_layer_count(config: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """A target's ``(architectures[0], num_hidden_layers)`` from its parsed config.json (``None`` for
    what it does not say). ``serving.target_checkpoint`` finds that config where sglang does."""
    archs = config.get("architectures")
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    return arch, _text_int(config, "num_hidden_layers")


def target_vocab_size(config: Mapping[str, Any]) -> int | None:
    """A target's vocabulary size (its text config's ``vocab_size``, the rows of the LM head sglang
    builds) from its parsed config.json; None when it does not say."""
    return _text_int(config, "vocab_size")


__all__ = [
    "DIRECT_CAPTURE",
    "last_capturable_layer",
    "target_layer_count",
    "target_vocab_size",
    "uncapturable_layers",
    "uncapturable_message",
]
