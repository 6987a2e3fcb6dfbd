"""Other engines' acceptance lines: sglang's own decode log line and vLLM's ``SpecDecoding metrics:`` line,
read into the same kind of verdict as the plugin's rounds.

Most DFlash-family drafters are served by sglang's builtin DFLASH / DSPARK or by vLLM, whose logs hold
no per-round line: each writes one line per interval with the interval's mean.

- **sglang** (both 0.5.17 and 0.5.23; ``managers/scheduler_components/metrics_reporter.py:757, 798`` on
  0.5.17, ``:962, 1005`` on 0.5.23): every ``--decode-log-interval`` decode batches (40 by default),
  ``Decode batch, #running-req: R, #token: T, token usage: U, accept len: L, accept rate: A, ...``.
  ``L`` is accepted tokens (bonus included) per request-round over the interval, ``A`` correct drafts
  per drafted token. The line states neither the interval's request-rounds (the report takes the
  interval in batches times ``R``, an estimate) nor gamma (``(L - 1) / A``, inferred), nor any
  per-position rate. ``T / R`` is the tokens the pool holds per running request: the context length,
  approximately, so the rule of a fall with context length applies.
- **vLLM** (0.34.0, ``vllm/v1/spec_decode/metrics.py:120-136``, the same text since v0.9):
  ``SpecDecoding metrics: Mean acceptance length: M, Accepted throughput: ..., Drafted throughput: ...,
  Accepted: A tokens, Drafted: D tokens, Per-position acceptance rate: r0, r1, ..., Avg Draft acceptance
  rate: P%``. ``M`` = 1 + A / drafts, rate k = drafts with more than k accepted / drafts: the plugin's
  own conventions. Drafts = ``D`` / the positions listed (vLLM drafts every position each step).

The trust rules are the plugin's lines' (``lines``): a prefix of at most ``MAX_PREFIX`` characters with
no quote, the whole line in its exact form, numbers of bounded length, and a line whose numbers disagree
with each other rejected (``rejected``), never fatal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ..telemetry.context import bucket_names, context_fall
from ..telemetry.settings import DEFAULT_CONTEXT_BUCKETS
from .groups import Timeline
from .lines import MAX_PREFIX

SGLANG_MARKER = "accept len: "
VLLM_MARKER = "SpecDecoding metrics: "
MARKERS = (SGLANG_MARKER, VLLM_MARKER)
DEFAULT_DECODE_LOG_INTERVAL = 40
"""sglang's ``--decode-log-interval`` default (both releases): decode batches per decode log line."""
MIN_JUDGED_REQUEST_ROUNDS = 50
"""Request-rounds a group needs before its acceptance is judged at all (the plugin's own bar); fewer
is ``inconclusive``."""
DEFAULT_THRESHOLD = 1.6
"""The plugin's alarm threshold, capped at 1 + gamma / 2 where gamma is known (a narrow window's
healthy mean can sit below 1.6)."""
MISMATCH_CONTINUATION = 0.4
"""A collapsed profile has a harvest mismatch's shape when drafts past the first are seldom accepted
after the one before them: continuation (rate k+1 summed over rate k) below this. Measured on the
reference engine's embedded drafters (``dspark-harvest check``, 8 prompts x 64 tokens): every matched
arm 0.75-0.79, every mismatched arm 0.00-0.34 (tests/logreport/test_report_engines.py reruns four arms).
A drafter whose drafts sit one position off is right only where the text repeats itself, and a repeat
seldom lasts two positions."""

_PREFIX = rf"(?P<prefix>[^'\"]{{0,{MAX_PREFIX}}}?)"
_DP = re.compile(r"\bDP(\d{1,6})\b")
SGLANG_DECODE = re.compile(
    _PREFIX + r"Decode batch(?: \[\d{1,15}\])?, #running-req: (?P<running>\d{1,9}), "
    r"(?P<usage>[^\n'\"]{0,400}?)accept len: (?P<accept_len>\d{1,6}\.\d\d), "
    r"accept rate: (?P<accept_rate>\d{1,6}\.\d\d), [^\n'\"]{0,4000}#queue-req: \d{1,12}"
    r"(?:, [^\n'\"]{0,4000})?$"
)
_TOKENS = re.compile(r"(?:^|, )#(?:full )?token: (\d{1,15}), ")
VLLM_SPEC = re.compile(
    _PREFIX + r"SpecDecoding metrics: Mean acceptance length: (?P<mean>\d{1,6}\.\d\d), "
    r"Accepted throughput: [\d.]{1,24} tokens/s, Drafted throughput: [\d.]{1,24} tokens/s, "
    r"Accepted: (?P<accepted>\d{1,18}) tokens, Drafted: (?P<drafted>\d{1,18}) tokens, "
    r"Per-position acceptance rate: (?P<rates>\d{1,3}\.\d{3}(?:, \d{1,3}\.\d{3}){0,4095}), "
    r"Avg Draft acceptance rate: (?:\d{1,6}\.\d|nan)%$"
)
ENGINE_NAMES = {"sglang": "sglang decode log (accept len)", "vllm": "vLLM SpecDecoding metrics"}


