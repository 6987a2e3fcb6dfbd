"""The one table of sglang releases (sglang-free): what each release from 0.5.17 to 0.5.23 offers the
plan, measured (``scripts/release_matrix.py``; ``tests/sglang/test_class_lists.py`` checks the installed
release's row against its own code). Everything per release derives from it: the tested versions,
each release's draft classes, its features, and the support record of a release the plan is asked about
(``serving.request.SglangSupport.for_version``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from typing import Any

DFLASH, DSPARK = "DFLASH", "DSPARK"


@dataclass(frozen=True)
class Release:
    """One sglang release, as far as the plan's decisions and the plugin's glue go."""

    version: str
    dflash_classes: frozenset[str]  # EntryClass of models/dflash.py
    dspark_classes: frozenset[str]  # EntryClass of models/*dspark*.py (drafts, not targets)
    mask_fill_dspark: bool  # DSPARK reads sample_from_anchor (dspark_config.get_dspark_sample_from_anchor)
    pd_builtins: tuple[str, ...]  # builtins whose prefill->decode draft state it builds
    dspark_subfolder: bool  # DSPARK finds a draft in the target's dspark/ subfolder
    resolution_hooks: bool  # the resolution-hook API (arg_groups/resolution_hooks.py): adapter_0523
    tested: bool = False  # CI runs the whole suite on it; the others are measured by release_matrix.py
    dspark_head_in_dflash_config: bool = False  # DSPARK's parse reads the Markov head in dflash_config
    refused_topologies: tuple[tuple[str, str, str], ...] = ()  # (builtin, topology, the builtin's reason)
    # beside what the features above refuse (``topology.outcomes``); measured on the tested releases

    @property
    def builds(self) -> dict[str, frozenset[str]]:
        """The draft classes per builtin: ``{"DFLASH": ..., "DSPARK": ...}``."""
        return {DFLASH: self.dflash_classes, DSPARK: self.dspark_classes}


_DFLASH_0517 = frozenset({"DFlashDraftModel", "DFlashLagunaForCausalLM"})
_DFLASH_0518 = _DFLASH_0517 | {"MuseGlimmerAssistantModel"}
_DFLASH_0519 = _DFLASH_0518 | {"DFlash2DraftModel"}
_DSPARK_0517 = frozenset({"Qwen3DSparkModel", "DSparkDraftModel"})
_DSPARK_0519 = _DSPARK_0517 | {"LingDSparkModel", "Lfm2DSparkDraftModel"}
_DFLASH_PP = "sglang's DFLASH supports pp_size == 1 only"
_NO_PP = tuple((DFLASH, t, _DFLASH_PP) for t in ("PP", "PP on a PD prefill server"))
_PD_DSPARK = (DSPARK,)
_PD_BOTH = (DFLASH, DSPARK)

RELEASES: tuple[Release, ...] = (
    Release(
        "0.5.17",
        _DFLASH_0517,
        _DSPARK_0517,
        False,
        _PD_DSPARK,
        False,
        False,
        tested=True,
        refused_topologies=(
            (DFLASH, "DP attention", "sglang 0.5.17's DFLASH does not support dp attention"),
            *_NO_PP,
            (DSPARK, "PP", "sglang 0.5.17's DSPARK supports pp_size == 1 only"),
            (DSPARK, "PP on a PD prefill server", "sglang 0.5.17's DSPARK supports pp_size == 1 only"),
        ),
    ),
    Release("0.5.18", _DFLASH_0518, _DSPARK_0517, False, _PD_DSPARK, False, False),
    Release("0.5.19", _DFLASH_0519, _DSPARK_0519, True, _PD_DSPARK, False, False),
    Release("0.5.20", _DFLASH_0519, _DSPARK_0519, True, _PD_BOTH, False, True),
    Release("0.5.21", _DFLASH_0519, _DSPARK_0519, True, _PD_BOTH, False, True),
    Release("0.5.22", _DFLASH_0519, _DSPARK_0519, True, _PD_BOTH, False, True),
    Release(
        "0.5.23",
        _DFLASH_0519 | {"DFlash2BeamDraftModel", "MiniMaxDFlash2DraftModel"},
        _DSPARK_0519 | {"DSparkMiniMaxDraftModel"},
        True,
        _PD_BOTH,
        True,
        True,
        tested=True,
        dspark_head_in_dflash_config=True,  # dspark_config.py:206-211 merges it under dspark_config
        refused_topologies=(
            *_NO_PP,
            (DSPARK, "PP", "sglang's DSPARK runs pipeline parallelism on a PD prefill server only"),
        ),
    ),
)
"""Every release from 0.5.17 to 0.5.23, oldest first."""

BY_VERSION: dict[str, Release] = {r.version: r for r in RELEASES}
TESTED: tuple[str, ...] = tuple(r.version for r in RELEASES if r.tested)
"""The releases CI tests (``inspect`` reports these, ``doctor`` calls them supported)."""
LAST_MEASURED: str = RELEASES[-1].version


def first_release(feature: Callable[[Release], Any]) -> str:
    """The oldest release whose row has ``feature`` (``lambda r: r.mask_fill_dspark``): the "from
    0.5.19" of a message, read from the table."""
    return next(r.version for r in RELEASES if feature(r))


