"""The report's text form and its ``--plot``: accept length over time with the alarms marked, the
per-position acceptance, one line per group."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError, printable

TEXT_BINS = 10


def text(report: dict[str, Any]) -> str:
    """The text form of a ``--json`` report."""
    files = len(report["files"])
    plural = "s" if files != 1 else ""
    lines = [
        f"read: {files} file{plural}, {report['lines']} lines, {report['plugin_lines']} of "
        f"the plugin's ({report['ignored_quoted']} ignored as quoted request text, {report['malformed']} "
        "malformed)"
    ]
    for group in report["groups"]:
        lines += ["", *_group(group)]
    lines += ["", f"verdict: {report['verdict']} (exit {report['exit_code']})"]
    return "\n".join(lines)


def _group(g: dict[str, Any]) -> list[str]:
    name = "group" if g["dp"] is None else f"group dp={g['dp']}"
    mean = g["mean_accept_length"]
    rates = " ".join(f"{r:.2f}" for r in g["per_position"] or [])
    out = [
        f"{name}: harvest {g['harvest']} ({g['source']}), gamma {g['gamma']} ({g['gamma_from']}), "
        f"from {g['from']}",
        f"  rounds {g['rounds']}, request-rounds {g['request_rounds']}, mean accept length "
        + ("n/a" if mean is None else f"{mean:.2f}"),
        f"  per position: {rates or 'n/a'}",
        f"  over time (round: mean): {_over_time(g['over_time']) or 'n/a'}",
        "  by context length (last summary): "
        + (", ".join(f"{b['bucket']}: {b['mean_accept_length']:.2f}" for b in g["by_context"]) or "n/a"),
        f"  restarts {g['restarts']}, rejected lines {g['rejected_lines']}, geometry errors "
        f"{g['geometry_errors']}",
        f"  alarms: {len(g['alarms_logged'])} logged, {g['alarms_replayed']} by the alarm rule replayed",
    ]
    out += [
        f"    line {a['line']}: {a['window_mean']:.2f} < {a['threshold']:.2f}: {a['cause']}"
        for a in g["alarms_logged"][-5:]
    ]
    if g["context_alarms"]:
        out.append(f"  context-length alarms: {len(g['context_alarms'])} logged")
        out += [f"    line {a['line']}: {a['message']}" for a in g["context_alarms"][-3:]]
    for p in g["probe"][-3:]:
        state = "confirmed" if p["confirmed"] else "NOT confirmed by its own numbers"
        out.append(f"  probe (line {p['line']}, {state}): {p['message']}")
    if g["swept_requests"] is not None:
        out.append(
            f"  live state (last summary): {g['held_requests_last']} requests held by the probe, "
            f"{g['swept_requests']} dropped by its stale sweep"
        )
    if g["host_cost_fraction"] is not None:
        out.append(f"  host cost: at most {100 * g['host_cost_fraction']:.3f}% of a round")
    out.append(f"  verdict: {g['verdict']}: {g['why']}")
    return out


def _over_time(bins: list[dict[str, Any]]) -> str:
    """At most ``TEXT_BINS`` request-weighted means, each with the round it starts at."""
    if not bins:
        return ""
    step = -(-len(bins) // TEXT_BINS)
    parts = []
    for i in range(0, len(bins), step):
        chunk = bins[i : i + step]
        weight = sum(b.get("request_rounds", 1) for b in chunk)
        mean = sum(b["mean_accept_length"] * b.get("request_rounds", 1) for b in chunk) / weight
        parts.append(f"{chunk[0]['round']}: {mean:.2f}")
    return ", ".join(parts)


def plot(report: dict[str, Any], path: str) -> None:
    """Accept length over time (alarms marked), per-position acceptance: one colour per group."""
    if not path.lower().endswith(".png"):
        raise UsageError(f"--plot {printable(path, 120)}: name a .png file.", where="--plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, pos_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, g in enumerate(report["groups"]):
        color, label = f"C{i}", "all" if g["dp"] is None else f"dp={g['dp']}"
        xs = [b["round"] for b in g["over_time"]]
        time_ax.plot(xs, [b["mean_accept_length"] for b in g["over_time"]], "-", color=color, label=label)
        for at in g["alarm_rounds"]:
            time_ax.axvline(at, color=color, lw=0.8, ls="--")
        if g["alarm_threshold"] is not None:
            time_ax.axhline(g["alarm_threshold"], color=color, lw=0.6, ls=":")
        rates = g["per_position"] or []
        pos_ax.plot(range(1, len(rates) + 1), rates, "-o", color=color, label=f"{label}: {g['verdict']}")
    time_ax.set_xlabel("round")
    time_ax.set_ylabel("mean accept length")
    time_ax.set_title("accept length over time (dashed: alarms; dotted: threshold)")
    from matplotlib.ticker import MaxNLocator

    pos_ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    pos_ax.set_xlabel("draft position j")
    pos_ax.set_ylabel("acceptance rate")
    pos_ax.set_ylim(0, 1.02)
    pos_ax.set_title("per-position acceptance")
    for ax in (time_ax, pos_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(Path(path).expanduser(), dpi=110)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--plot {printable(path, 120)}: cannot write it: {exc}.", where="--plot") from exc
    finally:
        plt.close(fig)


__all__ = ["text", "plot"]
