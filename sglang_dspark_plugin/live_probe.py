"""The live offset probe: ``check``'s offset probe (``engine.probe``) on the rounds a server runs.

For a sample of verify rounds the probe keeps every draft with its position (draft j of a round
anchored at p is for p+j); once the request has committed the tokens around them, it scores each draft
against the committed token at its own position and both neighbours (offsets 0, +1, -1), as
``engine.probe.ProbeCounts``. ``decide`` names the verdict once decisive: matched, drafts one position
late or early (with the harvest that fixes it), or no offset matches (no harvest to flip).

Plain Python on the host, fed from what sglang already copied to the host per round (``verify_row``;
docs/live-probe.md). Memory is bounded: ``max_requests`` requests, ``max_pending`` sampled rounds each,
and per request only the committed tokens its sampled rounds still need.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import eq
from typing import Any

from . import settings as table
from .engine.probe import EARLY, LATE, ProbeCounts, misalignment, rates_text
from .errors import GeometryError, ProbeMismatchError, SettingsError
from .harvest import ENV_VAR, DsparkHarvest
from .logsafe import safe_logger
from .validation import is_int

logger = safe_logger("sglang_dspark_plugin.probe")

OFFSETS = (0, 1, -1)
"""Own position, one later, one earlier: the order of ``ProbeCounts``' fields."""
MAX_REQUESTS = 1024
"""Requests tracked at once; a sampled round of one more request is skipped (and counted)."""
MAX_PENDING = 16
"""Sampled rounds kept per request (a request has at most gamma + 2 unresolved rounds in flight)."""
STALE_ROUNDS = 256
"""A request absent from this many verify rounds has left (finished, aborted): its state is dropped."""

KINDS = ("matched", "late", "early", "neither", "no-match", "inconclusive")
MATCHED, INCONCLUSIVE = KINDS[0], KINDS[-1]
NO_MATCH = "no offset matches: the drafter does not fit this target or workload; the harvest is not the cause"


@dataclass(frozen=True)
class DecisionRule:
    """When the counts decide (docs/live-probe.md gives the rates these defaults come from).

    A winner needs ``min_compared`` drafts scored at every offset, a rate of at least ``min_rate``, at
    least ``margin`` times the runner-up's rate, and a two-proportion z of at least ``min_z`` over it.
    With ``no_match_compared`` drafts scored and no offset at ``min_rate`` or ``margin`` over the
    runner-up, nothing matches.
    """

    min_compared: int = 400
    margin: float = 1.5
    min_z: float = 5.0
    min_rate: float = 0.05
    no_match_compared: int = 2000


@dataclass(frozen=True)
class LiveVerdict:
    """What the counts say: ``kind`` (one of ``KINDS``), the sentence, and the override if one fixes it."""

    kind: str
    message: str
    counts: ProbeCounts
    override: str | None = None

    @property
    def decisive(self) -> bool:
        return self.kind != INCONCLUSIVE

    @property
    def mismatch(self) -> bool:
        """Decisive and not matched: what ``MEMRA_DSPARK_ON_MISMATCH=fail`` stops the server on."""
        return self.decisive and self.kind != MATCHED

    def to_json(self) -> dict[str, Any]:
        c = self.counts
        return {
            "kind": self.kind,
            "message": self.message,
            "override": self.override,
            "matches": {"own": c.own, "late": c.late, "early": c.early},
            "compared": {"own": c.compared_own, "late": c.compared_late, "early": c.compared_early},
            "rates": c.rates,
        }


def _z(m1: int, n1: int, m2: int, n2: int) -> float:
    """Two-proportion z statistic of m1/n1 over m2/n2 (pooled variance)."""
    pooled = (m1 + m2) / (n1 + n2)
    se = math.sqrt(pooled * (1.0 - pooled) * (1.0 / n1 + 1.0 / n2))
    diff = m1 / n1 - m2 / n2
    return diff / se if se > 0 else (math.inf if diff > 0 else 0.0)


def _named(best: int, harvest: DsparkHarvest, counts: ProbeCounts, tail: str) -> LiveVerdict:
    if best == 0:
        return LiveVerdict(MATCHED, f"{MATCHED}: the drafts match their own positions ({tail})", counts)
    fix = DsparkHarvest.DSPARK if best == 1 else DsparkHarvest.DFLASH
    if harvest is fix:  # one position off under the harvest that would fix it: two rows off
        return LiveVerdict("neither", f"{misalignment(best, harvest)}; no harvest fixes it ({tail})", counts)
    override = f"{ENV_VAR}={fix.name()}"
    sentence = LATE if best == 1 else EARLY
    return LiveVerdict(
        "late" if best == 1 else "early", f"{sentence}; set {override} ({tail})", counts, override
    )


