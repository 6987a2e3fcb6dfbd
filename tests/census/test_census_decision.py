"""The tier rule (``census.decision.decide_evidence``), the verdict ``DflashCfg`` keeps, and the shared
vote and repr helpers."""

from __future__ import annotations

import pytest

from sglang_dspark_plugin.census.decision import Decision, decide_evidence
from sglang_dspark_plugin.census.draft_config import (
    TIER_EXPLICIT,
    TIER_INFO,
    TIER_STRUCTURAL,
    DflashCfg,
    Signal,
    vote_list,
    votes,
)
from sglang_dspark_plugin.errors import CensusConflictError
from sglang_dspark_plugin.util.reprs import cut, jsonable, short, short_json

ARCH_DSPARK = Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark")
PROJECTOR_DSPARK = Signal("config.json:dflash_config.projector_type", "dspark", TIER_STRUCTURAL, "dspark")
FLAG_DFLASH = Signal("config.json:sample_from_anchor", False, TIER_EXPLICIT, "dflash")
FLAG_DSPARK = Signal("config.json:dflash_config.sample_from_anchor", True, TIER_EXPLICIT, "dspark")
RANK_ZERO = Signal("config.json:markov_rank", 0, TIER_INFO, None)


def test_no_vote_decides_nothing():
    assert decide_evidence([]) == decide_evidence([RANK_ZERO]) == Decision(None, None, None)


def test_the_highest_tier_with_votes_decides():
    assert decide_evidence([ARCH_DSPARK, PROJECTOR_DSPARK, RANK_ZERO]) == Decision(TIER_STRUCTURAL, "dspark")
    assert decide_evidence([ARCH_DSPARK, FLAG_DFLASH, RANK_ZERO]) == Decision(TIER_EXPLICIT, "dflash")


def test_disagreeing_votes_of_the_deciding_tier_are_a_conflict_listing_them():
    decision = decide_evidence([ARCH_DSPARK, FLAG_DFLASH, FLAG_DSPARK])
    assert (decision.tier, decision.vote) == (TIER_EXPLICIT, None)
    assert decision.conflict is not None
    assert decision.conflict.startswith("the checkpoint's explicit declarations (tier 1) disagree")
    assert "config.json:sample_from_anchor = False -> dflash" in decision.conflict
    assert "architectures" not in decision.conflict  # tier 2 does not take part
    assert "MEMRA_DSPARK_HARVEST=dspark" in decision.conflict


def test_the_verdict_is_kept_and_read_back():
    cfg = DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_DSPARK,), deciding_tier=2, verdict="dspark")
    assert cfg.verdict == "dspark" and cfg.strategy_dspark


def test_a_config_built_from_its_evidence_gets_the_deciding_tiers_vote():
    assert DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_DSPARK,), deciding_tier=2).verdict == "dspark"
    overruled = DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_DSPARK, FLAG_DFLASH), deciding_tier=1)
    assert overruled.verdict == "dflash" and not overruled.strategy_dspark
    assert DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_DSPARK,)).verdict is None  # no tier given
    conflicted = DflashCfg(path="ckpt", block_size=8, evidence=(ARCH_DSPARK,), deciding_tier=2, conflict="x")
    assert conflicted.verdict is None
    with pytest.raises(CensusConflictError):
        conflicted.strategy_dspark  # noqa: B018


def test_votes_and_the_vote_list():
    evidence = [ARCH_DSPARK, RANK_ZERO, FLAG_DFLASH]
    assert votes(evidence) == [ARCH_DSPARK, FLAG_DFLASH]
    assert votes(evidence, TIER_EXPLICIT) == [FLAG_DFLASH]
    assert vote_list(evidence) == (
        "config.json:architectures[0]='DSparkDraftModel' -> dspark; "
        "config.json:sample_from_anchor=False -> dflash"
    )


def test_short_forms():
    assert cut("abcdef", 6) == "abcdef" and cut("abcdefg", 6) == "abc..."
    assert short("x" * 100) == repr("x" * 100)[:77] + "..."
    assert short_json({"a": "\x1b"}) == '{"a": "\\u001b"}'
    assert short_json(list(range(100)), 10) == "[0, 1, ..."
    nested: list = []
    for _ in range(100_000):
        nested = [nested]
    assert short(nested) == "<a list too deep or too long to print>"
    assert jsonable({"a": [1, None]}) == {"a": [1, None]} and jsonable({1, 2}) == "{1, 2}"
