"""Whether a sglang release's class lists build a draft in the layout the plan chose (sglang-free).

The plan decides the builtin and its query layout (``layout.layout_for``); this is one of its checks
(``refusals.check_servable``): the draft's class must be one that release registers for that builtin,
in a weight layout its loader reads, or the builtin itself would refuse it after the target loaded.

* shifted (DSPARK, anchor-first): the dense DSpark classes the dspark arm loads;
* mask-fill (DFLASH): the release's DFlash classes, and a dense DSpark class without a Markov head
  (loaded as ``DFlashDraftModel``);
* mask-fill DSpark (DSPARK, ``sample_from_anchor`` false): a dense DSpark class keeping its Markov head.
"""

from __future__ import annotations

from typing import Any

from ..census.architectures import SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..census.dialects import TORCHSPEC_WEIGHT_NAMES
from .layout import DFLASH, Layout
from .releases import BY_VERSION

TORCHSPEC_NATIVE = tuple(TORCHSPEC_WEIGHT_NAMES)


def _not_shifted(version: str, architecture: str) -> str | None:
    if architecture in SGLANG_DSPARK_ARM:
        return None
    if architecture in BY_VERSION[version].dspark_classes:
        return (
            f"sglang {version} builds {architecture} itself, but the dspark arm serves the dense DSpark "
            f"classes only ({', '.join(SGLANG_DSPARK_ARM)})"
        )
    return f"sglang {version} registers no {architecture} class"


def _not_mask_fill(version: str, architecture: str, markov_rank: int) -> str | None:
    if architecture in BY_VERSION[version].dflash_classes:
        return None
    if architecture in SGLANG_DENSE_DSPARK:
        if markov_rank == 0:
            return None  # loads as DFlashDraftModel: the same backbone, no head to drop
        return f"{architecture} has a rank-{markov_rank} Markov head, which sglang's DFLASH would drop"
    return f"sglang {version}'s DFLASH registers no {architecture} class"


def unbuilt_reason(
    layout: Layout, architecture: str | None, markov_rank: int, unloadable: str | None, version: str
) -> str | None:
    """Why ``version`` (a release of the table, ``releases``) cannot build a draft of ``architecture`` in
    ``layout``; ``None`` when it builds it. ``unloadable``: why its loader cannot read the weights."""
    if unloadable is not None:
        return unloadable
    if architecture is None:
        return "config.json names no architecture, and sglang builds a draft from architectures[0]"
    if layout.builtin == DFLASH:
        return _not_mask_fill(version, architecture, markov_rank)
    if layout.mask_fill_dspark and architecture not in SGLANG_DENSE_DSPARK:
        return f"sglang {version}'s DSPARK builds no mask-fill {architecture}"
    return _not_shifted(version, architecture)


def unloadable_layout(config: dict[str, Any], tensor_names: list[str]) -> str | None:
    """Why sglang cannot load a checkpoint in this layout (speculators', TorchSpec's own names), or None."""
    if "speculators_model_type" in config:
        return (
            "a speculators-format checkpoint (the decoder under transformer_layer_config): sglang loads "
            "z-lab / SpecForge layouts only"
        )
    native = sorted(n for n in tensor_names if n.startswith(TORCHSPEC_NATIVE))
    if native:
        return f"TorchSpec-style weight names ({native[0]}, ...): sglang loads fc / hidden_norm / norm"
    return None


__all__ = ["unbuilt_reason", "unloadable_layout"]