def decide(counts: ProbeCounts, harvest: DsparkHarvest, rule: DecisionRule | None = None) -> LiveVerdict:
    """The verdict on ``counts`` of drafts harvested under ``harvest``, by ``rule`` (the defaults)."""
    rule = rule or DecisionRule()
    matches = (counts.own, counts.late, counts.early)
    compared = (counts.compared_own, counts.compared_late, counts.compared_early)
    scored = min(compared)
    tail = f"{rates_text(counts)}; {scored} drafts scored"
    if scored < rule.min_compared:
        return LiveVerdict(
            INCONCLUSIVE, f"{INCONCLUSIVE}: need {rule.min_compared} drafts scored ({tail})", counts
        )
    rates = [m / n for m, n in zip(matches, compared, strict=True)]
    best, second = sorted(range(3), key=lambda k: (-rates[k], k))[:2]  # a tie goes to the own position
    stands_out = rates[best] >= rule.min_rate and rates[best] >= rule.margin * rates[second]
    if stands_out and _z(matches[best], compared[best], matches[second], compared[second]) >= rule.min_z:
        return _named(OFFSETS[best], harvest, counts, tail)
    if not stands_out and scored >= rule.no_match_compared:
        return LiveVerdict("no-match", f"{NO_MATCH} ({tail})", counts)
    return LiveVerdict(INCONCLUSIVE, f"{INCONCLUSIVE}: no offset stands out yet ({tail})", counts)


@dataclass(frozen=True)
class ProbeSettings:
    """The sampling schedule and what a decisive mismatch does (``MEMRA_DSPARK_PROBE_ROUNDS``,
    ``MEMRA_DSPARK_PROBE_EVERY``, ``MEMRA_DSPARK_ON_MISMATCH``)."""

    rounds: int = table.PROBE_ROUNDS.default  # every round is sampled for the first ``rounds``
    every: int = table.PROBE_EVERY.default  # then 1 in ``every`` (0: none)
    on_mismatch: str = table.ON_MISMATCH.default  # "warn" or "fail"

    def __post_init__(self) -> None:
        for name, setting, ok in (
            ("rounds", table.PROBE_ROUNDS, is_int(self.rounds) and 0 <= self.rounds <= 10**9),
            ("every", table.PROBE_EVERY, is_int(self.every) and 0 <= self.every <= 10**6),
            ("on_mismatch", table.ON_MISMATCH, self.on_mismatch in table.ON_MISMATCH.words),
        ):
            if not ok:
                raise SettingsError(
                    f"ProbeSettings.{name} ({setting.name}) must be {setting.accepted}, "
                    f"got {getattr(self, name)!r}.",
                    where=f"ProbeSettings.{name}",
                )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProbeSettings:
        """The settings from ``environ`` (or the process environment), through the settings table."""
        return cls(
            rounds=table.read_setting(table.PROBE_ROUNDS.name, environ),
            every=table.read_setting(table.PROBE_EVERY.name, environ),
            on_mismatch=table.read_setting(table.ON_MISMATCH.name, environ),
        )


@dataclass(frozen=True)
class VerifyRow:
    """One request's part of a verify round, as the probe reads it.

    ``drafts[j-1]`` is draft j (position anchor+j), ``None`` where the host copy does not carry it;
    ``unseen_rejected``: that draft was rejected, so it differs from the committed token at its own
    position; ``committed``: the tokens the target committed this round (accepted drafts + bonus).
    """

    drafts: tuple[int | None, ...]
    committed: tuple[int, ...]
    unseen_rejected: bool = True


