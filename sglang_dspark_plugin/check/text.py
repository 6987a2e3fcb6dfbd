"""The human-readable form of a check report: the table, then one section per conclusion."""

from __future__ import annotations

from ..commands import table_lines
from ..errors import printable
from ..harvest import ENV_VAR
from .goals import targets
from .report import CheckReport, Departure, DrafterInfo, RunRow, WouldServe

COLUMNS = (
    "drafter",
    "strategy",
    "harvest",
    "matched",
    "accept",
    "per-position acceptance",
    "probe",
    "exact",
    "tok/s",
    "speedup",
)


def _short_verdict(verdict: str) -> str:
    # the table column is narrow: the probe's own verdicts, abbreviated
    from ..probe.offsets import ALIGNED, EARLY, INCONCLUSIVE, LATE

    short = {
        ALIGNED: "aligned",
        INCONCLUSIVE: "inconclusive",
        LATE: "late: looks dspark",
        EARLY: "early: looks dflash",
    }
    return short.get(verdict, "neither")


def _row(r: RunRow, ar: float) -> tuple[str, ...]:
    return (
        r.drafter,
        r.drafter_strategy or "?",
        r.harvest.name(),
        "yes" if r.matched else "no",
        f"{r.accept_length:.2f}",
        " ".join(f"{p:.2f}" for p in r.per_position),
        _short_verdict(r.probe_verdict),
        _exact_cell(r),
        f"{r.tokens_per_s:.1f}",
        f"{r.tokens_per_s / ar:.2f}x" if ar else "-",
    )


def _exact_cell(r: RunRow) -> str:
    if r.errors:
        return "NO"
    return f"ties {len(r.near_ties)}" if r.near_ties else "yes"


def _table(report: CheckReport) -> list[str]:
    s, ar = report.settings, report.ar_tokens_per_s
    rows = [_row(r, ar) for r in report.runs]
    rows.append(("autoregressive", "", "", "", "1.00", "", "", "yes", f"{ar:.1f}", "1.00x"))
    return [
        f"dspark-harvest check: target {s.target}",
        f"  device {s.device}, {s.dtype}, {s.prompts} prompts x {s.max_new_tokens} new tokens, "
        f"{s.threads} thread(s), temperature 0, measured in {s.wall_s:.1f} s",
        "",
        *table_lines(COLUMNS, rows),
    ]


def _heads_text(drafter: DrafterInfo) -> str:
    """One line on a drafter's DSpark heads."""
    markov, confidence = drafter.markov_head, drafter.confidence_head
    text = (
        f"Markov head {markov.type}, rank {markov.rank}: drafts row by row, each biased by the previous"
        if markov
        else "no Markov head"
    )
    if confidence:
        features = " with the Markov features" if confidence.with_markov else ""
        text += f"; confidence head{features}, loaded and unused: every draft is verified"
    return text


def _heads(report: CheckReport) -> list[str]:
    heads = [d for d in report.drafters if d.markov_head or d.confidence_head]
    return ["", "DSpark heads:"] + [f"  {d.drafter}: {_heads_text(d)}" for d in heads] if heads else []


def _where(r: RunRow, d: Departure) -> str:
    return (
        f"    {r.drafter} / {r.harvest.name()} harvest: prompt {d.prompt}, new token {d.position}: "
        f"{d.token} instead of {d.expected}, float32 margin {d.margin:.4g} "
        f"{'<=' if d.near_tie else '>'} tolerance {d.tolerance:.4g}"
    )


def _exactness(report: CheckReport) -> list[str]:
    lines: list[str] = []
    dtype, ties, errors = report.settings.dtype, report.near_ties, report.errors
    if ties:
        lines += [
            "",
            f"near-tie flips: {len(ties)} ({dtype}): an output left the target's greedy choice where its two "
            f"best logits are closer than {dtype} can separate (float32 margin within the measured "
            "rounding); from there on it is another text, judged on its own prefix. Reported, not failed:",
            *(_where(r, d) for r, d in ties),
        ]
    if errors:
        lines += [
            "",
            f"NOT EXACT: {len(errors)} token(s) left the target's greedy choice by a clear margin, more than "
            f"{dtype} rounding explains: a verify or harvest bug. Please report it with this output.",
            *(_where(r, d) for r, d in errors),
        ]
    return lines


def _probes(report: CheckReport) -> list[str]:
    return [
        "",
        "offset probe (drafts compared with the target's tokens at their own position and both neighbours):",
        *(f"  {p.drafter} / {p.harvest.name()} harvest: {p.verdict} ({p.reason})" for p in report.probes),
    ]


def _recommendations(report: CheckReport) -> list[str]:
    lines = ["", "recommendation:"]
    for rec in report.recommendations:
        c = rec.comparison
        lines.append(f"  {rec.drafter}: {rec.advice}")
        lines.append(f"    verdict {rec.verdict}: {c.reason}")
        if rec.sglang_cannot_serve:
            lines.append(f"  {rec.drafter}: sglang cannot serve this: {rec.sglang_cannot_serve}")
    return lines


def _releases_text(item: WouldServe) -> str:
    serving = [r for r in item.releases if r.harvest]
    text = f" on sglang {', '.join(r.version for r in serving)}" if serving else ""
    needs = sorted({r.needs for r in serving if r.needs})
    text += "".join(f" (with {flag} N)" for flag in needs)
    if serving:  # a refusal on every release is the line itself
        text += "".join(f"; sglang {r.version} refuses it: {r.refused}" for r in item.releases if r.refused)
    return text


def _served(report: CheckReport) -> list[str]:
    if not report.served:
        return []
    env = report.served[0].env_value
    setting = f"{ENV_VAR}={env!r}" if env is not None else f"{ENV_VAR} unset"
    lines = ["", f"served by --speculative-algorithm DSPARK_HARVEST now ({setting}; the launch's own plan):"]
    for item in report.served:
        what = (
            f"{item.harvest} harvest (source: {item.source})"
            if item.refused is None
            else f"refused at startup: {item.refused}"
        )
        lines.append(f"  {item.drafter}: {what}{_releases_text(item)}")
    return lines


def _targets(report: CheckReport) -> list[str]:
    if not report.settings.embedded:  # the embedded models' promise, not a verdict on any drafter
        return []
    return ["", "targets:"] + [f"  [{'met' if ok else 'MISSED'}] {text}" for text, ok in targets(report)]


def _verdict(report: CheckReport) -> list[str]:
    lines = ["", f"verdict: {report.verdict} (exit code {report.exit_code})"]
    overrides = [r for r in report.recommendations if r.override]
    lines += [f"  override for {r.drafter}: {r.override}" for r in overrides]
    return lines


def format_report(report: CheckReport) -> str:
    """The human-readable table and notes."""
    sections = (_table, _heads, _exactness, _probes, _recommendations, _served, _targets, _verdict)
    lines = [line for section in sections for line in section(report)]
    return "\n".join(printable(line) for line in lines)


__all__ = ["format_report"]
