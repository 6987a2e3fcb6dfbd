"""The census on the drafter formats published after the first held-out set (issue 17): DSpark families
outside the class list, TorchSpec and DeepSeek-V4 dialects, speculators 0.7 exports, and a
self-contradicting export; each classified as its training code says, or refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoints import write_checkpoint
from released_checkpoints import RELEASED

from sglang_dspark_plugin import ENV_VAR, DsparkHarvest
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL
from sglang_dspark_plugin.errors import (
    CensusConflictError,
    InvalidCheckpointError,
    UnsupportedCheckpointError,
)
from sglang_dspark_plugin.releases import RELEASES

RESOLVING = [f for f in RELEASED.values() if f.resolves]
REFUSED = [f for f in RELEASED.values() if f.expect in ("unsupported", "invalid")]
CONFLICTED = [f for f in RELEASED.values() if f.expect == "conflict"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("released")
    return {name: write_checkpoint(root, fx) for name, fx in RELEASED.items()}


def _signals(cfg):
    return {s.signal: s for s in cfg.evidence}


def test_every_class_of_the_issue_has_fixtures():
    names = set(RELEASED)
    assert {"lfm2_dspark", "k3_dspark", "torchspec_dspark", "deepseek_v4_inference"} <= names
    assert {f.expect for f in RELEASED.values()} == {"dflash", "dspark", "conflict", "unsupported"}


@pytest.mark.parametrize("fx", RESOLVING, ids=[f.name for f in RESOLVING])
def test_released_fixture_resolves(fx, written):
    cfg = census(written[fx.name])
    assert cfg.block_size == fx.block_size and cfg.conflict is None
    res = DsparkHarvest.explain(cfg, environ={})
    assert (res.harvest.name(), res.source) == (fx.expect, fx.expect_source)
    deciding = [s for s in cfg.evidence if s.tier == cfg.deciding_tier and s.vote]
    assert deciding and {s.vote for s in deciding} == {fx.expect}


@pytest.mark.parametrize("fx", REFUSED, ids=[f.name for f in REFUSED])
def test_released_fixture_is_refused(fx, written):
    expected = UnsupportedCheckpointError if fx.expect == "unsupported" else InvalidCheckpointError
    with pytest.raises(expected) as info:
        census(written[fx.name])
    assert info.value.kind == fx.expect and str(written[fx.name]) in info.value.where


@pytest.mark.parametrize("fx", CONFLICTED, ids=[f.name for f in CONFLICTED])
def test_released_conflict_lists_its_evidence(fx, written):
    cfg = census(written[fx.name])
    assert cfg.block_size == fx.block_size and cfg.conflict
    with pytest.raises(CensusConflictError) as info:
        DsparkHarvest.explain(cfg, environ={})
    voting = [s for s in cfg.evidence if s.tier == cfg.deciding_tier and s.vote]
    assert {s.vote for s in voting} == {"dflash", "dspark"}
    for s in voting:
        assert s.signal in info.value.message
    assert DsparkHarvest.explain(cfg, environ={ENV_VAR: "dspark"}).warnings  # an override still serves it


# -- 1. families --------------------------------------------------------------------------------------


def test_a_family_name_votes_structurally_and_says_why(written):
    cfg = census(written["lfm2_dspark"])
    arch = _signals(cfg)["config.json:architectures[0]"]
    assert (arch.tier, arch.vote) == (TIER_STRUCTURAL, "dspark")
    assert "Lfm2" in arch.note and "markov_rank" in arch.note and "target_layer_ids" in arch.note
    assert cfg.target_layer_ids == (2, 9, 17, 21, 27) and cfg.num_target_layers is None


def test_the_model_type_corroborates_the_name(written):
    cfg = census(written["k3_dspark"])
    arch = _signals(cfg)["config.json:architectures[0]"]
    assert arch.vote == "dspark" and "k3_dspark" in arch.note
    assert cfg.num_target_layers == 2


def test_target_num_hidden_layers_is_the_targets_count_even_without_torchspecs_marker(tmp_path):
    fx = RELEASED["k3_dspark"]
    deeper = {
        **fx.config,
        "num_target_layers": 2,
        "target_num_hidden_layers": 40,
        "target_layer_ids": [9, 30],
    }
    cfg = census(write_checkpoint(tmp_path, type(fx)(fx.name, deeper, fx.tensors, "dspark")))
    assert cfg.num_target_layers == 40 and cfg.target_layer_ids == (9, 30)


def test_a_family_name_alone_is_refused_naming_what_is_missing(written):
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(written["dspark_pattern_name_only"])
    msg = info.value.message
    assert "Lfm2DSparkDraftModel" in msg and "DSpark part" in msg and "target layer ids" in msg


def test_a_flag_overrules_a_family_name(tmp_path):
    fx = RELEASED["lfm2_dspark"]
    flagged = type(fx)(fx.name, {**fx.config, "sample_from_anchor": False}, fx.tensors, "dflash")
    cfg = census(write_checkpoint(tmp_path, flagged))
    assert cfg.deciding_tier == TIER_EXPLICIT and cfg.verdict == "dflash"


def test_a_name_that_only_resembles_the_pattern_is_still_refused(tmp_path):
    fx = RELEASED["lfm2_dspark"]
    for name in ("DSparkLfm2Model", "Lfm2DSparkForCausalLM", "lfm2DSparkModel"):
        other = type(fx)(fx.name, {**fx.config, "architectures": [name]}, fx.tensors, "unsupported")
        with pytest.raises(UnsupportedCheckpointError):
            census(write_checkpoint(tmp_path / name, other))


# -- 2. TorchSpec ---------------------------------------------------------------------------------------


def test_torchspec_dialect(written):
    cfg = census(written["torchspec_dspark"])
    signals = _signals(cfg)
    assert signals["config.json:architectures[0]"].tier == TIER_INFO  # the shared class, no vote
    assert signals["config.json:_torchspec_version"].vote is None
    assert "TorchSpec's own weight names" in signals["config.json:_torchspec_version"].note
    # num_target_layers (5) counts captured layers; the target has target_num_hidden_layers (36)
    assert cfg.num_target_layers == 36 and cfg.target_layer_ids == (1, 9, 17, 25, 33)
    assert cfg.markov_rank == 8 and cfg.block_size is None


def test_torchspec_dflash_keeps_the_names_vote(written):
    cfg = census(written["torchspec_dflash"])
    assert _signals(cfg)["config.json:architectures[0]"].vote == "dflash"
    assert cfg.num_target_layers == 28 and cfg.target_layer_ids is None


def test_the_same_config_without_torchspecs_marker_is_a_conflict(written):
    cfg = census(written["fork_dflash_label_dspark_head"])
    assert _signals(cfg)["config.json:architectures[0]"].vote == "dflash"
    assert "config.json:markov_rank" in cfg.conflict


# -- 3. DeepSeek-V4 -------------------------------------------------------------------------------------


def test_deepseek_inference_config(written):
    cfg = census(written["deepseek_v4_inference"])
    stages = _signals(cfg)["model.safetensors:mtp.N.markov_head.*"]
    assert (stages.tier, stages.vote, stages.value) == (TIER_STRUCTURAL, "dspark", 2)
    # dim is the hidden size; n_layers is not taken as a DFlash capture bound (DeepSeek's own stage
    # model reads the target's layers)
    assert cfg.hidden_size == 32 and cfg.num_target_layers is None
    assert cfg.mask_token_id == 255 and cfg.target_layer_ids == (40, 41, 42) and cfg.markov_rank == 8


def test_deepseek_stages_alone_decide(written):
    cfg = census(written["deepseek_v4_stages_only"])
    assert [s.signal for s in cfg.evidence if s.vote] == ["model.safetensors:mtp.N.markov_head.*"]


def test_deepseek_plain_mtp_is_refused(written):
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(written["deepseek_v4_plain_mtp"])
    assert "MTP" in info.value.message and "n_mtp_layers" in info.value.where


# -- 4. speculators -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tier", "signal"),
    [
        ("speculators_dspark_default", TIER_EXPLICIT, "config.json:sample_from_anchor"),
        ("speculators_dspark_mask_fill", TIER_EXPLICIT, "config.json:sample_from_anchor"),
        ("speculators_dflash2", TIER_STRUCTURAL, "config.json:speculators_model_type"),
        ("speculators_dspark_type_only", TIER_STRUCTURAL, "config.json:speculators_model_type"),
    ],
)
def test_speculators_evidence_strongest_first(written, name, tier, signal):
    cfg = census(written[name])
    assert cfg.deciding_tier == tier and _signals(cfg)[signal].vote == RELEASED[name].expect


def test_speculators_draft_count_agrees_with_the_flag(written):
    cfg = census(written["speculators_dspark_mask_fill"])
    count = _signals(cfg)["config.json:speculators_config.proposal_methods[0].speculative_tokens"]
    assert (count.value, count.tier, count.vote) == (5, TIER_EXPLICIT, "dflash")
    # the DSpark class and Markov head said shifted; the declarations overrule them
    assert {s.vote for s in cfg.evidence if s.tier == TIER_STRUCTURAL} == {"dspark"}


def test_an_unknown_speculators_type_is_refused(written):
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(written["speculators_eagle3"])
    assert "eagle3" in info.value.message


# -- every class sglang builds is classified ------------------------------------------------------------

NOT_A_PATTERN = {"MuseGlimmerAssistantModel"}  # sglang 0.5.23's DFLASH class with no family pattern


def _minimal(tmp_path, arch, *, dspark):
    layers = {"target_layer_ids": [1, 2], "mask_token_id": 255}
    config = {"architectures": [arch], "block_size": 6, "vocab_size": 256, "dflash_config": layers}
    if dspark:
        config["markov_rank"] = 8
    folder = tmp_path / arch
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    ("builtin", "arch"),
    sorted({(b, a) for release in RELEASES for b, names in release.builds.items() for a in names}),
)
def test_the_census_classifies_every_class_sglang_builds(tmp_path, builtin, arch):
    folder = _minimal(tmp_path, arch, dspark=builtin == "DSPARK")
    if arch in NOT_A_PATTERN:
        with pytest.raises(UnsupportedCheckpointError):
            census(folder)
        return
    assert census(folder).verdict == ("dspark" if builtin == "DSPARK" else "dflash")


def test_a_dflash_family_name_needs_its_dflash_config(tmp_path):
    folder = _minimal(tmp_path, "MiniMaxDFlash2DraftModel", dspark=False)
    arch = _signals(census(folder))["config.json:architectures[0]"]
    assert (arch.tier, arch.vote) == (TIER_STRUCTURAL, "dflash") and "naming pattern" in arch.note
    (folder / "config.json").write_text('{"architectures": ["MiniMaxDFlash2DraftModel"], "block_size": 6}')
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(folder)
    assert "target_layer_ids" in info.value.message and "mask_token_id" in info.value.message


def test_a_dflash_family_name_over_a_markov_head_is_a_conflict(tmp_path):
    cfg = census(_minimal(tmp_path, "DFlash2BeamDraftModel", dspark=True))
    assert cfg.conflict and "architectures[0]" in cfg.conflict and "markov_rank" in cfg.conflict
