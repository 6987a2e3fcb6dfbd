"""The topology table (``serving/topology.py``): complete, worded as the docs print it, and the page
holds it. Whether sglang does what it says is tests/sglang/test_builtin.py's job (every cell resolved
through the real argument pipeline)."""

from __future__ import annotations

from pathlib import Path

from sglang_dspark_plugin.releases import BY_VERSION
from sglang_dspark_plugin.serving import layout
from sglang_dspark_plugin.serving.topology import (
    ARMS,
    MEASURED,
    SERVED,
    TOPOLOGIES,
    cell,
    markdown_table,
    outcomes,
    topology_line,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sglang.md"


def test_every_release_names_every_arm_and_topology() -> None:
    for version, arms in MEASURED.items():
        assert set(arms) == set(ARMS), version
        for arm, cells in arms.items():
            assert set(cells) == {t.name for t in TOPOLOGIES}, (version, arm)
            assert all(c == SERVED or c.startswith("refused: ") for c in cells.values()), (version, arm)


def test_cells_say_where_they_are_tested() -> None:
    assert cell("0.5.23", "dspark", "single GPU") == "served, tested on CPU"
    assert cell("0.5.23", "dspark", "PD decode") == "served, GPU only"
    assert cell("0.5.17", "dflash", "PD decode").startswith("refused: ")
    assert "not measured" in cell("0.5.99", "dspark", "TP")


def test_the_line_names_the_release_and_arm() -> None:
    line = topology_line("0.5.17", "dflash")
    assert line.startswith("topologies for the dflash arm on sglang 0.5.17: single GPU served;")
    assert "DP attention refused" in line
    assert "not measured on this release" in topology_line("0.5.20", "dspark")


def test_the_rows_are_the_arms_and_their_outcomes_the_release_rows() -> None:
    assert ARMS == tuple(a.name for a in layout.ARMS) == ("dflash", "dspark", "mask-fill DSpark")
    old, new = BY_VERSION["0.5.17"], BY_VERSION["0.5.23"]
    # a release without the mask-fill layout refuses the arm everywhere, naming the first release with it
    assert set(outcomes(old, layout.MASK_FILL_DSPARK).values()) == {
        "refused: sglang 0.5.17's DSPARK has no mask-fill layout (sample_from_anchor, from 0.5.19), its "
        "DFLASH no Markov head"
    }
    # the builtins served under disaggregation come from the row's pd_builtins
    assert outcomes(old, layout.MASK_FILL)["PD decode"] == (
        "refused: sglang 0.5.17 builds no prefill->decode draft state for DFLASH"
    )
    assert outcomes(new, layout.MASK_FILL)["PD decode"] == SERVED
    assert outcomes(new, layout.MASK_FILL_DSPARK) == outcomes(new, layout.SHIFTED)  # DSPARK's refusals


def test_the_docs_hold_the_generated_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    start = text.index("<!-- topology-table -->\n") + len("<!-- topology-table -->\n")
    end = text.index("\n<!-- /topology-table -->")
    assert text[start:end] == markdown_table(), "regenerate: serving.topology.markdown_table()"


def test_the_measured_topologies_are_those_of_the_tested_releases() -> None:
    from sglang_dspark_plugin.releases import TESTED
    from sglang_dspark_plugin.serving.topology import MEASURED

    assert tuple(MEASURED) == TESTED  # every CI release has its row, and only those are measured here
