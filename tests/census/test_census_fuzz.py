"""Random JSON configs: the census returns a result or raises one of the typed errors, nothing else."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sglang_dspark_plugin import DsparkHarvest, RoundGeometry
from sglang_dspark_plugin.census import DFLASH_ARCHITECTURES, DSPARK_ARCHITECTURES, census
from sglang_dspark_plugin.census.draft_config import DflashCfg
from sglang_dspark_plugin.errors import CensusConflictError, DsparkHarvestError, MissingBlockSizeError

KNOWN_KEYS = [
    "architectures",
    "block_size",
    "dspark_block_size",
    "sample_from_anchor",
    "query_zero_predicts_next",
    "dspark_bonus_anchor",
    "markov_rank",
    "dspark_markov_rank",
    "dspark_noise_token_id",
    "dspark_target_layer_ids",
    "mask_token_id",
    "target_layer_ids",
    "aux_hidden_state_layer_ids",
    "num_target_layers",
    "vocab_size",
    "hidden_size",
    "projector_type",
    "shift_label",
    "speculators_model_type",
    "speculative_tokens",
    "proposal_methods",
]
SECTIONS = [
    "dflash_config",
    "dspark_config",
    "speculative_config",
    "speculators_config",
    "transformer_layer_config",
]
NAMES = sorted(DFLASH_ARCHITECTURES | DSPARK_ARCHITECTURES) + [
    "DominoDraftModel",
    "LlamaForCausalLM",
    "dflash",
    "dspark",
    "domino",
    "dspark_v4",
    "eagle3",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=20),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(NAMES),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=12,
)
flat = st.dictionaries(st.sampled_from(KNOWN_KEYS) | st.text(max_size=6), values, max_size=8)


@st.composite
def plausible(draw: st.DrawFn) -> dict:
    """Mostly well-typed configs, so that many examples get past validation to the tier rule."""
    b = draw(st.integers(min_value=2, max_value=16))
    flag = st.none() | st.booleans()
    layer_ids = st.lists(st.integers(min_value=0, max_value=5), max_size=3)
    keys = {
        "architectures": st.lists(st.sampled_from(NAMES), max_size=2),
        "sample_from_anchor": flag,
        "query_zero_predicts_next": flag,
        "dspark_bonus_anchor": flag,
        "markov_rank": st.none() | st.integers(min_value=0, max_value=8),
        "dspark_markov_rank": st.none() | st.integers(min_value=0, max_value=8),
        "projector_type": st.none() | st.sampled_from(NAMES),
        "shift_label": flag,
        "mask_token_id": st.integers(min_value=0, max_value=300),
        "vocab_size": st.integers(min_value=200, max_value=300),
        "target_layer_ids": layer_ids,
        "num_target_layers": st.integers(min_value=4, max_value=8),
        "dspark_block_size": st.just(b),
        "speculators_model_type": st.sampled_from(["dflash", "dspark", "dflash2"]),
        "speculators_config": st.fixed_dictionaries(
            {
                "proposal_methods": st.lists(
                    st.fixed_dictionaries({"speculative_tokens": st.sampled_from([b - 1, b])})
                )
            }
        ),
    }
    top = draw(st.fixed_dictionaries({"block_size": st.just(b)}, optional=keys))
    nested = {k: v for k, v in keys.items() if k not in ("architectures", "speculators_config")}
    for section in draw(
        st.lists(st.sampled_from(["dflash_config", "dspark_config"]), max_size=2, unique=True)
    ):
        top[section] = draw(st.fixed_dictionaries({}, optional=nested))
    return top


configs = st.one_of(
    plausible(),
    st.builds(
        lambda top, sections, b: {**top, **sections, **({"block_size": b} if b is not None else {})},
        flat,
        st.dictionaries(st.sampled_from(SECTIONS), flat | values, max_size=3),
        st.none() | st.integers(min_value=-1, max_value=17),
    ),
    values,  # not even an object, sometimes
)
weight_names = st.lists(
    st.sampled_from(
        [
            "markov_head.markov_w1.weight",
            "logit_head.markov_head.markov_w2.weight",
            "prefix_gru.weight_ih_l0",
            "embed_proj.0.weight",
            "candidate_selector.proj.weight",
            "confidence_head.proj.weight",
            "fc.weight",
        ]
    ),
    max_size=3,
)


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, weights=st.none() | weight_names)
def test_random_configs_give_a_result_or_a_typed_error(config, weights):
    with tempfile.TemporaryDirectory(prefix="census-fuzz-") as tmp:
        _check(Path(tmp), config, weights)


def _check(folder: Path, config: object, weights: list[str] | None) -> None:
    (folder / "config.json").write_text(json.dumps(config))
    if weights is not None:
        (folder / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": dict.fromkeys(weights, "model.safetensors")})
        )
    try:
        cfg = census(folder)
    except DsparkHarvestError as exc:
        assert exc.kind in ("invalid", "unsupported")
        assert exc.message
        event(f"refused: {exc.kind}")
        return
    assert isinstance(cfg, DflashCfg)
    assert cfg.block_size is None or (isinstance(cfg.block_size, int) and cfg.block_size >= 2)
    json.dumps(cfg.to_json())  # the evidence is JSON-able
    try:
        resolution = DsparkHarvest.explain(cfg, environ={})
    except CensusConflictError:
        assert cfg.conflict
        event("conflict")
        resolution = DsparkHarvest.explain(cfg, environ={"MEMRA_DSPARK_HARVEST": "dflash"})
    event(f"resolved: {resolution.source}")
    if cfg.block_size is None:
        with pytest.raises(MissingBlockSizeError):
            RoundGeometry(resolution.harvest, cfg.block_size)
        event("no block size")
        return
    geometry = RoundGeometry(resolution.harvest, cfg.block_size)
    assert geometry.trained_offsets == tuple(range(1, geometry.gamma + 1))
