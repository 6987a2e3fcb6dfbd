"""The checkpoint census on every fixture checkpoint, and every malformed input it must refuse."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from checkpoints import FIXTURES, Fixture, write_checkpoint

from sglang_dspark_plugin import ENV_VAR, DsparkHarvest, RoundGeometry
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL
from sglang_dspark_plugin.census.locate import hub_cli
from sglang_dspark_plugin.errors import (
    CensusConflictError,
    GeometryError,
    InvalidCheckpointError,
    MissingBlockSizeError,
    UnsupportedCheckpointError,
)

RESOLVING = [f for f in FIXTURES.values() if f.resolves]
REFUSED = [f for f in FIXTURES.values() if f.expect in ("unsupported", "invalid")]
CONFLICTED = [f for f in FIXTURES.values() if f.expect == "conflict"]


def _ids(fixtures: list[Fixture]) -> list[str]:
    return [f.name for f in fixtures]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fixtures")
    return {name: write_checkpoint(root, name) for name in FIXTURES}


def _signals(cfg, tier=None):
    return {s.signal: s for s in cfg.evidence if tier is None or s.tier == tier}


# -- every fixture ---------------------------------------------------------------------------------


def test_the_fixture_set_covers_both_conventions_and_every_refusal():
    expects = {f.expect for f in FIXTURES.values()}
    assert expects == {"dflash", "dspark", "conflict", "unsupported", "invalid"}
    # Distinct widths keep a geometry mistake from hiding behind a coincidence.
    widths = {f.block_size for f in RESOLVING}
    assert len(widths) >= 8 and min(widths) >= 4 and max(widths) <= 16


@pytest.mark.parametrize("fx", RESOLVING, ids=_ids(RESOLVING))
def test_census_resolves_fixture(fx, written):
    cfg = census(written[fx.name])
    assert cfg.block_size == fx.block_size
    assert cfg.conflict is None
    res = DsparkHarvest.explain(cfg, environ={})
    assert res.harvest.name() == fx.expect
    assert res.source == fx.expect_source
    assert cfg.strategy_dspark is (fx.expect == "dspark")
    # Every signal of the deciding tier voted for the answer.
    if fx.expect_source == "census":
        deciding = [s for s in cfg.evidence if s.tier == cfg.deciding_tier and s.vote]
        assert deciding and {s.vote for s in deciding} == {fx.expect}
    else:
        assert cfg.deciding_tier is None and not any(s.vote for s in cfg.evidence)


@pytest.mark.parametrize("fx", REFUSED, ids=_ids(REFUSED))
def test_census_refuses_fixture(fx, written):
    expected = UnsupportedCheckpointError if fx.expect == "unsupported" else InvalidCheckpointError
    with pytest.raises(expected) as info:
        census(written[fx.name])
    assert info.value.kind == fx.expect and info.value.message
    assert info.value.where.startswith(str(written[fx.name] / "config.json"))  # names the file


@pytest.mark.parametrize("fx", CONFLICTED, ids=_ids(CONFLICTED))
def test_conflict_is_recorded_then_refused_unless_overridden(fx, written):
    cfg = census(written[fx.name])  # the census itself does not raise: an override may still serve it
    assert cfg.block_size == fx.block_size
    assert cfg.conflict and "MEMRA_DSPARK_HARVEST" in cfg.conflict
    with pytest.raises(CensusConflictError):
        cfg.strategy_dspark  # noqa: B018
    with pytest.raises(CensusConflictError) as info:
        DsparkHarvest.explain(cfg, environ={})
    for s in cfg.evidence:  # the refusal lists the contradicting evidence
        if s.tier == cfg.deciding_tier and s.vote:
            assert s.signal in info.value.message
    for value in ("dflash", "dspark"):
        res = DsparkHarvest.explain(cfg, environ={ENV_VAR: value})
        assert res.harvest.name() == value and res.source == "env" and res.warnings


@pytest.mark.parametrize("fx", RESOLVING, ids=_ids(RESOLVING))
def test_explicit_override_wins_and_warns_when_it_contradicts(fx, written):
    cfg = census(written[fx.name])
    other = "dspark" if fx.expect == "dflash" else "dflash"
    res = DsparkHarvest.explain(cfg, environ={ENV_VAR: other.upper()})
    assert res.harvest.name() == other and res.source == "env"
    if fx.expect_source == "census":
        assert res.census_harvest.name() == fx.expect
        assert len(res.warnings) == 1 and "contradicts" in res.warnings[0]
    else:
        assert res.warnings == ()  # nothing in the checkpoint to contradict
    same = DsparkHarvest.explain(cfg, environ={ENV_VAR: fx.expect})
    assert same.warnings == ()


# -- the evidence, fixture by fixture --------------------------------------------------------------


def test_zlab_fields(written):
    cfg = census(written["zlab_dflash"])
    assert cfg.architecture == "DFlashDraftModel" and cfg.deciding_tier == TIER_STRUCTURAL
    assert cfg.mask_token_id == 151669 and cfg.vocab_size == 151936
    assert cfg.target_layer_ids == (1, 9, 17, 25, 33) and cfg.num_target_layers == 36
    assert cfg.hidden_size == 32


def test_specforge_dspark_nested_markov_keys(written):
    cfg = census(written["specforge_dspark"])
    tier2 = _signals(cfg, TIER_STRUCTURAL)
    assert tier2["config.json:dflash_config.markov_rank"].vote == "dspark"
    assert tier2["config.json:dflash_config.projector_type"].value == "dspark"
    assert tier2["model.safetensors:markov_head.*"].value == 4
    assert cfg.markov_rank == 8 and cfg.target_layer_ids == (1, 2)
    assert _signals(cfg, TIER_INFO)["model.safetensors:confidence_head.*"].vote is None


def test_markov_rank_zero_is_not_a_vote(written):
    cfg = census(written["dspark_markov_rank0"])
    rank = _signals(cfg)["config.json:dflash_config.markov_rank"]
    assert (rank.value, rank.tier, rank.vote) == (0, TIER_INFO, None)
    assert cfg.markov_rank == 0
    assert not any("markov_head" in s.signal for s in cfg.evidence)  # no weights, no weight signal
    assert cfg.deciding_tier == TIER_STRUCTURAL  # architecture + projector still decide


@pytest.mark.parametrize(
    ("name", "signal", "value"),
    [
        ("dspark_sample_from_anchor_false", "config.json:sample_from_anchor", False),
        ("dspark_bonus_anchor", "config.json:dspark_bonus_anchor", True),
    ],
)
def test_a_flag_overrules_a_dspark_architecture(written, name, signal, value):
    cfg = census(written[name])
    assert cfg.deciding_tier == TIER_EXPLICIT
    flag = _signals(cfg)[signal]
    assert (flag.value, flag.tier, flag.vote) == (value, TIER_EXPLICIT, "dflash")
    # The structural votes said dspark; they are recorded and overruled, not a conflict.
    assert {s.vote for s in cfg.evidence if s.tier == TIER_STRUCTURAL} == {"dspark"}
    assert cfg.conflict is None


def test_query_zero_predicts_next_overrules_a_dflash_name(written):
    cfg = census(written["query_zero_predicts_next"])
    sig = _signals(cfg)["config.json:dflash_config.query_zero_predicts_next"]
    assert (sig.tier, sig.vote) == (TIER_EXPLICIT, "dspark")
    assert _signals(cfg)["config.json:architectures[0]"].vote == "dflash"


@pytest.mark.parametrize(
    ("name", "tokens", "vote"),
    [("speculators_tokens_b_minus_1", 11, "dflash"), ("speculators_tokens_b", 11, "dspark")],
)
def test_speculators_declared_draft_count(written, name, tokens, vote):
    cfg = census(written[name])
    sig = _signals(cfg)["config.json:speculators_config.proposal_methods[0].speculative_tokens"]
    assert (sig.value, sig.tier, sig.vote) == (tokens, TIER_EXPLICIT, vote)
    assert _signals(cfg)["config.json:speculators_model_type"].tier == TIER_STRUCTURAL
    assert cfg.architecture is None and cfg.target_layer_ids == (1, 2) and cfg.vocab_size == 256


def test_speculators_invalid_draft_count_names_both_counts(written):
    with pytest.raises(InvalidCheckpointError) as info:
        census(written["speculators_tokens_invalid"])
    msg = info.value.message
    assert "speculative_tokens = 5" in msg and "12 (mask-fill)" in msg and "13 (shifted)" in msg


def test_sglang_bundled_keys_on_a_target_config(written):
    cfg = census(written["sglang_target_bundled_dspark"])
    assert cfg.architecture == "Qwen3ForCausalLM"
    assert _signals(cfg)["config.json:architectures[0]"].vote is None
    assert _signals(cfg)["config.json:dspark_markov_rank"].vote == "dspark"
    assert cfg.mask_token_id == 255 and cfg.target_layer_ids == (0,) and cfg.markov_rank == 16
    assert any("dspark_block_size" in s.signal and s.vote == "dspark" for s in cfg.evidence)


def test_null_markov_rank_is_not_a_vote(written):
    cfg = census(written["gemma4_dspark_null_rank"])
    rank = _signals(cfg)["config.json:markov_rank"]
    assert (rank.value, rank.tier, rank.vote) == (None, TIER_INFO, None)
    assert _signals(cfg)["config.json:dflash_config.projector_type"].vote == "dspark"  # dspark_v4


def test_legacy_logit_head_markov_weights_vote(written):
    cfg = census(written["legacy_logit_head_markov"])
    sig = _signals(cfg)["model.safetensors:logit_head.markov_head.*"]
    assert (sig.tier, sig.vote) == (TIER_STRUCTURAL, "dspark")


def test_dflash_shift_label_is_informational(written):
    cfg = census(written["dflash_shift_label"])
    sig = _signals(cfg)["config.json:dflash_config.shift_label"]
    assert (sig.value, sig.tier, sig.vote) == (True, TIER_INFO, None)
    assert "Domino" in sig.note


def test_dflash2_candidate_selector_is_not_a_markov_head(written):
    cfg = census(written["dflash2"])
    sig = _signals(cfg)["model.safetensors:candidate_selector.*"]
    assert (sig.tier, sig.vote) == (TIER_INFO, None)


def test_training_state_strategy_is_read_without_torch_load(written):
    cfg = census(written["deepspec_training_state"])
    sig = _signals(cfg)["training_state.pt:strategy"]
    assert (sig.value, sig.tier, sig.vote) == ("dspark", TIER_EXPLICIT, "dspark")
    assert _signals(cfg)["config.json:architectures[0]"].vote == "dflash"  # overruled


@pytest.mark.parametrize("name", ["domino_shift_true", "domino_shift_false", "domino_under_dflash_name"])
def test_domino_is_refused_as_a_third_geometry(written, name):
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(written[name])
    assert "third geometry" in info.value.message and "domino" in info.value.message.lower()


def test_unknown_architecture_is_named(written):
    with pytest.raises(UnsupportedCheckpointError) as info:
        census(written["unknown_architecture"])
    assert "LlamaForCausalLM" in info.value.message and "DFlashDraftModel" in info.value.message


@pytest.mark.parametrize(
    "arch",
    ["DFlashDraftModel", "DFlash2DraftModel", "DeepseekDFlashDraftModel", "DFlashSpeculator"],
)
def test_dflash_family_names(tmp_path, arch):
    cfg = census(_write(tmp_path, {"architectures": [arch], "block_size": 4}))
    assert DsparkHarvest.explain(cfg, environ={}).harvest is DsparkHarvest.DFLASH


@pytest.mark.parametrize(
    "arch",
    [
        "DSparkDraftModel",
        "Qwen3DSparkModel",
        "Gemma4DSparkModel",
        "DSparkV4DraftModel",
        "DSparkMiniMaxDraftModel",
    ],
)
def test_dspark_family_names(tmp_path, arch):
    cfg = census(_write(tmp_path, {"architectures": [arch], "block_size": 4}))
    assert DsparkHarvest.explain(cfg, environ={}).harvest is DsparkHarvest.DSPARK


@pytest.mark.parametrize(
    ("config", "vote"),
    [
        ({"speculative_config": {"dflash_config": {"sample_from_anchor": True}}}, "dspark"),
        ({"speculative_config": {"sample_from_anchor": False}}, "dflash"),
        ({"speculators_config": {"sample_from_anchor": True}}, "dspark"),
        ({"dflash_config": {"dspark_bonus_anchor": False}}, "dspark"),
        ({"query_zero_predicts_next": False}, "dflash"),
        ({"dspark_config": {"markov_rank": 4}}, "dspark"),
        ({"speculators_config": {"speculative_tokens": 5}}, "dspark"),
        ({"speculators_config": {"speculative_tokens": 4}}, "dflash"),
    ],
)
def test_spellings(tmp_path, config, vote):
    cfg = census(_write(tmp_path, {"block_size": 5, **config}))
    assert DsparkHarvest.explain(cfg, environ={}).harvest.name() == vote
    assert cfg.deciding_tier in (TIER_EXPLICIT, TIER_STRUCTURAL)


def test_block_size_spellings_agree(tmp_path):
    cfg = census(_write(tmp_path, {"dspark_block_size": 6, "dflash_config": {"block_size": 6}}))
    assert cfg.block_size == 6
    nested = census(_write(tmp_path, {"transformer_layer_config": {"block_size": 9}}))
    assert nested.block_size == 9


# -- malformed input, each a typed error that says what, where and how ------------------------------


def _write(tmp_path: Path, config: dict | str | bytes, name: str = "ckpt") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    data = config if isinstance(config, (str, bytes)) else json.dumps(config)
    (folder / "config.json").write_bytes(data.encode() if isinstance(data, str) else data)
    return folder


def test_missing_config_json(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidCheckpointError) as info:
        census(tmp_path / "empty")
    assert "config.json" in info.value.message and "missing" in info.value.message


def test_missing_folder(tmp_path):
    with pytest.raises(InvalidCheckpointError, match="does not exist"):
        census(tmp_path / "nope")


def test_a_file_that_is_not_config_json(tmp_path):
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(InvalidCheckpointError, match="is a file"):
        census(tmp_path / "weights.bin")


def test_config_json_path_means_its_folder(tmp_path, written):
    assert census(written["specforge_dflash"] / "config.json").block_size == 4


@pytest.mark.parametrize(
    "text", ['{"block_size": 4,', "", "not json", b"\xff\xfe{}", "[1, 2]", '"a string"', "null", "[" * 100000]
)
def test_invalid_json(tmp_path, text):
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, text))
    assert "config.json" in info.value.message


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"block_size": "8"}, "block_size"),
        ({"block_size": 8.0}, "block_size"),
        ({"block_size": True}, "block_size"),
        ({"block_size": 8, "dflash_config": [1, 2]}, "dflash_config"),
        ({"block_size": 8, "dflash_config": "x"}, "dflash_config"),
        ({"block_size": 8, "architectures": "DFlashDraftModel"}, "architectures"),
        ({"block_size": 8, "architectures": [3]}, "architectures"),
        ({"block_size": 8, "sample_from_anchor": "true"}, "sample_from_anchor"),
        ({"block_size": 8, "dflash_config": {"query_zero_predicts_next": 1}}, "query_zero_predicts_next"),
        ({"block_size": 8, "markov_rank": -1}, "markov_rank"),
        ({"block_size": 8, "markov_rank": "8"}, "markov_rank"),
        ({"block_size": 8, "dflash_config": {"target_layer_ids": "1,2"}}, "target_layer_ids"),
        ({"block_size": 8, "dflash_config": {"target_layer_ids": [1, -2]}}, "target_layer_ids[1]"),
        ({"block_size": 8, "dflash_config": {"mask_token_id": -1}}, "mask_token_id"),
        ({"block_size": 8, "dflash_config": {"mask_token_id": "<|MASK|>"}}, "mask_token_id"),
        ({"block_size": 8, "dflash_config": {"projector_type": 3}}, "projector_type"),
        ({"block_size": 8, "speculators_config": {"proposal_methods": {"a": 1}}}, "proposal_methods"),
        ({"block_size": 8, "speculators_config": {"proposal_methods": [7]}}, "proposal_methods[0]"),
        ({"block_size": 8, "speculators_config": {"speculative_tokens": "7"}}, "speculative_tokens"),
        ({"block_size": 8, "speculators_model_type": 1}, "speculators_model_type"),
        ({"block_size": 8, "num_target_layers": 0}, "num_target_layers"),
        ({"block_size": 8, "vocab_size": "big"}, "vocab_size"),
        ({"block_size": 8, "speculative_config": [1]}, "speculative_config"),
    ],
)
def test_wrong_types_name_the_key_and_file(tmp_path, config, key):
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, config))
    assert key in info.value.message
    assert "config.json" in info.value.message and "config.json" in info.value.where


@pytest.mark.parametrize("b", [1, 0, -4])
def test_block_size_below_two(tmp_path, b):
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, {"architectures": ["DSparkDraftModel"], "block_size": b}))
    assert f"block_size = {b}" in info.value.message and ">= 2" in info.value.message


def test_no_block_size_is_classified_and_the_geometry_names_the_flag(tmp_path):
    # a published DFlash config carries no block size: sglang takes --speculative-dflash-block-size
    cfg = census(_write(tmp_path, {"architectures": ["DFlashDraftModel"]}))
    assert cfg.block_size is None and cfg.to_json()["block_size"] is None
    assert DsparkHarvest.explain(cfg, environ={}).harvest is DsparkHarvest.DFLASH
    with pytest.raises(MissingBlockSizeError) as info:
        RoundGeometry(DsparkHarvest.DFLASH, cfg.block_size)
    assert "--speculative-dflash-block-size" in info.value.message and info.value.kind == "invalid"
    with pytest.raises(MissingBlockSizeError, match="--speculative-dspark-block-size"):
        RoundGeometry(DsparkHarvest.DSPARK, None)


def test_no_block_size_with_an_explicit_flag_is_classified(tmp_path):
    config = {"architectures": ["DSparkDraftModel"], "dflash_config": {"sample_from_anchor": False}}
    cfg = census(_write(tmp_path, config))
    assert cfg.block_size is None and not cfg.strategy_dspark and cfg.deciding_tier == TIER_EXPLICIT


def test_declared_draft_count_without_block_size_casts_no_vote(tmp_path):
    config = {"speculators_model_type": "dspark", "speculators_config": {"speculative_tokens": 7}}
    cfg = census(_write(tmp_path, config))
    sig = _signals(cfg)["config.json:speculators_config.speculative_tokens"]
    assert (sig.tier, sig.vote) == (TIER_INFO, None) and cfg.strategy_dspark


@pytest.mark.parametrize("b", [1025, 10**7, 10**9, 2**63])
def test_absurd_block_size_is_refused(tmp_path, b):
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, {"architectures": ["DFlashDraftModel"], "block_size": b}))
    assert f"block_size = {b}" in info.value.message and "at most 1024" in info.value.message
    with pytest.raises(GeometryError, match="beyond 1024"):
        RoundGeometry(DsparkHarvest.DSPARK, b)


def test_mask_id_outside_vocab(tmp_path):
    cfg = {"block_size": 8, "vocab_size": 100, "dflash_config": {"mask_token_id": 100}}
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, cfg))
    assert "mask_token_id = 100" in info.value.message and "100 tokens" in info.value.message


def test_mask_id_inside_vocab_and_absent_mask_are_fine(tmp_path):
    assert (
        census(_write(tmp_path, {"block_size": 8, "vocab_size": 100, "mask_token_id": 99})).mask_token_id
        == 99
    )
    assert census(_write(tmp_path, {"block_size": 8, "vocab_size": 100})).mask_token_id is None


def test_mask_ids_that_disagree(tmp_path):
    cfg = {"block_size": 8, "mask_token_id": 5, "dflash_config": {"mask_token_id": 6}}
    with pytest.raises(InvalidCheckpointError, match="disagree"):
        census(_write(tmp_path, cfg))


def test_target_layer_outside_the_target(tmp_path):
    cfg = {"block_size": 8, "num_target_layers": 4, "dflash_config": {"target_layer_ids": [1, 4]}}
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, cfg))
    assert "target_layer_ids[1] = 4" in info.value.message and "4 layers" in info.value.message


@pytest.mark.parametrize(
    "content",
    [
        b"",  # empty
        b"\x10\x00\x00\x00\x00\x00\x00\x00{not json header}",  # header is not JSON
        b"\xff\xff\xff\xff\xff\xff\xff\x7f{}",  # header length beyond the file
        b'\x08\x00\x00\x00\x00\x00\x00\x00{"a":1}',  # a header that is not a tensor table
    ],
)
def test_unreadable_safetensors_header(tmp_path, content):
    folder = _write(tmp_path, {"architectures": ["DFlashDraftModel"], "block_size": 8})
    (folder / "model.safetensors").write_bytes(content)
    with pytest.raises(InvalidCheckpointError) as info:
        census(folder)
    assert "model.safetensors" in info.value.message and "header" in info.value.message


def test_index_weight_map_keys_are_read(tmp_path):
    folder = _write(tmp_path, {"block_size": 8})
    index = {
        "metadata": {},
        "weight_map": {"markov_head.markov_w1.weight": "model-00002-of-00002.safetensors"},
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    cfg = census(folder)
    sig = _signals(cfg)["model.safetensors.index.json:markov_head.*"]
    assert (sig.tier, sig.vote) == (TIER_STRUCTURAL, "dspark")


@pytest.mark.parametrize("content", ["{", '{"weight_map": [1]}', "[]"])
def test_broken_index(tmp_path, content):
    folder = _write(tmp_path, {"block_size": 8})
    (folder / "model.safetensors.index.json").write_text(content)
    with pytest.raises(InvalidCheckpointError, match="model.safetensors.index.json"):
        census(folder)


# -- training_state.pt ---------------------------------------------------------------------------------


def _torch_zip(path: Path, payload: bytes) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", payload)
        archive.writestr("archive/version", "3\n")


class _Boom:
    def __reduce__(self):
        return (Path.touch, (Path("PWNED"),))


def test_training_state_never_runs_pickled_code(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    folder = _write(tmp_path, {"block_size": 8})
    _torch_zip(folder / "training_state.pt", pickle.dumps({"strategy": "dspark", "x": _Boom()}))
    with pytest.raises(InvalidCheckpointError, match="training_state.pt"):
        census(folder)
    assert not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize(
    ("state", "error"),
    [
        ({"strategy": "domino"}, UnsupportedCheckpointError),
        ({"strategy": "eagle3"}, UnsupportedCheckpointError),
        ({"strategy": 3}, UnsupportedCheckpointError),
        (["not", "a", "dict"], InvalidCheckpointError),
    ],
)
def test_training_state_refusals(tmp_path, state, error):
    folder = _write(tmp_path, {"block_size": 8})
    _torch_zip(folder / "training_state.pt", pickle.dumps(state))
    with pytest.raises(error) as info:
        census(folder)
    assert "training_state.pt" in info.value.message


def test_training_state_without_strategy_is_no_vote(tmp_path):
    folder = _write(tmp_path, {"block_size": 8})
    _torch_zip(folder / "training_state.pt", pickle.dumps({"global_step": 3}))
    cfg = census(folder)
    assert _signals(cfg)["training_state.pt:strategy"].vote is None and cfg.deciding_tier is None


def test_training_state_with_the_containers_torch_save_writes(tmp_path):
    import torch

    folder = _write(tmp_path, {"block_size": 8})
    layer = torch.nn.Linear(2, 2)
    state = {
        "strategy": "dflash",
        "draft_state_dict": layer.state_dict(),  # an OrderedDict of tensors
        "optimizer": torch.optim.AdamW(layer.parameters()).state_dict(),
        "shape": torch.Size([2, 3]),
        "seen": {1, 2},
        "frozen": frozenset({3}),
    }
    torch.save(state, folder / "training_state.pt")
    sig = _signals(census(folder))["training_state.pt:strategy"]
    assert (sig.value, sig.tier, sig.vote) == ("dflash", TIER_EXPLICIT, "dflash")


def test_training_state_that_is_not_a_zip(tmp_path):
    folder = _write(tmp_path, {"block_size": 8})
    (folder / "training_state.pt").write_bytes(b"\x80\x02legacy")
    with pytest.raises(InvalidCheckpointError, match="training_state.pt"):
        census(folder)


# -- hub ids: the local cache only -------------------------------------------------------------------


def test_hub_id_missing_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InvalidCheckpointError) as info:
        census("z-lab/Qwen3-8B-DFlash-b16")
    msg = info.value.message
    assert "not in the local Hugging Face cache" in msg and f"{hub_cli()} download" in msg
    assert hub_cli() in ("hf", "huggingface-cli")  # the installed huggingface_hub's own command
    assert str(tmp_path / "hf" / "hub") in msg


def test_hub_id_in_the_cache_resolves(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    repo = cache / "models--org--tiny-dspark"
    revision = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    write_checkpoint(tmp_path, "specforge_dspark")
    for f in (tmp_path / "specforge_dspark").iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.chdir(tmp_path)  # "org/tiny-dspark" is not a local folder here
    cfg = census("org/tiny-dspark")
    assert cfg.block_size == 7 and DsparkHarvest.explain(cfg, environ={}).harvest is DsparkHarvest.DSPARK
    assert Path(cfg.path) == snapshot


# -- the census stays light ------------------------------------------------------------------------------


def test_census_never_imports_torch(written):
    code = (
        "import sys; from sglang_dspark_plugin.census import census; "
        f"cfg = census({str(written['specforge_dspark'])!r}); "
        "print(cfg.block_size, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["7", "False"]


def test_null_block_size_is_not_given(tmp_path):
    cfg = census(_write(tmp_path, {"block_size": None, "dflash_config": {"block_size": 11}}))
    assert cfg.block_size == 11
    assert census(_write(tmp_path, {"block_size": None})).block_size is None


def test_target_layer_ids_that_disagree(tmp_path):
    cfg = {"block_size": 8, "target_layer_ids": [1, 2], "dflash_config": {"target_layer_ids": [1, 3]}}
    with pytest.raises(InvalidCheckpointError) as info:
        census(_write(tmp_path, cfg))
    assert "target layer ids disagree" in info.value.message and "[1, 3]" in info.value.message


def test_aux_layer_ids_only_when_nothing_else_names_the_layers(tmp_path):
    both = {"block_size": 8, "aux_hidden_state_layer_ids": [2, 3], "dflash_config": {"target_layer_ids": [1]}}
    assert census(_write(tmp_path, both)).target_layer_ids == (1,)
    aux_only = {"block_size": 8, "aux_hidden_state_layer_ids": [2, 3]}
    assert census(_write(tmp_path, aux_only)).target_layer_ids == (2, 3)