@dataclass(frozen=True)
class Window:
    """One engine line: an interval's acceptance."""

    engine: str  # sglang | vllm
    dp: int | None
    request_rounds: int  # vLLM: drafts; sglang: interval x running requests (an estimate)
    mean: float  # accepted tokens per request-round, bonus included
    gamma: int | None  # vLLM: the positions listed (sglang's lines do not say)
    rates: tuple[float, ...] | None  # vLLM's per-position rates
    context: int | None  # sglang: the pool's tokens per running request
    accept_rate: float | None = None  # sglang: correct drafts per drafted token


class Rejected(ValueError):
    """A line in an engine's exact form whose numbers disagree with each other."""


def parse(text: str, decode_log_interval: int) -> Window | None:
    """The engine line ``text`` (stripped) as a ``Window``; ``None`` when it is no engine's line (or its
    text follows a quote: a request's text); ``Rejected`` when its numbers cannot both hold."""
    if SGLANG_MARKER in text:
        found = SGLANG_DECODE.match(text)
        if found is None or found.start("prefix") != 0:
            return None
        running = int(found.group("running"))
        mean, rate = float(found.group("accept_len")), float(found.group("accept_rate"))
        if running < 1 or mean < 1.0 or rate > 1.0:
            raise Rejected(f"accept len {mean:.2f} with accept rate {rate:.2f} over {running} requests")
        tokens = _TOKENS.search(", " + found.group("usage"))
        dp = _DP.search(found.group("prefix"))
        return Window(
            "sglang",
            None if dp is None else int(dp.group(1)),
            running * decode_log_interval,
            mean,
            None,
            None,
            None if tokens is None else int(tokens.group(1)) // running,
            rate,
        )
    found = VLLM_SPEC.match(text)
    if found is None or found.start("prefix") != 0:
        return None
    rates = tuple(float(r) for r in found.group("rates").split(", "))
    accepted, drafted = int(found.group("accepted")), int(found.group("drafted"))
    drafts = drafted // len(rates)
    mean = float(found.group("mean"))
    if (
        drafts < 1
        or accepted > drafted
        or any(a < b for a, b in zip(rates[:-1], rates[1:], strict=True))
        or rates[0] > 1.0
    ):
        raise Rejected(f"{accepted} accepted of {drafted} drafted over {len(rates)} positions")
    slack = 0.0005 * len(rates) + 0.006  # each figure rounded: rates to 0.001, the mean to 0.01
    if abs(1.0 + accepted / drafts - mean) > 0.006 + 1.0 / drafts or abs(sum(rates) - (mean - 1.0)) > slack:
        raise Rejected(f"mean {mean:.2f} against {accepted} accepted over {drafts} drafts and rates {rates}")
    return Window("vllm", None, drafts, mean, len(rates), rates, None)


@dataclass
class EngineGroup:
    """One engine's lines (per DP rank where the prefix names one), summed; bounded whatever the log."""

    engine: str
    dp: int | None
    windows: int = 0
    rejected: int = 0
    request_rounds: int = 0
    accepted: float = 0.0  # accepted drafts (tokens minus the bonus), summed over request-rounds
    gamma: int | None = None
    rated: float = 0.0  # sglang: accept rate, summed over request-rounds (gamma = accepted / rated)
    positions: list[float] = field(default_factory=list)  # per position: accepted, summed over drafts
    position_drafts: int = 0
    by_context: list[list[float]] = field(  # per bucket: [request-rounds, accepted drafts]
        default_factory=lambda: [[0, 0.0] for _ in bucket_names(DEFAULT_CONTEXT_BUCKETS)]
    )
    timeline: Timeline = field(default_factory=Timeline)
    first_line: int | None = None

    def add(self, w: Window, number: int) -> None:
        """One window, read at line ``number``."""
        self.windows += 1
        self.first_line = number if self.first_line is None else self.first_line
        self.request_rounds += w.request_rounds
        self.accepted += (w.mean - 1.0) * w.request_rounds
        self.timeline.add(self.windows, w.request_rounds, round(w.mean * w.request_rounds))
        if w.gamma is not None:
            self.gamma = w.gamma if self.gamma is None else max(self.gamma, w.gamma)
        elif w.accept_rate is not None:
            self.rated += w.accept_rate * w.request_rounds
            if self.rated > 0.0:  # pooled: one line's two rounded figures give a noisy ratio
                self.gamma = max(1, round(self.accepted / self.rated))
        if w.rates is not None:
            if len(self.positions) < len(w.rates):
                self.positions += [0.0] * (len(w.rates) - len(self.positions))
            for k, rate in enumerate(w.rates):
                self.positions[k] += rate * w.request_rounds
            self.position_drafts += w.request_rounds
        if w.context is not None:
            bucket = self.by_context[sum(w.context > b for b in DEFAULT_CONTEXT_BUCKETS)]
            bucket[0] += w.request_rounds
            bucket[1] += (w.mean - 1.0) * w.request_rounds

    def mean(self) -> float | None:
        return None if self.request_rounds == 0 else 1.0 + self.accepted / self.request_rounds

    def per_position(self) -> list[float] | None:
        return None if not self.position_drafts else [p / self.position_drafts for p in self.positions]

    def threshold(self) -> float:
        return DEFAULT_THRESHOLD if self.gamma is None else min(DEFAULT_THRESHOLD, 1.0 + self.gamma / 2.0)