def spans(feature: Callable[[Release], Any]) -> list[tuple[str, Any]]:
    """``feature`` over the table, adjacent releases alike merged: ``[("0.5.17 to 0.5.19", ...),
    ("0.5.20 on", ...)]`` (the last span is what the plan assumes of newer releases too)."""
    groups: list[list[Release]] = []
    for r in RELEASES:
        if groups and feature(groups[-1][0]) == feature(r):
            groups[-1].append(r)
        else:
            groups.append([r])
    named = []
    for i, g in enumerate(groups):
        first, last = g[0].version, g[-1].version
        name = f"{first} on" if i == len(groups) - 1 else first if first == last else f"{first} to {last}"
        named.append((name, feature(g[0])))
    return named


def installed_sglang() -> str | None:
    """The installed sglang distribution's version (read from its metadata, sglang not imported), or None."""
    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def version_key(version: str) -> tuple[int, ...]:
    """``"0.5.23"`` -> ``(0, 5, 23)``; the leading numbers of any version string (``0.5.24rc1`` too)."""
    return tuple(int(n) for n in re.findall(r"\d+", version)[:3])


def nearest(version: str) -> Release:
    """The release ``version`` is, or else the newest measured one at or below it (the oldest for an
    older version): what the plan assumes of a release it has no row for."""
    if version in BY_VERSION:
        return BY_VERSION[version]
    below = [r for r in RELEASES if version_key(r.version) <= version_key(version)]
    return below[-1] if below else RELEASES[0]


def newer_than_measured(version: str) -> bool:
    """Whether ``version`` is newer than the last release measured (it gets a WARNING at registration)."""
    return version_key(version) > version_key(LAST_MEASURED)


def untested_warning(version: str, tested: tuple[str, ...] = TESTED) -> str | None:
    """The registration's WARNING for a release CI does not test (None for a tested one): measured, or
    not, and for a release newer than the last one measured, that one's row is what the plan assumes."""
    if version in tested:
        return None
    if version in BY_VERSION:
        row = "a measured release (scripts/release_matrix.py; its row of the release table is its own)"
    elif newer_than_measured(version):
        row = (
            f"newer than the last release measured ({LAST_MEASURED}): the plan assumes its features "
            "(measure it with scripts/release_matrix.py)"
        )
    else:
        row = f"not a measured release: the plan assumes the features of {nearest(version).version}"
    return (
        f"sglang-dspark-plugin: sglang {version} is not a tested version ({', '.join(tested)}); it is "
        f"{row}. Its contract checks passed, so DSPARK_HARVEST is registered; validate on your hardware "
        "with scripts/gpu_validate.py."
    )


__all__ = [
    "BY_VERSION",
    "DFLASH",
    "DSPARK",
    "LAST_MEASURED",
    "RELEASES",
    "Release",
    "TESTED",
    "first_release",
    "spans",
    "nearest",
    "newer_than_measured",
    "untested_warning",
    "version_key",
]
