"""The report's text form and its ``--plot``: accept length over time with the alarms marked, the
per-position acceptance, one line per group."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError, printable
from ..util.figure import check_figure_path, require_matplotlib, save_figure
from .lines import MAX_LINE_BYTES

TEXT_BINS = 10
SHOWN = 600
"""The most characters of a log's own text (an alarm's cause, a probe message) one report line repeats,
escaped: a log line cannot move the terminal's cursor or forge a line of the report."""
PLOTTED_GROUPS = 16
"""Groups drawn by ``--plot`` (the worst first, then by DP rank); the text and JSON list every group."""


def text(report: dict[str, Any]) -> str:
    """The text form of a ``--json`` report."""
    files = len(report["files"])
    plural = "s" if files != 1 else ""
    lines = [
        f"read: {files} file{plural}, {report['lines']} lines, {report['plugin_lines']} of "
        f"the plugin's ({report['ignored_quoted']} ignored as quoted request text, {report['malformed']} "
        "malformed"
        + (f", {report['overlong']} over {MAX_LINE_BYTES} bytes, skipped" if report.get("overlong") else "")
        + ")"
        + (
            f", {report['engine_lines']} of other engines' (sglang's decode lines, vLLM's spec metrics)"
            if report.get("engine_lines")
            else ""
        )
    ]
    for group in report["groups"]:
        lines += ["", *_group(group)]
    for group in report.get("engines", []):
        lines += ["", *_engine(group)]
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
        f"  alarms: {g['alarms_logged_total']} logged, {g['alarms_replayed']} by the alarm rule replayed",
    ]
    out += [
        f"    line {a['line']}: {a['window_mean']:.2f} < {a['threshold']:.2f}: {printable(a['cause'], SHOWN)}"
        for a in g["alarms_logged"][-5:]
    ]
    if g["context_alarms"]:
        out.append(f"  context-length alarms: {len(g['context_alarms'])} logged")
        out += [f"    line {a['line']}: {printable(a['message'], SHOWN)}" for a in g["context_alarms"][-3:]]
    for p in g["probe"][-3:]:
        state = "confirmed" if p["confirmed"] else "NOT confirmed by its own numbers"
        out.append(f"  probe (line {p['line']}, {state}): {printable(p['message'], SHOWN)}")
    if g["swept_requests"] is not None:
        out.append(
            f"  live state (last summary): {g['held_requests_last']} requests held by the probe, "
            f"{g['swept_requests']} dropped by its stale sweep"
        )
    requests = g.get("per_request") or {}
    if requests.get("requests"):
        spread = ", ".join(
            f"{b['accept_length']}: {b['requests']}" for b in requests["distribution"] if b["requests"]
        )
        out.append(
            f"  requests: {requests['requests']} finished, mean accept length "
            f"{requests['mean_accept_length']:.2f}; by accept length {spread}"
        )
        worst = ", ".join(
            f"{printable(w['rid'], 40)} {w['accept_length']:.2f} ({w['rounds']} rounds, line {w['line']})"
            for w in requests["worst"][:5]
        )
        if worst:
            out.append(f"  worst requests: {worst}")
    if g["host_cost_fraction"] is not None:
        thread = g["host_cost_thread_fraction"]
        beside = "" if thread is None else f" (and its queue's thread: at most {100 * thread:.3f}%)"
        out.append(f"  host cost: at most {100 * g['host_cost_fraction']:.3f}% of a round{beside}")
    out.append(f"  verdict: {g['verdict']}: {g['why']}")
    return out


