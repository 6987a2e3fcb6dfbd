"""Whether each sglang version can serve a classified drafter, and with which builtin (sglang-free).

Classification (the census) says how a drafter was trained; this says whether ``DSPARK_HARVEST`` on a
given sglang version can build it. The rule is the served plan's (``sglang_plugin.layout`` and
``draft_routes``), over the class lists of ``architectures``:

* shifted (dspark harvest): DSPARK, anchor-first, for the dense DSpark classes the dspark arm loads;
* mask-fill (dflash harvest): DFLASH for the version's DFlash classes, and for a dense DSpark class
  without a Markov head (loaded as ``DFlashDraftModel``); with a Markov head, DSPARK with
  ``sample_from_anchor`` false, on the versions that have that layout.

Anything else cannot be served there, and the reason says which class is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..architectures import (
    SGLANG_BUILDS,
    SGLANG_DENSE_DSPARK,
    SGLANG_DSPARK_ARM,
    SGLANG_MASK_FILL_DSPARK,
    SGLANG_VERSIONS,
)
from ..census.dialects import TORCHSPEC_WEIGHT_NAMES
from ..harvest import DsparkHarvest

TORCHSPEC_NATIVE = tuple(TORCHSPEC_WEIGHT_NAMES)

DFLASH, DSPARK = "DFLASH", "DSPARK"


@dataclass(frozen=True)
class Servability:
    """How one sglang version serves a drafter: its builtin and DSPARK layout, or why it cannot."""

    version: str
    builtin: str | None  # "DFLASH", "DSPARK"; None: this version cannot serve it
    sample_from_anchor: bool | None  # DSPARK's query layout; None for DFLASH or when not served
    how: str  # the class that builds it, or why none does

    @property
    def servable(self) -> bool:
        """Whether this version serves the drafter."""
        return self.builtin is not None

    def describe(self) -> str:
        """``DSPARK``, ``DSPARK, sample_from_anchor=false``, ``DFLASH`` or ``cannot serve``, and how."""
        if self.builtin is None:
            return f"cannot serve ({self.how})"
        layout = ", sample_from_anchor=false" if self.sample_from_anchor is False else ""
        return f"{self.builtin}{layout} ({self.how})"

    def to_json(self) -> dict[str, Any]:
        """``{version, builtin, sample_from_anchor, servable, how}``."""
        return {
            "version": self.version,
            "builtin": self.builtin,
            "sample_from_anchor": self.sample_from_anchor,
            "servable": self.servable,
            "how": self.how,
        }


def _shifted(version: str, architecture: str) -> Servability:
    if architecture in SGLANG_DSPARK_ARM:
        how = f"the dspark arm builds {architecture} as sglang's dense DSpark"
        return Servability(version, DSPARK, True, how)
    own = architecture in SGLANG_BUILDS[version][DSPARK]
    why = (
        f"sglang {version} builds {architecture} itself, but the dspark arm serves the dense DSpark "
        f"classes only ({', '.join(SGLANG_DSPARK_ARM)})"
        if own
        else f"sglang {version} registers no {architecture} class"
    )
    return Servability(version, None, None, why)


def _mask_fill(version: str, architecture: str, markov_rank: int) -> Servability:
    if architecture in SGLANG_BUILDS[version][DFLASH]:
        return Servability(version, DFLASH, None, f"sglang {version}'s own {architecture}")
    if architecture not in SGLANG_DENSE_DSPARK:
        why = f"sglang {version}'s DFLASH registers no {architecture} class"
        return Servability(version, None, None, why)
    if markov_rank == 0:
        how = f"{architecture} without a Markov head loads as DFlashDraftModel"
        return Servability(version, DFLASH, None, how)
    if version in SGLANG_MASK_FILL_DSPARK:
        return Servability(version, DSPARK, False, f"{architecture} keeps its rank-{markov_rank} Markov head")
    why = (
        f"a rank-{markov_rank} Markov head: sglang {version}'s DFLASH has none and its DSPARK no mask-fill "
        "layout"
    )
    return Servability(version, None, None, why)


def servability(
    harvest: DsparkHarvest,
    architecture: str | None,
    markov_rank: int | None,
    unloadable: str | None = None,
    versions: tuple[str, ...] = SGLANG_VERSIONS,
) -> tuple[Servability, ...]:
    """How each of ``versions`` (releases ``SGLANG_BUILDS`` lists; default the tested ones) serves a
    drafter of ``architecture`` under ``harvest``.

    ``unloadable``: why sglang's weight loader cannot read the checkpoint at all (an exporter's own
    layout), whatever its class.
    """
    out = []
    for version in versions:
        if unloadable is not None:
            out.append(Servability(version, None, None, unloadable))
        elif architecture is None:
            why = "config.json names no architecture, and sglang builds a draft from architectures[0]"
            out.append(Servability(version, None, None, why))
        elif harvest is DsparkHarvest.DSPARK:
            out.append(_shifted(version, architecture))
        else:
            out.append(_mask_fill(version, architecture, markov_rank or 0))
    return tuple(out)


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


__all__ = ["DFLASH", "DSPARK", "Servability", "servability", "unloadable_layout"]
