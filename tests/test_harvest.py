"""DsparkHarvest: every cell of the harvest table (README), environment parsing, resolution."""

from __future__ import annotations

import pytest

from sglang_dspark_plugin import ENV_VAR, DflashCfg, DsparkHarvest, Signal
from sglang_dspark_plugin.census.draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL
from sglang_dspark_plugin.errors import CensusConflictError, GeometryError, HarvestEnvError

DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK


# -- the table, cell by cell ----------------------------------------------------------------------


def test_name_cells():
    assert DFLASH.name() == "dflash"
    assert DSPARK.name() == "dspark"


@pytest.mark.parametrize("member", list(DsparkHarvest))
def test_from_name_round_trips(member):
    assert DsparkHarvest.from_name(member.name()) is member


@pytest.mark.parametrize("s", ["DFLASH", "Dspark", " dflash", "dspark\n", "", "dflsh", None, 1, "dflash "])
def test_from_name_is_exact(s):
    # from_name is the strict serialized-name lookup; only from_env_value forgives case/whitespace.
    assert DsparkHarvest.from_name(s) is None


def test_first_row_cells():
    assert DFLASH.first_row() == 1
    assert DSPARK.first_row() == 0


@pytest.mark.parametrize("b", range(2, 40))
def test_n_drafts_cells(b):
    assert DFLASH.n_drafts(b) == b - 1
    assert DSPARK.n_drafts(b) == b


@pytest.mark.parametrize("row", range(0, 40))
def test_trained_offset_cells(row):
    assert DFLASH.trained_offset_of_row(row) == row
    assert DSPARK.trained_offset_of_row(row) == row + 1


@pytest.mark.parametrize(("member", "b"), [(DFLASH, 1), (DFLASH, 0), (DFLASH, -3), (DSPARK, 0), (DSPARK, -1)])
def test_n_drafts_refuses_a_block_without_drafts(member, b):
    with pytest.raises(GeometryError, match="yields") as info:
        member.n_drafts(b)
    assert info.value.kind == "invalid"
    assert "block_size" in info.value.message  # says where to fix it


@pytest.mark.parametrize("b", [2.0, "4", True, None])
def test_n_drafts_refuses_non_integers(b):
    with pytest.raises(GeometryError, match="integer"):
        DSPARK.n_drafts(b)


def test_dspark_accepts_a_one_row_block():
    # One row, anchor only: the shifted convention still yields one draft (row 0 predicts p+1).
    assert DSPARK.n_drafts(1) == 1


@pytest.mark.parametrize("row", [-1, 1.0, "0", True])
def test_trained_offset_refuses_bad_rows(row):
    with pytest.raises(GeometryError):
        DFLASH.trained_offset_of_row(row)


# -- from_env_value --------------------------------------------------------------------------------


def test_unset_is_the_historical_dflash_arm():
    assert DsparkHarvest.from_env_value(None) is DFLASH


@pytest.mark.parametrize(
    ("value", "member"),
    [
        ("dflash", DFLASH),
        ("dspark", DSPARK),
        ("DFLASH", DFLASH),
        ("DSpark", DSPARK),
        ("  dspark ", DSPARK),
        ("\tDFlash\n", DFLASH),
    ],
)
def test_env_names_case_and_whitespace(value, member):
    assert DsparkHarvest.from_env_value(value) is member


@pytest.mark.parametrize(
    "value",
    ["", " ", "dflsh", "d spark", "dspark2", "mask-fill", "shifted", "1", "0", "true", "dflash,dspark"],
)
def test_env_typos_are_refused_loudly(value):
    with pytest.raises(HarvestEnvError) as info:
        DsparkHarvest.from_env_value(value)
    err = info.value
    assert err.kind == "env"
    assert ENV_VAR in err.message  # the variable
    assert repr(value) in err.message  # the value it got
    assert "'dflash'" in err.message and "'dspark'" in err.message  # the accepted values
    assert err.where == ENV_VAR


# -- resolve_value / resolve / explain ----------------------------------------------------------


