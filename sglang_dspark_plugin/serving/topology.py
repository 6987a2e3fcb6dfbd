"""Which distributed topologies each arm is served in, per sglang release (sglang-free).

``DSPARK_HARVEST`` is resolved as its builtin before sglang's own speculative handling, so a topology
is served exactly where that builtin serves it; the plugin adds refusals only where the builtin would
serve the wrong convention or fail later (0.5.17's DFLASH under PD: no prefill->decode draft state;
0.5.17's DSPARK has no mask-fill layout). The table is measured, not read: ``tests/sglang`` resolves
every row through the real argument pipeline of each CI release, for the builtin and for the plugin,
and fails when an outcome differs from it. ``doctor``, the startup lines and docs/sglang.md print it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import MASK_FILL_DSPARK, SHIFTED, Layout

ARMS = ("dflash", "dspark", "mask-fill DSpark")
"""The dflash arm (DFLASH), the dspark arm (DSPARK, anchor-first), a mask-fill drafter with a Markov
head (DSPARK, ``sample_from_anchor`` false)."""


@dataclass(frozen=True)
class Topology:
    """One topology and the flags that ask for it (the flags the tests resolve)."""

    name: str
    flags: tuple[str, ...]


TOPOLOGIES = (
    Topology("single GPU", ()),
    Topology("TP", ("--tp-size", "2")),
    Topology(
        "multi-node TP",
        ("--tp-size", "2", "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "127.0.0.1:29500"),
    ),
    Topology(
        "DP attention", ("--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--enable-dp-lm-head")
    ),
    Topology("PD prefill", ("--disaggregation-mode", "prefill")),
    Topology("PD decode", ("--disaggregation-mode", "decode")),
    Topology("PP", ("--pp-size", "2")),
    Topology("PP on a PD prefill server", ("--pp-size", "2", "--disaggregation-mode", "prefill")),
)

SERVED_ON_CPU = frozenset({"single GPU"})
"""Topologies whose served rounds the CPU harness runs (tests/sglang/test_served.py); the others are
resolved on CPU and served on GPUs only (scripts/gpu_validate.py)."""

SERVED = "served"

_DFLASH_PP = "refused: sglang's DFLASH supports pp_size == 1 only"
_NO_MASK_FILL = (
    "refused: sglang 0.5.17's DSPARK has no mask-fill layout (sample_from_anchor), its DFLASH no Markov head"
)
_0517_DSPARK = {t.name: SERVED for t in TOPOLOGIES} | {
    "PP": "refused: sglang 0.5.17's DSPARK supports pp_size == 1 only",
    "PP on a PD prefill server": "refused: sglang 0.5.17's DSPARK supports pp_size == 1 only",
}
_0523_DSPARK = {t.name: SERVED for t in TOPOLOGIES} | {
    "PP": "refused: sglang's DSPARK runs pipeline parallelism on a PD prefill server only",
}

MEASURED: dict[str, dict[str, dict[str, str]]] = {
    "0.5.17": {
        "dflash": {t.name: SERVED for t in TOPOLOGIES}
        | {
            "DP attention": "refused: sglang 0.5.17's DFLASH does not support dp attention",
            "PD prefill": "refused: sglang 0.5.17 builds no prefill->decode draft state for DFLASH",
            "PD decode": "refused: sglang 0.5.17 builds no prefill->decode draft state for DFLASH",
            "PP": _DFLASH_PP,
            "PP on a PD prefill server": _DFLASH_PP,
        },
        "dspark": _0517_DSPARK,
        "mask-fill DSpark": {t.name: _NO_MASK_FILL for t in TOPOLOGIES},
    },
    "0.5.23": {
        "dflash": {t.name: SERVED for t in TOPOLOGIES}
        | {"PP": _DFLASH_PP, "PP on a PD prefill server": _DFLASH_PP},
        "dspark": _0523_DSPARK,
        "mask-fill DSpark": _0523_DSPARK,
    },
}
"""Per release, arm and topology: ``served`` or ``refused: <reason>`` (DP attention also needs
``--enable-dp-lm-head`` on both builtins; the builtin refuses it otherwise, and so does the plugin)."""


def arm_of(layout: Layout) -> str:
    """The arm a plan's layout serves: ``dflash``, ``dspark`` or ``mask-fill DSpark``."""
    if layout == MASK_FILL_DSPARK:
        return "mask-fill DSpark"
    return "dspark" if layout == SHIFTED else "dflash"


def cell(version: str, arm: str, topology: str) -> str:
    """The docs' wording of one cell: served on CPU / GPU only, refused, or not measured."""
    outcome = MEASURED.get(version, {}).get(arm, {}).get(topology)
    if outcome is None:
        return "not measured on this release: sglang's own checks decide"
    if outcome != SERVED:
        return outcome
    return "served, tested on CPU" if topology in SERVED_ON_CPU else "served, GPU only"


def topology_line(version: str, arm: str) -> str:
    """One line: each topology and whether this release serves it for ``arm``."""
    if version not in MEASURED:
        return (
            f"topologies for the {arm} arm on sglang {version}: not measured on this release (measured: "
            f"{', '.join(MEASURED)}); sglang's own {'DFLASH' if arm == 'dflash' else 'DSPARK'} checks decide"
        )
    parts = [f"{t.name} {MEASURED[version][arm][t.name]}" for t in TOPOLOGIES]
    return f"topologies for the {arm} arm on sglang {version}: " + "; ".join(parts)


def markdown_table() -> str:
    """The docs' topology table: a row per release and arm, a column per topology."""
    head = "| sglang | arm | " + " | ".join(t.name for t in TOPOLOGIES) + " |"
    rule = "|---" * (len(TOPOLOGIES) + 2) + "|"
    rows = [
        f"| {v} | {a} | " + " | ".join(cell(v, a, t.name) for t in TOPOLOGIES) + " |"
        for v in MEASURED
        for a in ARMS
    ]
    return "\n".join([head, rule, *rows])


__all__ = [
    "ARMS",
    "TOPOLOGIES",
    "MEASURED",
    "SERVED",
    "SERVED_ON_CPU",
    "Topology",
    "arm_of",
    "cell",
    "topology_line",
    "markdown_table",
]
