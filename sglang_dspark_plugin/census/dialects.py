"""Exporters whose config.json speaks its own dialect: what their keys mean, and what they vote.

* TorchSpec (``_torchspec_version``, written by its ``tools/convert_to_hf.py``): ``num_target_layers``
  counts the captured target layers (the target's own count is ``target_num_hidden_layers``), the
  weights have TorchSpec's own names (``context_proj``, ``context_norm``, ``final_norm``), and a block
  size is a training argument, often absent. TorchSpec's DSpark trainer builds its drafter on the
  shared ``DFlashDraftModel`` class (its ``torchspec/config/dspark_draft_config.json``) and supervises
  shifted labels (``label_offsets = arange(1, block_size + 1)`` in ``torchspec/models/dspark.py``);
  its DFlash trainer adds no DSpark head. So in a TorchSpec export the ``DFlashDraftModel`` name casts
  no vote when a DSpark head is there: the head decides.
* DeepSeek-V4 inference configs (``inference/config.json``: ``dim``, ``n_layers``, ``n_mtp_layers``)
  and their ``mtp.<stage>.markov_head.*`` tensors. DeepSeek's reference forward feeds
  ``[anchor, noise x (b-1)]`` and samples from row i the token after it: shifted. An inference config
  with MTP layers and no DSpark stage is a plain MTP head, not a DFlash-family drafter.
"""

from __future__ import annotations

import re

from ..errors import UnsupportedCheckpointError
from .draft_config import TIER_INFO, TIER_STRUCTURAL, VOTE_DSPARK, Signal
from .families import dspark_parts
from .view import ConfigView

TORCHSPEC_MARKER = "_torchspec_version"
TORCHSPEC_LAYER_COUNT = "target_num_hidden_layers"
TORCHSPEC_WEIGHT_NAMES = {"context_proj.": "fc.", "context_norm.": "hidden_norm.", "final_norm.": "norm."}
"""TorchSpec's internal weight prefixes and the z-lab / SpecForge names they export to
(TorchSpec ``torchspec/models/draft/keymap.py``)."""

DEEPSEEK_STAGE_MARKOV = re.compile(r"^mtp\.(\d+)\.markov_head\.")
DEEPSEEK_STAGE_SIGNAL = "mtp.N.markov_head.*"
"""The ``where`` suffix of the signal the DeepSeek stages' Markov head casts."""
DEEPSEEK_KEYS = ("dim", "n_mtp_layers")
DEEPSEEK_HEAD_TYPE = "vanilla"
"""DeepSeek-V4's DSpark Markov head has one form: an embedding [vocab, rank] and a projection back to
the vocabulary (sglang ``models/deepseek_v4_dspark.py`` ``DSparkV4MarkovHead``), the vanilla head."""


def is_torchspec(view: ConfigView) -> bool:
    """Whether config.json was written by TorchSpec's exporter."""
    return TORCHSPEC_MARKER in view.config


def target_layer_count_key(view: ConfigView) -> str:
    """The key that holds the target's layer count in this config's dialect.

    ``target_num_hidden_layers`` is TorchSpec's config class's key (also in configs other tools derive
    from it, such as Kimi K3's DSpark drafters); where it is present, ``num_target_layers`` beside it
    counts the captured layers.
    """
    if view.config.get(TORCHSPEC_LAYER_COUNT) is not None:
        return TORCHSPEC_LAYER_COUNT
    return "num_target_layers"


def torchspec_signals(view: ConfigView, tensors: dict[str, str]) -> list[Signal]:
    """The TorchSpec marker, recorded with what it changes; no vote."""
    if not is_torchspec(view):
        return []
    native = sorted(n for n in tensors if n.startswith(tuple(TORCHSPEC_WEIGHT_NAMES)))
    note = (
        "a TorchSpec export: num_target_layers counts the captured layers, the target's count is "
        f"{TORCHSPEC_LAYER_COUNT}"
        + (f"; TorchSpec's own weight names ({native[0]}, ... {len(native)})" if native else "")
    )
    return [view.signal(TORCHSPEC_MARKER, view.config[TORCHSPEC_MARKER], TIER_INFO, None, note)]