@pytest.mark.parametrize("strategy_dspark", [False, True])
def test_explicit_value_wins_over_the_census(strategy_dspark):
    assert DsparkHarvest.resolve_value("dflash", strategy_dspark) is DFLASH
    assert DsparkHarvest.resolve_value("DSPARK", strategy_dspark) is DSPARK


def test_unset_value_follows_the_census():
    assert DsparkHarvest.resolve_value(None, True) is DSPARK
    assert DsparkHarvest.resolve_value(None, False) is DFLASH


def test_resolve_value_refuses_a_typo_even_when_the_census_is_clear():
    with pytest.raises(HarvestEnvError):
        DsparkHarvest.resolve_value("dpsark", True)


def _cfg(*signals: Signal, tier: int | None = None, conflict: str | None = None) -> DflashCfg:
    return DflashCfg(path="ckpt", block_size=8, evidence=signals, deciding_tier=tier, conflict=conflict)


ARCH_DSPARK = Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark")
FLAG_DFLASH = Signal("config.json:sample_from_anchor", False, TIER_EXPLICIT, "dflash")
RANK_ZERO = Signal("config.json:markov_rank", 0, TIER_INFO, None)


def test_explain_sources():
    assert DsparkHarvest.explain(_cfg(ARCH_DSPARK, tier=2), environ={}).source == "census"
    assert DsparkHarvest.explain(_cfg(ARCH_DSPARK, tier=2), environ={}).harvest is DSPARK
    default = DsparkHarvest.explain(_cfg(RANK_ZERO), environ={})
    assert (default.harvest, default.source, default.census_harvest) == (DFLASH, "default", None)
    env = DsparkHarvest.explain(_cfg(RANK_ZERO), environ={ENV_VAR: "dspark"})
    assert (env.harvest, env.source, env.env_value, env.warnings) == (DSPARK, "env", "dspark", ())


def test_deciding_tier_overrules_lower_tiers():
    cfg = _cfg(ARCH_DSPARK, FLAG_DFLASH, tier=1)
    assert cfg.strategy_dspark is False
    assert DsparkHarvest.explain(cfg, {}).harvest is DFLASH


def test_resolve_reads_the_environment(monkeypatch):
    cfg = _cfg(ARCH_DSPARK, tier=2)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert DsparkHarvest.resolve(cfg) is DSPARK
    monkeypatch.setenv(ENV_VAR, " DFlash ")
    assert DsparkHarvest.resolve(cfg) is DFLASH
    monkeypatch.setenv(ENV_VAR, "")
    with pytest.raises(HarvestEnvError):
        DsparkHarvest.resolve(cfg)


def test_override_that_contradicts_the_census_warns():
    res = DsparkHarvest.explain(_cfg(ARCH_DSPARK, tier=2), environ={ENV_VAR: "dflash"})
    assert res.harvest is DFLASH and res.source == "env" and res.census_harvest is DSPARK
    assert len(res.warnings) == 1
    assert "contradicts" in res.warnings[0] and "architectures[0]" in res.warnings[0]


def test_override_that_agrees_is_silent():
    res = DsparkHarvest.explain(_cfg(ARCH_DSPARK, tier=2), environ={ENV_VAR: "dspark"})
    assert res.warnings == () and res.census_harvest is DSPARK


def test_conflict_is_refused_without_override_and_served_with_one():
    conflicted = _cfg(ARCH_DSPARK, tier=2, conflict="a says dspark; b says dflash")
    with pytest.raises(CensusConflictError) as info:
        DsparkHarvest.explain(conflicted, environ={})
    assert info.value.kind == "conflict" and "a says dspark" in info.value.message
    res = DsparkHarvest.explain(conflicted, environ={ENV_VAR: "dflash"})
    assert res.harvest is DFLASH and res.source == "env"
    assert any("contradictory" in w for w in res.warnings)


def test_resolution_to_json_names_everything():
    res = DsparkHarvest.explain(_cfg(ARCH_DSPARK, tier=2), environ={ENV_VAR: "dflash"})
    out = res.to_json()
    assert out["harvest"] == "dflash" and out["source"] == "env" and out["env_var"] == ENV_VAR
    assert out["census_harvest"] == "dspark"
    assert out["evidence"] == [ARCH_DSPARK.to_json()]