def _engine(g: dict[str, Any]) -> list[str]:
    """An engine's own lines (sglang's decode lines, vLLM's spec metrics): what they state, the verdict."""
    name = g["source"] + ("" if g["dp"] is None else f" dp={g['dp']}")
    mean = g["mean_accept_length"]
    estimated = (
        " (estimated: lines x decode batches x running requests)" if g["request_rounds_estimated"] else ""
    )
    out = [
        f"{name}: {g['lines']} lines, {g['rejected_lines']} rejected, gamma "
        + ("n/a" if g["gamma"] is None else f"{g['gamma']} ({g['gamma_from']})"),
        f"  request-rounds {g['request_rounds']}{estimated}, mean accept length "
        + ("n/a" if mean is None else f"{mean:.2f}"),
        "  per position: "
        + (
            " ".join(f"{r:.2f}" for r in g["per_position"])
            if g["per_position"]
            else "n/a (not in these lines)"
        ),
        "  over time (line: mean): "
        + (_over_time([{**b, "round": b["line"]} for b in g["over_time"]]) or "n/a"),
        "  by context length (tokens per running request): "
        + (", ".join(f"{b['bucket']}: {b['mean_accept_length']:.2f}" for b in g["by_context"]) or "n/a"),
        f"  verdict: {g['verdict']}: {g['why']}",
    ]
    return out


def _plotted(groups: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At most ``PLOTTED_GROUPS`` groups: the misaligned, then the collapsed, then the rest, by rank."""
    order = {"misaligned": 0, "collapse": 1}
    ranked = sorted(groups, key=lambda g: (order.get(g["verdict"], 2), -1 if g["dp"] is None else g["dp"]))
    return sorted(ranked[:PLOTTED_GROUPS], key=lambda g: -1 if g["dp"] is None else g["dp"])


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


def check_plot(path: str, inputs: list[str], replace: bool) -> None:
    """Refuse, before any log is read, a ``--plot`` that could not or must not be written."""
    if not path.lower().endswith(".png"):
        raise UsageError(f"--plot {printable(path, 120)}: name a .png file.", where="--plot")
    require_matplotlib()
    check_figure_path(path, inputs=inputs, replace=replace)


def plot(report: dict[str, Any], path: str, replace: bool = False) -> None:
    """Accept length over time (alarms marked), per-position acceptance: one colour per group."""
    check_plot(path, report["files"], replace)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (time_ax, pos_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, g in enumerate(_plotted(report["groups"])):
        color, label = f"C{i}", "all" if g["dp"] is None else f"dp={g['dp']}"
        xs = [b["round"] for b in g["over_time"]]
        time_ax.plot(xs, [b["mean_accept_length"] for b in g["over_time"]], "-", color=color, label=label)
        for at in g["alarm_rounds"]:
            time_ax.axvline(at, color=color, lw=0.8, ls="--")
        if g["alarm_threshold"] is not None:
            time_ax.axhline(g["alarm_threshold"], color=color, lw=0.6, ls=":")
        rates = g["per_position"] or []
        pos_ax.plot(range(1, len(rates) + 1), rates, "-o", color=color, label=f"{label}: {g['verdict']}")
    shown = len(_plotted(report["groups"]))
    for i, g in enumerate(report.get("engines", [])[: max(0, PLOTTED_GROUPS - shown)], shown):
        color, label = f"C{i}", g["engine"] + ("" if g["dp"] is None else f" dp={g['dp']}")
        every = report.get("decode_log_interval", 1) if g["engine"] == "sglang" else 1
        xs = [b["line"] * every for b in g["over_time"]]  # sglang: a line every `every` decode batches
        time_ax.plot(xs, [b["mean_accept_length"] for b in g["over_time"]], "--", color=color, label=label)
        time_ax.axhline(g["alarm_threshold"], color=color, lw=0.6, ls=":")
        rates = g["per_position"] or []  # sglang's lines state none
        if rates:
            pos_ax.plot(range(1, len(rates) + 1), rates, "--o", color=color, label=f"{label}: {g['verdict']}")
    time_ax.set_xlabel("round (an engine's lines: sglang's at their decode batch, vLLM's by line)")
    time_ax.set_ylabel("mean accept length")
    hidden = len(report["groups"]) + len(report.get("engines", [])) - PLOTTED_GROUPS
    time_ax.set_title(
        "accept length over time (dashed: alarms; dotted: threshold)"
        + (f"\n{hidden} more groups not drawn (the worst are)" if hidden > 0 else "")
    )
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
        save_figure(fig, path, dpi=110, inputs=report["files"], replace=replace)
    finally:
        plt.close(fig)


__all__ = ["text", "plot", "check_plot"]
