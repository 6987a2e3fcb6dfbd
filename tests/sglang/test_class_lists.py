"""``architectures.SGLANG_BUILDS`` (what servability reads, sglang-free) is this sglang's own class list.

The draft classes are read from the ``EntryClass`` of sglang's model modules, parsed, not imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import sglang

from sglang_dspark_plugin.architectures import SGLANG_BUILDS, SGLANG_MASK_FILL_DSPARK

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
    assert sglang.__version__ in SGLANG_BUILDS
    assert draft_classes() == {k: set(v) for k, v in SGLANG_BUILDS[sglang.__version__].items()}


def test_the_mask_fill_dspark_releases_are_those_whose_dspark_reads_sample_from_anchor():
    from sglang.srt.speculative.dspark_components import dspark_config

    reads = hasattr(dspark_config, "get_dspark_sample_from_anchor")
    assert (sglang.__version__ in SGLANG_MASK_FILL_DSPARK) is reads
