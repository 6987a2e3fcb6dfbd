"""The draft config the rest of the project uses, as produced by the checkpoint census."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import CensusConflictError, printable
from .architectures import FAMILY_DFLASH, FAMILY_DSPARK

TIER_EXPLICIT = 1
"""Explicit declarations: sample_from_anchor, query_zero_predicts_next, dspark_bonus_anchor, ..."""
TIER_STRUCTURAL = 2
"""Structural defaults: architecture, projector_type, Markov head, speculators_model_type, ..."""
TIER_INFO = 0
"""Recorded for the reader, casts no vote (e.g. markov_rank = 0, a DFlash2 candidate selector)."""

# A vote names the family whose training strategy it says: the architecture table's names.
VOTE_DFLASH = FAMILY_DFLASH
VOTE_DSPARK = FAMILY_DSPARK


@dataclass(frozen=True)
class Signal:
    """One piece of evidence about the training strategy."""

    signal: str  # where it was read, e.g. "config.json:dflash_config.sample_from_anchor"
    value: Any  # the value seen (JSON-able)
    tier: int  # TIER_EXPLICIT, TIER_STRUCTURAL or TIER_INFO
    vote: str | None  # "dflash", "dspark" or None (no vote)
    note: str = ""

    def __post_init__(self) -> None:
        # A signal is named after a key, a file or a tensor: a name from a checkpoint is escaped here,
        # once, so no listing of the evidence (startup line, warning, refusal, alarm) carries it raw.
        object.__setattr__(self, "signal", printable(self.signal))

    def to_json(self) -> dict[str, Any]:
        """``{signal, value, tier, vote[, note]}`` as listed in ``inspect --json`` and the manifest."""
        out = {"signal": self.signal, "value": self.value, "tier": self.tier, "vote": self.vote}
        if self.note:
            out["note"] = self.note
        return out


def votes(evidence: Iterable[Signal], tier: int | None = None) -> list[Signal]:
    """The signals of ``evidence`` that cast a vote, in order; with ``tier``, that tier's only."""
    return [s for s in evidence if s.vote is not None and (tier is None or s.tier == tier)]


def vote_list(evidence: Iterable[Signal]) -> str:
    """The voting signals as warnings and alarms list them: ``signal='value' -> vote; ...``."""
    return "; ".join(f"{s.signal}={s.value!r} -> {s.vote}" for s in votes(evidence))


@dataclass(frozen=True)
class MarkovHead:
    """A draft's Markov head as the census read it (no tensor was loaded).

    ``rank`` > 0 always (rank 0 is no head at all); ``declared_by`` says where it came from:
    ``"config"`` (a ``markov_rank`` spelling, checked against the tables' shapes; the type is then the
    config's own ``markov_head_type``, ``None`` when it names none) or ``"tensors"`` (the
    ``markov_head.*`` tables alone; the type is the config's, else the one the tables' parameter names
    give, ``None`` when they name no single one).
    """

    rank: int
    head_type: str | None
    declared_by: str

    def to_json(self) -> dict[str, Any]:
        """``{rank, head_type, declared_by}``."""
        return {"rank": self.rank, "head_type": self.head_type, "declared_by": self.declared_by}


@dataclass(frozen=True)
class DflashCfg:
    """A DFlash-family draft checkpoint as seen by the census (no tensor was loaded)."""

    path: str
    block_size: int | None  # None: the config gives none (sglang takes --speculative-dflash-block-size)
    architecture: str | None = None
    mask_token_id: int | None = None
    target_layer_ids: tuple[int, ...] | None = None
    num_target_layers: int | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    markov_rank: int | None = None  # the config's agreed rank (None: the config names none)
    markov_head: MarkovHead | None = None  # the head itself, from the config or else the tensors
    evidence: tuple[Signal, ...] = ()
    deciding_tier: int | None = None  # None: no vote at all -> the historical default (mask-fill)
    conflict: str | None = None  # set when the deciding tier disagrees; refused unless overridden
    # The deciding tier's vote, VOTE_DFLASH or VOTE_DSPARK, as the census decided it; None with no vote
    # or on a conflict. A config built from its evidence and deciding_tier alone gets that tier's
    # unanimous vote here.
    verdict: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.verdict is None and self.deciding_tier is not None and not self.conflict:
            cast = {s.vote for s in votes(self.evidence, self.deciding_tier)}
            object.__setattr__(self, "verdict", cast.pop() if len(cast) == 1 else None)

    @property
    def strategy_dspark(self) -> bool:
        """True when the census says the DSpark (shifted) strategy; raises on contradictory evidence."""
        if self.conflict:
            raise CensusConflictError(self.conflict, where=self.path)
        return self.verdict == VOTE_DSPARK

    def to_json(self) -> dict[str, Any]:
        """Every field except ``raw`` and ``verdict`` (the vote of ``deciding_tier``), JSON-able."""
        return {
            "path": self.path,
            "architecture": self.architecture,
            "block_size": self.block_size,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": None if self.target_layer_ids is None else list(self.target_layer_ids),
            "num_target_layers": self.num_target_layers,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "markov_rank": self.markov_rank,
            "deciding_tier": self.deciding_tier,
            "conflict": self.conflict,
            "evidence": [s.to_json() for s in self.evidence],
        }


__all__ = [
    "MarkovHead",
    "Signal",
    "DflashCfg",
    "TIER_EXPLICIT",
    "TIER_STRUCTURAL",
    "TIER_INFO",
    "VOTE_DFLASH",
    "VOTE_DSPARK",
    "votes",
    "vote_list",
]
