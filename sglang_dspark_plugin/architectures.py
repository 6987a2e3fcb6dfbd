"""The one table of DFlash-family draft architecture names (sglang-free).

The census reads a checkpoint's ``architectures[0]`` against ``FAMILY``; the sglang glue derives the
names its dspark arm loads with sglang's dense DSpark class from ``SGLANG_DENSE_DSPARK``. Both lists
come from here, so the census never refuses a drafter that a worker serves.
"""

from __future__ import annotations

DFLASH = "dflash"
DSPARK = "dspark"
DOMINO = "domino"

FAMILY: dict[str, str] = {
    # DFlash family, mask-fill by structure
    "DFlashDraftModel": DFLASH,
    "DFlash2DraftModel": DFLASH,
    "DeepseekDFlashDraftModel": DFLASH,
    "DFlashSpeculator": DFLASH,
    # DSpark family, shifted by structure (an explicit flag can still say mask-fill)
    "DSparkDraftModel": DSPARK,
    "Qwen3DSparkModel": DSPARK,
    "LingDSparkModel": DSPARK,
    "Gemma4DSparkModel": DSPARK,
    "DSparkV4DraftModel": DSPARK,
    "DSparkMiniMaxDraftModel": DSPARK,
    "DSparkSpeculator": DSPARK,
    # Domino: a third geometry, refused
    "DominoDraftModel": DOMINO,
}
"""Every DFlash-family draft architecture name this project knows, with its family."""

DFLASH_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == DFLASH)
DSPARK_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == DSPARK)
DOMINO_ARCHITECTURES = frozenset(name for name, family in FAMILY.items() if family == DOMINO)

SGLANG_DENSE_DSPARK: tuple[str, ...] = ("DSparkDraftModel", "Qwen3DSparkModel", "LingDSparkModel")
"""The classes of sglang's dense DSpark draft model (``models/dspark.py``): DFlash's backbone plus a
Markov head."""

SGLANG_DSPARK_ARM: tuple[str, ...] = (*SGLANG_DENSE_DSPARK, "DFlashDraftModel")
"""Draft architectures the dspark arm serves with sglang's dense DSpark class (the same backbone)."""

SGLANG_BUNDLED_DSPARK: dict[str, str] = {"DeepseekV4ForCausalLM": "DeepseekV4ForCausalLMDSpark"}
"""Target classes whose checkpoint may bundle a DSpark head (the ``dspark_*`` keys of its config), and the
draft class sglang loads that head as (``configs/model_config.py``, the draft-architecture remap; 0.5.17
and 0.5.23). sglang remaps no other class: any other target would be loaded whole as its own draft."""


SGLANG_VERSIONS: tuple[str, ...] = ("0.5.17", "0.5.23")
"""The sglang versions the plugin is tested on (``inspect`` reports what each of them serves)."""

_DFLASH_0517 = frozenset({"DFlashDraftModel", "DFlashLagunaForCausalLM"})
_DFLASH_0518 = _DFLASH_0517 | {"MuseGlimmerAssistantModel"}
_DFLASH_0519 = _DFLASH_0518 | {"DFlash2DraftModel"}
_DSPARK_0517 = frozenset({"Qwen3DSparkModel", "DSparkDraftModel"})
_DSPARK_0519 = _DSPARK_0517 | {"LingDSparkModel", "Lfm2DSparkDraftModel"}

SGLANG_BUILDS: dict[str, dict[str, frozenset[str]]] = {
    # each release's EntryClass lists: srt/models/dflash.py, dspark.py, dspark_minimax.py, lfm2_dspark.py
    "0.5.17": {"DFLASH": _DFLASH_0517, "DSPARK": _DSPARK_0517},
    "0.5.18": {"DFLASH": _DFLASH_0518, "DSPARK": _DSPARK_0517},
    **{v: {"DFLASH": _DFLASH_0519, "DSPARK": _DSPARK_0519} for v in ("0.5.19", "0.5.20", "0.5.21", "0.5.22")},
    "0.5.23": {
        "DFLASH": _DFLASH_0519 | {"DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"},
        "DSPARK": _DSPARK_0519 | {"DSparkMiniMaxDraftModel"},
    },
}
"""The DFlash-family draft classes each sglang release registers, by the builtin that drafts with them
(every release from 0.5.17 to 0.5.23; tests/sglang/test_class_lists.py checks the installed one)."""

SGLANG_MASK_FILL_DSPARK: frozenset[str] = frozenset({"0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"})
"""The releases whose DSPARK has the mask-fill layout (``sample_from_anchor`` false,
``dspark_config.get_dspark_sample_from_anchor``: 0.5.19 on)."""


def family_of(architecture: str | None) -> str | None:
    """``"dflash"``, ``"dspark"``, ``"domino"``, or ``None`` for a name outside the DFlash family."""
    return FAMILY.get(architecture) if isinstance(architecture, str) else None


__all__ = [
    "FAMILY",
    "DFLASH",
    "DSPARK",
    "DOMINO",
    "DFLASH_ARCHITECTURES",
    "DSPARK_ARCHITECTURES",
    "DOMINO_ARCHITECTURES",
    "SGLANG_DENSE_DSPARK",
    "SGLANG_DSPARK_ARM",
    "SGLANG_BUNDLED_DSPARK",
    "SGLANG_VERSIONS",
    "SGLANG_BUILDS",
    "SGLANG_MASK_FILL_DSPARK",
    "family_of",
]
