"""Per-request acceptance: one line per finished request (``MEMRA_DSPARK_REQUEST_LOG``, on by default).

A server's mean accept length hides the requests it fails: a drafter fine on chat and useless on code
averages out. ``RequestAcceptance`` adds each counted round's accepted-draft counts to the request they
belong to, and when sglang reports the request finished logs (then `` harvest=dflash(census)``, and
`` dp=N`` under data-parallel attention)::

    dspark accept request rid=a1 rounds=12 accepted_drafts=27 accept_len=3.25 context_first=41 context_last=80

``rounds`` is the verify rounds the plugin counted for the request (sglang's ``spec_verify_ct``),
``accept_len`` = 1 + accepted drafts / rounds (the bonus token included, the plugin's convention), the
contexts are the request's tokens at the anchor of its first and last counted round (0 where the round
carried none). The request id is written with every character outside ``[A-Za-z0-9._:-]`` as ``%XX``
and cut at ``MAX_RID`` characters: a client-chosen id cannot break or forge a line.

Memory is bounded: a request is dropped when it ends, and one not counted for ``STALE_ROUNDS`` rounds
(sglang ended it without the end-of-request hook) is dropped unlogged and counted (``swept``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Sequence

MAX_RID = 96
STALE_ROUNDS = 256
"""Rounds after which a request the rounds no longer count is dropped (as the live probe's sweep)."""
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")


def rid_text(rid: Hashable) -> str:
    """``rid`` as the line writes it: safe characters kept, others ``%XX`` (UTF-8), at most ``MAX_RID``."""
    text = str(rid)[:MAX_RID]
    if all(c in _SAFE for c in text):
        return text or "-"
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)[:MAX_RID]


class RequestAcceptance:
    """Each live request's rounds, accepted drafts and first and last context; a line at its end."""

    __slots__ = ("logger", "level", "suffix", "observe", "_live", "_round", "swept", "logged")

    def __init__(
        self,
        logger: logging.Logger,
        suffix: str,
        level: int = logging.INFO,
        observe: Callable[[float], None] | None = None,
    ) -> None:
        self.logger, self.level, self.suffix, self.observe = logger, level, suffix, observe
        self._live: dict[Hashable, list[int]] = {}  # rid -> [rounds, accepted, first ctx, last ctx, seen]
        self._round = 0
        self.swept = 0  # requests dropped unlogged (never reported finished)
        self.logged = 0

    def add(self, rids: Sequence[Hashable], counts: Sequence[int], contexts: Sequence[int] | None) -> None:
        """One counted round: request ``rids[i]`` accepted ``counts[i]`` drafts at ``contexts[i]``."""
        self._round = index = self._round + 1
        live = self._live
        for i, rid in enumerate(rids):
            context = 0 if contexts is None else contexts[i]
            entry = live.get(rid)
            if entry is None:
                live[rid] = [1, counts[i], context, context, index]
            else:
                entry[0] += 1
                entry[1] += counts[i]
                entry[3] = context
                entry[4] = index
        if index % STALE_ROUNDS == 0:
            self._sweep(index)

    def _sweep(self, index: int) -> None:
        stale = [rid for rid, e in self._live.items() if index - e[4] >= STALE_ROUNDS]
        for rid in stale:
            del self._live[rid]
        self.swept += len(stale)

    def finish(self, rid: Hashable) -> tuple[int, int] | None:
        """``rid`` ended: its line (and the histogram's observation); ``(rounds, accepted drafts)``, or
        ``None`` for a request no counted round held (one token, or every round left out)."""
        entry = self._live.pop(rid, None)
        if entry is None:
            return None
        rounds, accepted, first, last, _ = entry
        accept_len = 1.0 + accepted / rounds
        self.logged += 1
        if self.observe is not None:
            self.observe(accept_len)
        if self.logger.isEnabledFor(self.level):
            self.logger.log(
                self.level,
                "%s",
                f"dspark accept request rid={rid_text(rid)} rounds={rounds} accepted_drafts={accepted} "
                f"accept_len={accept_len:.2f} context_first={first} context_last={last}{self.suffix}",
            )
        return rounds, accepted

    @property
    def held(self) -> int:
        """Requests held now (0 on an idle server)."""
        return len(self._live)


__all__ = ["MAX_RID", "STALE_ROUNDS", "RequestAcceptance", "rid_text"]