def verify_row(row: Sequence[int], commit_len: int, *, capped: bool = False) -> VerifyRow:
    """Read sglang's output row of one request and round (``gamma + 1`` slots; DFLASH and DSPARK, 0.5.17
    and 0.5.23 alike): slots ``0..gamma-1`` hold drafts 1..gamma except slot ``commit_len - 1``, where
    the bonus token overwrote the first rejected draft; ``row[:commit_len]`` is what was committed.

    ``capped``: sglang's verify cap stopped acceptance (DSPARK's ``block_accept_lens`` above
    ``accept_lens``), so the overwritten draft was not rejected, only not verified."""
    gamma = len(row) - 1
    if not (is_int(commit_len) and 1 <= commit_len <= gamma + 1):
        raise GeometryError(
            f"commit length {commit_len!r} is outside 1..{gamma + 1} for a verify row of {len(row)} slots; "
            "pass sglang's accept_lens entry for this request (accepted drafts + 1).",
            where="verify_row",
        )
    drafts: list[int | None] = list(row[:gamma])
    if commit_len <= gamma:
        drafts[commit_len - 1] = None
    return VerifyRow(tuple(drafts), tuple(row[:commit_len]), unseen_rejected=not capped)


def row_of_round(drafts: Sequence[int], committed: Sequence[int]) -> list[int]:
    """The output row sglang builds for a round with these drafts and committed tokens (``verify_row``'s
    layout): the drafts, a padding slot, the bonus written at slot ``len(committed) - 1``."""
    row = [*drafts, 0]
    row[len(committed) - 1] = committed[-1]
    return row


@dataclass(slots=True)
class _Sample:
    anchor_pos: int
    drafts: tuple[int | None, ...]
    unseen_rejected: bool
    last_needed: int  # the last position its scoring reads: draft gamma at offset +1


@dataclass(slots=True)
class _Request:
    base: int  # position of tokens[0]
    tokens: list[int]  # committed tokens from base on
    pending: deque[_Sample] = field(default_factory=deque)
    last_round: int = 0

    @property
    def next_pos(self) -> int:
        return self.base + len(self.tokens)


