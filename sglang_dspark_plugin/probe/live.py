"""The live offset probe: ``check``'s offset probe (``probe.offsets``) on the rounds a server runs.

For a sample of verify rounds the probe keeps every draft with its position (draft j of a round
anchored at p is for p+j); once the request has committed the tokens around them, it scores each draft
against the committed token at its own position and both neighbours (offsets 0, +1, -1), as
``offsets.ProbeCounts``. ``live_verdict.decide`` names the verdict once decisive: matched, drafts one
position late or early (with the harvest that fixes it), or no offset matches (no harvest to flip).

Plain Python on the host, fed from what sglang already copied to the host per round (``verify_row``;
docs/live-probe.md). Memory is bounded: ``max_requests`` requests, ``max_pending`` sampled rounds each,
and per request only the committed tokens its sampled rounds still need.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import eq

from .. import settings as table
from ..errors import GeometryError, ProbeMismatchError
from ..harvest import DsparkHarvest
from ..util.logsafe import safe_logger
from ..util.validation import is_int
from .offsets import ProbeCounts
from .verdict import OFFSETS, DecisionRule, LiveVerdict, decide

logger = safe_logger("sglang_dspark_plugin.probe")

MAX_REQUESTS = 1024
"""Requests tracked at once; a sampled round of one more request is skipped (and counted)."""
MAX_PENDING = 16
"""Sampled rounds kept per request (a request has at most gamma + 2 unresolved rounds in flight)."""
MAX_SAMPLED_PER_ROUND = 8
"""Requests whose drafts one sampled round keeps (the first in batch order): bounds a round's cost at
large batch sizes (about 4 us per sampled request-round) while every request's tokens still count."""

STALE_ROUNDS = 256
"""A request absent from this many verify rounds has left (finished, aborted): its state is dropped."""