def torchspec_architecture_signal(
    view: ConfigView, architecture: str | None, tensors: dict[str, str]
) -> Signal | None:
    """``DFlashDraftModel`` in a TorchSpec export with a DSpark head: the shared class, no vote."""
    if not is_torchspec(view) or architecture != "DFlashDraftModel":
        return None
    parts = dspark_parts(view, tensors)
    if not parts:
        return None  # TorchSpec's DFlash trainer: the name keeps its mask-fill vote
    note = (
        "TorchSpec's DSpark trainer exports through the shared DFlashDraftModel class: no vote, its "
        f"DSpark head decides ({parts[0]})"
    )
    return view.signal("architectures[0]", architecture, TIER_INFO, None, note)


def is_deepseek_inference(view: ConfigView) -> bool:
    """Whether config.json is a DeepSeek inference config (``dim``, ``n_mtp_layers``), not an HF one."""
    return all(key in view.config for key in DEEPSEEK_KEYS)


def deepseek_signals(view: ConfigView, tensors: dict[str, str]) -> list[Signal]:
    """The Markov heads of DeepSeek's DSpark stages vote shifted; MTP layers without one are refused."""
    stages = sorted({int(m.group(1)) for n in tensors if (m := DEEPSEEK_STAGE_MARKOV.match(n))})
    if stages:
        names = sorted(n for n in tensors if DEEPSEEK_STAGE_MARKOV.match(n))
        note = (
            f"the Markov head of DeepSeek DSpark stage(s) {stages}: its reference forward drafts "
            "[anchor, noise x (b-1)] and row i predicts the token after it (shifted)"
        )
        where = f"{tensors[names[0]]}:{DEEPSEEK_STAGE_SIGNAL}"
        return [Signal(where, len(names), TIER_STRUCTURAL, VOTE_DSPARK, note)]
    if is_deepseek_inference(view) and not dspark_parts(view, tensors):
        raise UnsupportedCheckpointError(
            f"{view.file}: a DeepSeek inference config with n_mtp_layers = "
            f"{view.config.get('n_mtp_layers')!r} but no DSpark stage (no mtp.N.markov_head.* tensor, no "
            "dspark_* key, no markov_rank): a plain MTP head, not a DFlash-family block drafter. Serve it "
            "with sglang's own MTP (EAGLE) path.",
            where=f"{view.file}:n_mtp_layers",
        )
    return []


def deepseek_head_type(tensors: dict[str, str]) -> str | None:
    """The Markov head type of DeepSeek DSpark stages (``DEEPSEEK_HEAD_TYPE``); ``None`` without them."""
    return DEEPSEEK_HEAD_TYPE if any(DEEPSEEK_STAGE_MARKOV.match(n) for n in tensors) else None


def hidden_size_key(view: ConfigView) -> str:
    """``dim`` in a DeepSeek inference config without ``hidden_size`` (its name for it), else
    ``hidden_size``."""
    return "dim" if is_deepseek_inference(view) and "hidden_size" not in view.config else "hidden_size"


__all__ = [
    "TORCHSPEC_MARKER",
    "TORCHSPEC_LAYER_COUNT",
    "TORCHSPEC_WEIGHT_NAMES",
    "DEEPSEEK_STAGE_MARKOV",
    "DEEPSEEK_STAGE_SIGNAL",
    "DEEPSEEK_HEAD_TYPE",
    "deepseek_head_type",
    "is_torchspec",
    "target_layer_count_key",
    "torchspec_signals",
    "torchspec_architecture_signal",
    "is_deepseek_inference",
    "deepseek_signals",
    "hidden_size_key",
]
