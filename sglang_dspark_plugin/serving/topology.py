"""Which distributed topologies each arm is served in, per sglang release (sglang-free).

``DSPARK_HARVEST`` is resolved as its builtin before sglang's own speculative handling, so a topology
is served exactly where that builtin serves it; the plugin adds refusals only where the builtin would
serve the wrong convention or fail later (a builtin under PD where the release builds no
prefill->decode draft state for it, ``refuse_disaggregation``; the mask-fill DSpark arm where its DSPARK
has no mask-fill layout). Each outcome derives from the release's row (``outcomes``): its features and
the builtins' own refusals it records. The rows are measured, not read: ``tests/sglang`` resolves every
cell through the real argument pipeline of each CI release, for the builtin and for the plugin, and
fails when an outcome differs. ``doctor``, the startup lines and docs/sglang.md print it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..releases import RELEASES, Release, first_release, spans
from .layout import ARMS as _ARMS
from .layout import Arm
from .refusal import ALGORITHM, ServeRefusal

if TYPE_CHECKING:
    from .request import LaunchRequest, SglangSupport

ARMS = tuple(arm.name for arm in _ARMS)
"""The arms' names (``layout.ARMS``), the table's rows per release."""


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
PD_TOPOLOGIES = ("PD prefill", "PD decode")


def outcomes(release: Release, arm: Arm) -> dict[str, str]:
    """Each topology of ``arm`` on ``release``: ``served`` or ``refused: <reason>``, from its row (the
    mask-fill layout, the builtins under disaggregation, the builtin's other refusals)."""
    if arm.mask_fill_dspark and not release.mask_fill_dspark:
        first = first_release(lambda r: r.mask_fill_dspark)
        why = (
            f"refused: sglang {release.version}'s DSPARK has no mask-fill layout (sample_from_anchor, "
            f"from {first}), its DFLASH no Markov head"
        )
        return {t.name: why for t in TOPOLOGIES}
    cells = {t.name: SERVED for t in TOPOLOGIES}
    if arm.builtin not in release.pd_builtins:
        no_pd = f"refused: sglang {release.version} builds no prefill->decode draft state for {arm.builtin}"
        cells |= dict.fromkeys(PD_TOPOLOGIES, no_pd)
    return cells | {t: f"refused: {why}" for b, t, why in release.refused_topologies if b == arm.builtin}


MEASURED: dict[str, dict[str, dict[str, str]]] = {
    r.version: {arm.name: outcomes(r, arm) for arm in _ARMS} for r in RELEASES if r.tested
}
"""Per tested release, arm and topology: ``served`` or ``refused: <reason>`` (DP attention also needs
``--enable-dp-lm-head`` on both builtins; the builtin refuses it otherwise, and so does the plugin).
Measured on the releases CI tests, derived from their rows of the release table."""


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
            f"{', '.join(MEASURED)}); sglang's own {_builtin_of(arm)} checks decide"
        )
    parts = [f"{t.name} {MEASURED[version][arm][t.name]}" for t in TOPOLOGIES]
    return f"topologies for the {arm} arm on sglang {version}: " + "; ".join(parts)


def _builtin_of(arm: str) -> str:
    return next(a.builtin for a in _ARMS if a.name == arm)


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


def refuse_disaggregation(request: LaunchRequest, layout: Arm, support: SglangSupport) -> None:
    """Prefill-decode disaggregation where the builtin serves it; refused, with sglang's reason, where
    this sglang builds no prefill->decode draft state for that builtin (it would fail on the first
    transferred request, not at launch)."""
    mode = request.disaggregation_mode
    if mode in (None, "null") or layout.builtin in support.disaggregation:
        return
    raise ServeRefusal(
        f"{ALGORITHM}: --disaggregation-mode {mode} with a draft served as {layout.builtin}: sglang "
        f"{support.version} builds the prefill->decode draft state (SpeculativeAlgorithm."
        f"build_disagg_draft_input) for {', '.join(support.disaggregation) or 'no'} DFlash-family "
        f"builtin only, so the builtin {layout.builtin} itself would fail on the first transferred "
        "request. Serve without --disaggregation-mode, or with an sglang whose "
        f"{layout.builtin} supports it (the builtins served under disaggregation: {_pd_spans()}).",
        kind="unsupported",
        where="--disaggregation-mode",
    )


def _pd_spans() -> str:
    """``0.5.17 to 0.5.19 DSPARK; 0.5.20 on DFLASH and DSPARK``, from the release table."""
    return "; ".join(f"{span} {' and '.join(b)}" for span, b in spans(lambda r: r.pd_builtins))


__all__ = [
    "ARMS",
    "TOPOLOGIES",
    "MEASURED",
    "PD_TOPOLOGIES",
    "SERVED",
    "SERVED_ON_CPU",
    "Topology",
    "outcomes",
    "refuse_disaggregation",
    "cell",
    "topology_line",
    "markdown_table",
]
