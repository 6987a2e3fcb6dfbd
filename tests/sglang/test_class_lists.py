"""The release table (``releases``, sglang-free) holds this sglang's own row: its draft classes, read
from the ``EntryClass`` of sglang's model modules (parsed, not imported), and the features the glue
detects in its code (``resolution.sglang_support``, the adapter). ``scripts/release_matrix.py`` runs this
on every release from 0.5.17 to 0.5.23.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import sglang

from sglang_dspark_plugin.releases import (
    BY_VERSION,
    LAST_MEASURED,
    RELEASES,
    TESTED,
    nearest,
    untested_warning,
)
from sglang_dspark_plugin.serving import SglangSupport

MODELS = Path(sglang.__file__).parent / "srt" / "models"
TARGETS_WITH_A_DRAFT = ("deepseek_v4_dspark.py",)  # a target model bundling its DSpark head


def entry_classes(path: Path) -> set[str]:
    """The class names a model module's ``EntryClass`` lists."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "EntryClass" for t in node.targets):
            values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            names |= {v.id for v in values if isinstance(v, ast.Name)}
    return names


def draft_classes() -> dict[str, set[str]]:
    """sglang's DFlash draft classes (``models/dflash.py``) and DSpark draft classes (``*dspark*.py``)."""
    dspark = [p for p in MODELS.glob("*dspark*.py") if p.name not in TARGETS_WITH_A_DRAFT]
    return {
        "DFLASH": entry_classes(MODELS / "dflash.py"),
        "DSPARK": set().union(*(entry_classes(p) for p in dspark)),
    }


def test_the_class_lists_are_this_sglangs():
    assert sglang.__version__ in BY_VERSION
    assert draft_classes() == {k: set(v) for k, v in BY_VERSION[sglang.__version__].builds.items()}


def test_this_releases_features_are_what_its_code_offers():
    """Each feature of the row against the glue's own detection in this sglang's code."""
    from sglang_dspark_plugin.sglang_plugin import resolution

    row = BY_VERSION[sglang.__version__]
    detected = resolution.sglang_support()
    assert SglangSupport.for_version(sglang.__version__) == detected  # the plan's record = the code's
    assert (row.mask_fill_dspark, row.pd_builtins, row.dspark_subfolder) == (
        detected.mask_fill_dspark,
        detected.disaggregation,
        detected.dspark_subfolder,
    )
    hooks = importlib.util.find_spec("sglang.srt.arg_groups.resolution_hooks") is not None
    assert row.resolution_hooks is hooks
    assert resolution.adapter().__name__.endswith("adapter_0523" if hooks else "adapter_0517")


def test_the_table_is_ordered_and_names_its_tested_and_last_releases():
    keys = [tuple(int(n) for n in r.version.split(".")) for r in RELEASES]
    assert keys == sorted(keys) and TESTED == ("0.5.17", "0.5.23") and LAST_MEASURED == "0.5.23"
    assert nearest("0.5.30") is BY_VERSION["0.5.23"] and nearest("0.5.19.post1") is BY_VERSION["0.5.19"]
    assert "newer than the last release measured (0.5.23)" in (untested_warning("0.5.30") or "")
    assert "a measured release" in (untested_warning("0.5.20") or "")
    assert untested_warning("0.5.23") is None and untested_warning("0.5.17") is None  # tested: no warning
