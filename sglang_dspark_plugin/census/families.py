"""DSpark-family drafters whose class name is not in ``architectures.FAMILY``: recognised by the family's
naming pattern together with the structure their config declares, never by a name alone.

New model families ship their own class (``Lfm2DSparkDraftModel``, ``K3DSparkModel``, ...) with a
``model_type`` such as ``k3_dspark``; a closed list cannot keep up. A name that follows
``<Family>DSparkModel`` / ``<Family>DSparkDraftModel`` casts the structural vote of the DSpark family
(shifted; an explicit declaration can still say mask-fill) only when the config also declares the
family's structure: a DSpark part (a Markov head, a DSpark flag, sglang's ``dspark_*`` keys, a DSpark
projector, a confidence head) and the drafter's geometry (its target layers and its mask token). A
name with the pattern and without that structure is refused. Whether sglang can build such a class
is another question (``servability``).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import UnsupportedCheckpointError
from .draft_config import TIER_STRUCTURAL, VOTE_DFLASH, VOTE_DSPARK, Signal
from .view import ConfigView

DSPARK_CLASS = re.compile(r"^(?P<family>[A-Z][A-Za-z0-9]*)DSpark(?:Draft)?Model$")
"""``<Family>DSparkModel`` or ``<Family>DSparkDraftModel``; the family part is not empty."""

DSPARK_MODEL_TYPE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)*_dspark$")
"""``<family>_dspark``: corroborates the class name, never classifies alone."""

DFLASH_CLASS = re.compile(
    r"^(?P<family>[A-Z][A-Za-z0-9]*)?DFlash(?P<rest>[A-Z0-9][A-Za-z0-9]*)?(?:DraftModel|ForCausalLM)$"
)
"""sglang's DFlash draft classes of other families: ``MiniMaxDFlash2DraftModel``, ``DFlash2BeamDraftModel``,
``DFlashLagunaForCausalLM``."""

_SECTIONS = ((), ("dflash_config",), ("dspark_config",), ("text_config",))
_FLAGS = ("sample_from_anchor", "dspark_bonus_anchor", "query_zero_predicts_next")
_BUNDLE = ("dspark_block_size", "dspark_noise_token_id", "dspark_target_layer_ids", "dspark_markov_rank")
_MARKOV_W1 = "markov_head.markov_w1.weight"


def _present(view: ConfigView, key: str) -> list[str]:
    return [k for k, v in view.lookups(key, _SECTIONS) if v is not None]


def dspark_parts(view: ConfigView, tensors: dict[str, str]) -> list[str]:
    """What in the checkpoint belongs to a DSpark drafter, as ``where = what`` strings."""
    parts = []
    for key, value in [*view.lookups("markov_rank", _SECTIONS), *view.lookups("dspark_markov_rank", ((),))]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            parts.append(f"{key} = {value}")
    markov = sorted(n for n in tensors if n.endswith(_MARKOV_W1))
    if markov:
        parts.append(f"Markov head tensors ({markov[0]})")
    parts += [f"{key} (a DSpark layout flag)" for flag in _FLAGS for key in _present(view, flag)]
    parts += [key for key in _BUNDLE if view.config.get(key) is not None]
    for key, value in view.lookups("projector_type", ((), ("dflash_config",))):
        if isinstance(value, str) and value.startswith("dspark"):
            parts.append(f"{key} = {value!r}")
    for key, value in view.lookups("enable_confidence_head", _SECTIONS):
        if value is True:
            parts.append(f"{key} = true")
    return parts


def geometry_parts(view: ConfigView) -> dict[str, list[str]]:
    """Where the drafter's target layers and its mask token are declared (empty lists: nowhere)."""
    layers = [*_present(view, "target_layer_ids"), *_present(view, "dspark_target_layer_ids")]
    masks = [*_present(view, "mask_token_id"), *_present(view, "dspark_noise_token_id")]
    return {"target layer ids": layers, "mask token id": masks}


def family_signal(view: ConfigView, architecture: str, tensors: dict[str, str]) -> Signal | None:
    """The structural vote of a DSpark- or DFlash-family class outside ``FAMILY``; ``None`` if the name
    is neither.

    A name with a family's pattern but without its declared structure is refused.
    """
    match = DSPARK_CLASS.match(architecture)
    if match is None:
        return _dflash_family_signal(view, architecture)
    parts = dspark_parts(view, tensors)
    geometry = geometry_parts(view)
    missing = [what for what, where in geometry.items() if not where]
    if not parts:
        missing.insert(0, "a DSpark part (Markov head, DSpark flag, dspark_* keys, DSpark projector)")
    if missing:
        raise UnsupportedCheckpointError(
            f"{view.file}: architectures[0] = {architecture!r} is named like a DSpark-family drafter "
            f"({match['family']} + DSpark), but the config declares no {' and no '.join(missing)}. A name "
            "alone does not classify a drafter: add the keys the drafter was trained with, or pass the "
            "draft checkpoint rather than another model.",
            where=f"{view.file}:architectures",
        )
    found = parts + [where[0] for where in geometry.values()]
    model_type = view.config.get("model_type")
    if isinstance(model_type, str) and DSPARK_MODEL_TYPE.match(model_type):
        found.append(f"model_type = {model_type!r}")
    note = f"the {match['family']} DSpark family, by its naming pattern and its structure: "
    note += "; ".join(found)
    return view.signal("architectures[0]", architecture, TIER_STRUCTURAL, VOTE_DSPARK, note)


def _dflash_family_signal(view: ConfigView, architecture: str) -> Signal | None:
    """A ``DFlash`` class of another family votes mask-fill when its ``dflash_config`` declares the
    drafter's target layers and mask token (a DFlash drafter's structure)."""
    match = DFLASH_CLASS.match(architecture)
    if match is None:
        return None
    section = view.section("dflash_config") or {}
    missing = [key for key in ("target_layer_ids", "mask_token_id") if section.get(key) is None]
    if missing:
        raise UnsupportedCheckpointError(
            f"{view.file}: architectures[0] = {architecture!r} is named like a DFlash-family drafter, but "
            f"its dflash_config declares no {' and no '.join(missing)}. A name alone does not classify a "
            "drafter: add the keys the drafter was trained with, or pass the draft checkpoint.",
            where=f"{view.file}:architectures",
        )
    note = (
        "a DFlash-family class, by its naming pattern and its dflash_config: target_layer_ids; mask_token_id"
    )
    return view.signal("architectures[0]", architecture, TIER_STRUCTURAL, VOTE_DFLASH, note)


def pattern_family(architecture: Any) -> str | None:
    """The family part of a ``<Family>DSpark(Draft)Model`` name, ``None`` for any other value."""
    match = DSPARK_CLASS.match(architecture) if isinstance(architecture, str) else None
    return None if match is None else match["family"]


__all__ = [
    "DSPARK_CLASS",
    "DSPARK_MODEL_TYPE",
    "DFLASH_CLASS",
    "dspark_parts",
    "geometry_parts",
    "family_signal",
    "pattern_family",
]
