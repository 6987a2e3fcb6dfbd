"""``--plot``: per-position acceptance of every run, one colour per drafter."""

from __future__ import annotations

from pathlib import Path

from ..checkpoint.files import describe
from ..errors import UsageError, printable
from .arguments import check_plot_path
from .report import CheckReport


def plot(report: CheckReport, path: str) -> None:
    """Per-position acceptance of every run, matched solid and mismatched dashed."""
    check_plot_path(path)
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
        fig.savefig(Path(path).expanduser(), dpi=120)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--plot {printable(path, 200)}: cannot write it ({describe(exc)}).", where="--plot"
        ) from exc
    finally:
        plt.close(fig)


__all__ = ["plot"]