@dataclass(frozen=True)
class ProbeSettings:
    """The sampling schedule and what a decisive mismatch does (``MEMRA_DSPARK_PROBE_ROUNDS``,
    ``MEMRA_DSPARK_PROBE_EVERY``, ``MEMRA_DSPARK_ON_MISMATCH``)."""

    rounds: int = table.PROBE_ROUNDS.default  # every round is sampled for the first ``rounds``
    every: int = table.PROBE_EVERY.default  # then 1 in ``every`` (0: none)
    on_mismatch: str = table.ON_MISMATCH.default  # "warn" or "fail"

    def __post_init__(self) -> None:
        checks = (
            ("rounds", table.PROBE_ROUNDS, is_int(self.rounds) and 0 <= self.rounds <= 10**9),
            ("every", table.PROBE_EVERY, is_int(self.every) and 0 <= self.every <= 10**6),
            ("on_mismatch", table.ON_MISMATCH, self.on_mismatch in table.ON_MISMATCH.words),
        )
        table.check_fields(
            "ProbeSettings", self, ((n, ok, f"{s.accepted} (as {s.name})") for n, s, ok in checks)
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
        max_per_round: int = MAX_SAMPLED_PER_ROUND,
        dp_tag: str = "",
    ) -> None:
        self.harvest = harvest
        self.settings = settings or ProbeSettings()
        self.rule = rule or DecisionRule()
        self.max_requests, self.max_pending, self.stale_rounds = max_requests, max_pending, stale_rounds
        self.dp_tag = dp_tag
        self.max_per_round = max_per_round
        self._taken = 0  # requests sampled in the current round
        self.rounds = 0  # verify rounds begun
        self.sampled_rounds = 0
        self.skipped = 0  # sampled request-rounds not kept: the request or pending limit
        self.verdict: LiveVerdict | None = None  # the first decisive verdict
        self._sampled = False
        self._requests: dict[Hashable, _Request] = {}
        self.swept = 0  # requests the stale sweep dropped: sglang never reported them finished
        self._matches = [0, 0, 0]  # by OFFSETS
        self._compared = [0, 0, 0]
        self._polled_at = 0  # drafts scored when poll last decided (it decides again only after more)

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
        self._sampled = self.samples(index, alarm_low=alarm_low)
        self.sampled_rounds += self._sampled
        self._taken = 0
        return self._sampled

    def samples(self, index: int, *, alarm_low: bool = False) -> bool:
        """Whether round ``index`` (0-based, in ``begin_round`` order) is sampled, ``alarm_low`` as given."""
        rounds, every = self.settings.rounds, self.settings.every
        return index < rounds or alarm_low or (every > 0 and (index - rounds) % every == 0)

    @property
    def tracking(self) -> bool:
        """Whether some request has sampled rounds still to score."""
        return bool(self._requests)

    @property
    def busy(self) -> bool:
        """Whether this round needs any row: sampled, or some request has rounds to score (when not,
        the worker skips the round in O(1))."""
        return self._sampled or bool(self._requests)

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
        take = self._sampled and self._taken < self.max_per_round
        if request is None:
            if not take:
                return
            if len(self._requests) >= self.max_requests:
                self.skipped += 1
                return
            request = self._requests[rid] = _Request(anchor_pos, [anchor])
        if take:
            self._taken += 1
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
        scored = self._compared[0]
        if self.verdict is not None or scored == self._polled_at:
            return None
        self._polled_at = scored
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
            self._score_whole(pending.popleft(), request)
        if not pending:
            del self._requests[rid]
            return
        cut = pending[0].anchor_pos - request.base  # the oldest round still reads from its anchor on
        if cut > 0:
            del request.tokens[:cut]
            request.base += cut

    def _score_whole(self, sample: _Sample, request: _Request) -> None:
        """``_score`` for a round whose every position is committed (the common case, in three slices)."""
        drafts, gamma, at = sample.drafts, len(sample.drafts), sample.anchor_pos - request.base
        window = request.tokens[at : at + gamma + 2]  # positions anchor .. anchor + gamma + 1
        unseen, unseen_after_first = drafts.count(None), drafts[1:].count(None)
        m, c = self._matches, self._compared
        m[0] += sum(map(eq, drafts, window[1:]))
        m[1] += sum(map(eq, drafts, window[2:]))
        m[2] += sum(map(eq, drafts[1:], window[1:]))  # draft 1 is not compared with the anchor
        c[0] += gamma - (0 if sample.unseen_rejected else unseen)
        c[1] += gamma - unseen
        c[2] += gamma - 1 - unseen_after_first

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
        self.swept += len(stale)
        for rid in stale:
            self.finish(rid)


def observe_round(
    probe: LiveProbe,
    requests: Sequence[tuple[Hashable, int, int | None, bool]],
    committed: Sequence[Sequence[int]],
    rows: Sequence[int] | None,
    accept: Sequence[int] | None,
    block: Sequence[int] | None = None,
) -> None:
    """One verify round into ``probe`` (after its ``begin_round``), as sglang's host copies hold it:
    ``requests[i]`` is (rid, anchor position, anchor, whether sglang counts request i this round), the
    anchor being the request's last output token before this round, read when the round resolves
    (``telemetry.deferred.Fact``), ``committed[i]`` the tokens it commits; on a sampled round ``rows``
    is the flat output rows (one row of equal width per request), ``accept`` the accept lengths and
    ``block`` DSPARK's block accept lengths (``None`` where the builtin caps nothing)."""
    stride = len(rows) // len(requests) if rows and requests else 0
    for i, (rid, anchor_pos, anchor, live) in enumerate(requests):
        if not live or anchor is None or not probe.wants(rid):
            continue
        if stride and accept is not None:
            capped = block is not None and block[i] > accept[i]
            row = verify_row(rows[i * stride : (i + 1) * stride], accept[i], capped=capped)  # type: ignore[index]
        else:
            row = VerifyRow((), tuple(committed[i]))
        probe.observe(rid, anchor_pos, anchor, row)


__all__ = [
    "observe_round",
    "MAX_REQUESTS",
    "MAX_PENDING",
    "STALE_ROUNDS",
    "ProbeSettings",
    "VerifyRow",
    "verify_row",
    "row_of_round",
    "LiveProbe",
]