class LiveProbe:
    """The probe of one served drafter. Per verify round, the worker calls::

        sampled = probe.begin_round(alarm_low=...)
        for each live request: if probe.wants(rid): probe.observe(rid, anchor_pos, anchor, verify_row(...))
        probe.poll()  # the verdict, the first time it is decisive (logged; raises under ``fail``)

    and ``probe.finish(rid)`` when a request ends.
    """

    def __init__(
        self,
        harvest: DsparkHarvest,
        settings: ProbeSettings | None = None,
        *,
        rule: DecisionRule | None = None,
        max_requests: int = MAX_REQUESTS,
        max_pending: int = MAX_PENDING,
        stale_rounds: int = STALE_ROUNDS,
        dp_tag: str = "",
    ) -> None:
        self.harvest = harvest
        self.settings = settings or ProbeSettings()
        self.rule = rule or DecisionRule()
        self.max_requests, self.max_pending, self.stale_rounds = max_requests, max_pending, stale_rounds
        self.dp_tag = dp_tag
        self.rounds = 0  # verify rounds begun
        self.sampled_rounds = 0
        self.skipped = 0  # sampled request-rounds not kept: the request or pending limit
        self.verdict: LiveVerdict | None = None  # the first decisive verdict
        self._sampled = False
        self._requests: dict[Hashable, _Request] = {}
        self._matches = [0, 0, 0]  # by OFFSETS
        self._compared = [0, 0, 0]

    @property
    def counts(self) -> ProbeCounts:
        """Every draft scored so far, by offset."""
        (own, late, early), (c_own, c_late, c_early) = self._matches, self._compared
        return ProbeCounts(own, late, early, c_own, c_late, c_early)

    def assessment(self) -> LiveVerdict:
        """What the counts say now (``inconclusive`` until decisive): for the alarm and the summary."""
        return decide(self.counts, self.harvest, self.rule)

    def begin_round(self, *, alarm_low: bool = False) -> bool:
        """Start a verify round; whether its drafts are sampled: every round for the first
        ``settings.rounds`` and while ``alarm_low`` (the alarm window is below its threshold), then
        1 in ``settings.every``."""
        index = self.rounds
        self.rounds += 1
        if index % self.stale_rounds == 0:
            self._sweep()
        rounds, every = self.settings.rounds, self.settings.every
        self._sampled = index < rounds or alarm_low or (every > 0 and (index - rounds) % every == 0)
        self.sampled_rounds += self._sampled
        return self._sampled

    def wants(self, rid: Hashable) -> bool:
        """Whether ``observe`` needs ``rid``'s row this round: sampled, or ``rid`` has rounds to score."""
        return self._sampled or rid in self._requests

    def observe(self, rid: Hashable, anchor_pos: int, anchor: int, row: VerifyRow) -> None:
        """``rid``'s part of the current round: the anchor (its last committed token, at ``anchor_pos``)
        and what ``verify_row`` read. Scores every sampled round the new tokens complete."""
        request = self._requests.get(rid)
        if request is not None and request.next_pos != anchor_pos + 1:
            self.finish(rid)  # restarted (a retraction re-prefills): score what is known, start over
            request = None
        if request is None:
            if not self._sampled:
                return
            if len(self._requests) >= self.max_requests:
                self.skipped += 1
                return
            request = self._requests[rid] = _Request(anchor_pos, [anchor])
        if self._sampled:
            if len(request.pending) < self.max_pending:
                request.pending.append(
                    _Sample(anchor_pos, row.drafts, row.unseen_rejected, anchor_pos + len(row.drafts) + 1)
                )
            else:
                self.skipped += 1
        request.tokens.extend(row.committed)
        request.last_round = self.rounds
        self._resolve(rid, request)

    def finish(self, rid: Hashable) -> None:
        """``rid`` has ended: score its pending drafts where the committed tokens reach, drop its state."""
        request = self._requests.pop(rid, None)
        if request is not None:
            for sample in request.pending:
                self._score(sample, request)

    def poll(self) -> LiveVerdict | None:
        """The verdict, the first time the counts are decisive (logged then; under
        ``MEMRA_DSPARK_ON_MISMATCH=fail`` a mismatch raises ``ProbeMismatchError``); else ``None``."""
        if self.verdict is not None:
            return None
        found = self.assessment()
        if not found.decisive:
            return None
        self.verdict = found
        level = logging.WARNING if found.mismatch else logging.INFO
        logger.log(level, "dspark probe: %s.%s", found.message, self.dp_tag)
        if found.mismatch and self.settings.on_mismatch == "fail":
            raise ProbeMismatchError(
                f"dspark probe: {found.message}. Stopping because {table.ON_MISMATCH.name}=fail.",
                where=table.ON_MISMATCH.name,
            )
        return found

    def held(self) -> tuple[int, int, int]:
        """(requests, sampled rounds, committed tokens) held now: what bounds the probe's memory."""
        requests = self._requests.values()
        return (
            len(self._requests),
            sum(len(r.pending) for r in requests),
            sum(len(r.tokens) for r in requests),
        )

    def _resolve(self, rid: Hashable, request: _Request) -> None:
        pending = request.pending
        while pending and pending[0].last_needed < request.next_pos:
            self._score(pending.popleft(), request)
        if not pending:
            del self._requests[rid]
            return
        cut = pending[0].anchor_pos - request.base  # the oldest round still reads from its anchor on
        if cut > 0:
            del request.tokens[:cut]
            request.base += cut

    def _score(self, sample: _Sample, request: _Request) -> None:
        """Add ``sample``'s drafts at each offset whose positions ``request`` has committed; never at the
        anchor, the round's own input (random weights copy it: that is not "one position early")."""
        base, tokens, gamma = request.base, request.tokens, len(sample.drafts)
        for k, offset in enumerate(OFFSETS):
            first = sample.anchor_pos + 1 + offset  # where draft 1 lands at this offset
            lo, hi = max(first, base, sample.anchor_pos + 1), min(first + gamma, base + len(tokens))
            if hi <= lo:
                continue
            drafts = sample.drafts[lo - first : hi - first]
            unseen = drafts.count(None)
            self._matches[k] += sum(map(eq, drafts, tokens[lo - base : hi - base]))
            self._compared[k] += len(drafts) - (0 if offset == 0 and sample.unseen_rejected else unseen)

    def _sweep(self) -> None:
        stale = [rid for rid, r in self._requests.items() if self.rounds - r.last_round > self.stale_rounds]
        for rid in stale:
            self.finish(rid)


__all__ = [
    "OFFSETS",
    "MAX_REQUESTS",
    "MAX_PENDING",
    "STALE_ROUNDS",
    "MATCHED",
    "NO_MATCH",
    "INCONCLUSIVE",
    "KINDS",
    "DecisionRule",
    "LiveVerdict",
    "decide",
    "ProbeSettings",
    "VerifyRow",
    "verify_row",
    "row_of_round",
    "LiveProbe",
]
