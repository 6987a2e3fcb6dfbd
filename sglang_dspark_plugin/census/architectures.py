"""The one table of DFlash-family draft architecture names (sglang-free).

The census reads a checkpoint's ``architectures[0]`` against ``FAMILY``; the plan derives the names its
dspark arm loads with sglang's dense DSpark class from ``SGLANG_DENSE_DSPARK``. Both lists come from
here, so the census never refuses a drafter that a worker serves. Which classes each sglang release
registers is the release table's (``releases``).
"""

from __future__ import annotations

FAMILY_DFLASH = "dflash"
FAMILY_DSPARK = "dspark"
FAMILY_DOMINO = "domino"
"""The families (lower case, as votes and the manifest write them); sglang's algorithm names are
``releases.DFLASH`` / ``releases.DSPARK``."""

FAMILY: dict[str, str] = {
    # DFlash family, mask-fill by structure
    "DFlashDraftModel": FAMILY_DFLASH,
    "DFlash2DraftModel": FAMILY_DFLASH,
    "DeepseekDFlashDraftModel": FAMILY_DFLASH,
    "DFlashSpeculator": FAMILY_DFLASH,
    # DSpark family, shifted by structure (an explicit flag can still say mask-fill)
    "DSparkDraftModel": FAMILY_DSPARK,
    "Qwen3DSparkModel": FAMILY_DSPARK,
    "LingDSparkModel": FAMILY_DSPARK,
    "Gemma4DSparkModel": FAMILY_DSPARK,
    "DSparkV4DraftModel": FAMILY_DSPARK,
    "DSparkMiniMaxDraftModel": FAMILY_DSPARK,
    "DSparkSpeculator": FAMILY_DSPARK,
    # Domino: a third geometry, refused
    "DominoDraftModel": FAMILY_DOMINO,
}
"""Every DFlash-family draft architecture name this project knows, with its family."""

DFLASH_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == FAMILY_DFLASH)
DSPARK_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == FAMILY_DSPARK)
DOMINO_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == FAMILY_DOMINO)

SGLANG_DENSE_DSPARK: tuple[str, ...] = ("DSparkDraftModel", "Qwen3DSparkModel", "LingDSparkModel")
"""The classes of sglang's dense DSpark draft model (``models/dspark.py``): DFlash's backbone plus a
Markov head."""

SGLANG_DSPARK_ARM: tuple[str, ...] = (*SGLANG_DENSE_DSPARK, "DFlashDraftModel")
"""Draft architectures the dspark arm serves with sglang's dense DSpark class (the same backbone)."""

SGLANG_BUNDLED_DSPARK: dict[str, str] = {"DeepseekV4ForCausalLM": "DeepseekV4ForCausalLMDSpark"}
"""Target classes whose checkpoint may bundle a DSpark head (the ``dspark_*`` keys of its config), and the
draft class sglang loads that head as (``configs/model_config.py``, the draft-architecture remap; 0.5.17
and 0.5.23). sglang remaps no other class: any other target would be loaded whole as its own draft."""


def family_of(architecture: str | None) -> str | None:
    """``"dflash"``, ``"dspark"``, ``"domino"``, or ``None`` for a name outside the DFlash family."""
    return FAMILY.get(architecture) if isinstance(architecture, str) else None


__all__ = [
    "FAMILY",
    "FAMILY_DFLASH",
    "FAMILY_DSPARK",
    "FAMILY_DOMINO",
    "DFLASH_ARCHITECTURES",
    "DSPARK_ARCHITECTURES",
    "DOMINO_ARCHITECTURES",
    "SGLANG_DENSE_DSPARK",
    "SGLANG_DSPARK_ARM",
    "SGLANG_BUNDLED_DSPARK",
    "family_of",
]