def continuation(rates: list[float]) -> float | None:
    """Of the drafts accepted at a position, the share whose next position was accepted too (pooled over
    the positions); ``None`` with one position or nothing accepted before the last."""
    before = sum(rates[:-1])
    return None if len(rates) < 2 or before <= 0.0 else sum(rates[1:]) / before


def verdict(g: EngineGroup) -> tuple[str, str]:
    """``(kind, why)``: ``inconclusive`` (too few request-rounds), ``collapse`` (a fall with context
    length by the plugin's one rule, else the mean below the threshold), or ``healthy``."""
    mean = g.mean()
    if mean is None or g.request_rounds < MIN_JUDGED_REQUEST_ROUNDS:
        return "inconclusive", (
            f"{g.request_rounds} request-rounds over {g.windows} line(s): fewer than "
            f"{MIN_JUDGED_REQUEST_ROUNDS} to judge"
        )
    threshold = g.threshold()
    names = bucket_names(DEFAULT_CONTEXT_BUCKETS)
    fall = context_fall([(n, int(r), a) for n, (r, a) in zip(names, g.by_context, strict=True)], threshold)
    if fall is not None:  # the more specific cause first: healthy short contexts rule out the harvest
        bound, long, short = fall
        return "collapse", (
            f"acceptance falls with context length only: past about {bound} tokens per request the mean "
            f"accept length is {long:.2f} against {short:.2f} below (the drafter's training context, not "
            "the harvest: a harvest mismatch collapses every context)"
        )
    if mean < threshold:
        return (
            "collapse",
            f"mean accept length {mean:.2f} < {threshold:.2f} over the logged lines; " + _cause(g),
        )
    return "healthy", f"mean accept length {mean:.2f} >= {threshold:.2f}"


NEXT_STEP = (
    "check the drafter before anything else: `dspark-harvest check --draft DRAFT --target TARGET` "
    "measures both harvests, `dspark-harvest declare DRAFT --out DIR` writes the config keys the engine reads"
)


def _cause(g: EngineGroup) -> str:
    rates = g.per_position()
    if rates is None:
        return (
            "the line carries no per-position rates, so a harvest mismatch cannot be told from a weak "
            f"drafter here: {NEXT_STEP}"
        )
    kept = continuation(rates)
    if kept is None:
        return (
            "no draft accepted at any position: a drafter that fits no offset, or the wrong target; "
            + NEXT_STEP
        )
    if kept < MISMATCH_CONTINUATION:
        return (
            f"the shape of a harvest mismatch: the first draft is accepted at {rates[0]:.2f}, but only "
            f"{kept:.2f} of accepted drafts are followed by an accepted next one (below "
            f"{MISMATCH_CONTINUATION:.1f}; aligned drafters keep 0.6-0.8): drafts one position off fit only "
            "where the text repeats; " + NEXT_STEP
        )
    return (
        f"accepted drafts go on at {kept:.2f} (not a harvest mismatch's shape): a weak drafter, the wrong "
        "target or a workload it was not trained on"
    )


def group_json(g: EngineGroup) -> dict[str, Any]:
    """The group's part of the ``--json`` report."""
    kind, why = verdict(g)
    rates = g.per_position()
    names = bucket_names(DEFAULT_CONTEXT_BUCKETS)
    return {
        "engine": g.engine,
        "source": ENGINE_NAMES[g.engine],
        "dp": g.dp,
        "lines": g.windows,
        "rejected_lines": g.rejected,
        "request_rounds": g.request_rounds,
        "request_rounds_estimated": g.engine == "sglang",
        "gamma": g.gamma,
        "gamma_from": "listed positions"
        if g.engine == "vllm"
        else "inferred: (accept len - 1) / accept rate",
        "mean_accept_length": g.mean(),
        "per_position": rates,
        "continuation": None if rates is None else continuation(rates),
        "over_time": [  # by the engine's line (its ordinal in the group): lines state no round
            {
                "line": b["round"],
                "request_rounds": b["request_rounds"],
                "mean_accept_length": b["mean_accept_length"],
            }
            for b in g.timeline.to_json()
        ],
        "by_context": [
            {"bucket": n, "mean_accept_length": 1.0 + a / r, "request_rounds": int(r)}
            for n, (r, a) in zip(names, g.by_context, strict=True)
            if r
        ],
        "alarm_threshold": g.threshold(),
        "verdict": kind,
        "why": why,
    }


__all__ = [
    "MARKERS",
    "DEFAULT_DECODE_LOG_INTERVAL",
    "EngineGroup",
    "Rejected",
    "Window",
    "parse",
    "verdict",
    "group_json",
    "continuation",
]
