"""``--plot``: per-position acceptance of every run, one colour per drafter."""

from __future__ import annotations

from ..util.figure import save_figure
from .arguments import check_plot_path
from .report import CheckReport


def plot(report: CheckReport, path: str, replace: bool = False) -> None:
    """Per-position acceptance of every run, matched solid and mismatched dashed."""
    check_plot_path(path, replace)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors: dict[str, str] = {}  # one colour per drafter, so its two harvests pair up
    for r in report.runs:
        color = colors.setdefault(r.drafter, f"C{len(colors)}")
        xs = range(1, len(r.per_position) + 1)
        label = (
            f"{r.drafter} ({r.drafter_strategy or '?'}) / {r.harvest.name()} harvest: "
            f"accept {r.accept_length:.2f}"
        )
        ax.plot(xs, list(r.per_position), "-o" if r.matched else "--x", color=color, label=label)
    ax.set_xlabel("draft position j (draft j predicts anchor + j)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.02)
    ax.set_title("dspark-harvest check: per-position acceptance (solid = matched harvest)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120, replace=replace)
    finally:
        plt.close(fig)


__all__ = ["plot"]
