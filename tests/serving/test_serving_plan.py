"""The serving plan without sglang: every fixture checkpoint (the census's and the released formats')
and every embedded drafter, on the support records of both sglang lines (0.5.17: no mask-fill DSPARK
layout; 0.5.23: with it)."""

from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import pytest
from checkpoints import FIXTURES, write_checkpoint
from plan_expectations import (
    ENVS,
    EXPECTED,
    RELEASES,
    outcome_of,
    refused,
    relative_where,
)
from released_checkpoints import RELEASED

from sglang_dspark_plugin.census.architectures import DSPARK_ARCHITECTURES, SGLANG_DSPARK_ARM
from sglang_dspark_plugin.errors import DsparkHarvestError, GeometryError
from sglang_dspark_plugin.harvest import ENV_VAR, DsparkHarvest
from sglang_dspark_plugin.serving import (
    DFLASH,
    DSPARK,
    LaunchRequest,
    ServePlan,
    ServeRefusal,
    SglangSupport,
    make_plan,
)
from sglang_dspark_plugin.serving.route import DFLASH_MODEL, DSPARK_MODEL, ZERO_HEAD, ServedHead
from sglang_dspark_plugin.serving.stages import require_row_headroom

ALL_FIXTURES = {**FIXTURES, **RELEASED}  # the census fixtures and the released formats
SUPPORTS = {v: SglangSupport.for_version(v) for v in ("0.5.17", "0.5.23")}
EMBEDDED_BUILTIN = {  # drafter -> (builtin, sample_from_anchor, verify window) where it is served
    "drafter-dflash": ("DFLASH", None, 8),
    "drafter-dspark": ("DSPARK", True, 9),
    "drafter-dspark-markov": ("DSPARK", True, 8),
    "drafter-dspark-maskfill": ("DSPARK", False, 8),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plan-fixtures")
    return {name: write_checkpoint(root, fx) for name, fx in ALL_FIXTURES.items()}


def _plan(draft: str | Path, version: str, env: str | None = None, **flags: object) -> ServePlan:
    return make_plan(LaunchRequest(draft=str(draft), harvest_env=env, **flags), SUPPORTS[version])  # type: ignore[arg-type]


def _check_plan(plan: ServePlan, expected_arm: str, version: str) -> None:
    """What every plan must say, whatever the drafter."""
    g = plan.geometry
    assert plan.harvest.name() == expected_arm
    assert g.verify_window == g.gamma + 1 and plan.manifest["harvest"] == expected_arm
    declared = plan.declared_args
    assert declared["speculative_algorithm"] == plan.builtin in (DFLASH, DSPARK)
    assert declared["speculative_num_draft_tokens"] == g.verify_window
    if expected_arm == "dspark":
        assert plan.builtin == DSPARK and plan.layout.sample_from_anchor is True
    mask_fill_dspark = plan.layout.mask_fill_dspark
    assert mask_fill_dspark == (expected_arm == "dflash" and plan.builtin == DSPARK)
    assert not mask_fill_dspark or SUPPORTS[version].mask_fill_dspark  # 0.5.17 has no such layout
    # DSPARK's gamma flag: b-1 for a mask-fill DSpark drafter, else the builtin reads the checkpoint
    assert declared.get("speculative_dspark_block_size") == (g.gamma if mask_fill_dspark else None)
    route = plan.route
    head = route.head
    assert (head is None) == (plan.builtin == DFLASH)
    if head is not None:  # one form: the census's head, or the zero head where the checkpoint has none
        assert head.rank >= 1 and head.head_type in ("vanilla", "gated", "rnn")
        assert (head is ZERO_HEAD) == (plan.cfg.markov_head is None)
        assert route.loads_as == DSPARK_MODEL and set(route.names) <= set(SGLANG_DSPARK_ARM) and route.names
        assert route.mask_token_id == plan.cfg.mask_token_id
        assert route.sample_from_anchor == plan.layout.sample_from_anchor
    else:  # DFLASH: a DSpark-named drafter (no head) loads as DFlashDraftModel, any other as itself
        assert route.loads_as in (None, DFLASH_MODEL) and (route.loads_as is None) == (not route.names)
    if plan.builtin == DSPARK:
        assert plan.cfg.mask_token_id is not None
        assert any(a in SGLANG_DSPARK_ARM for a in plan.architectures)
    if plan.builtin == DFLASH and plan.cfg.markov_head is not None:
        assert not any(a in DSPARK_ARCHITECTURES for a in plan.architectures)  # a head never dropped
    # carried to the schedulers as it is (spawn pickles, the draft worker deep-copies)
    assert pickle.loads(pickle.dumps(plan)) == plan and copy.deepcopy(plan) == plan


def test_the_table_states_every_fixture_on_every_release() -> None:
    assert set(EXPECTED) == set(ALL_FIXTURES)
    assert all(set(rows) == set(RELEASES) for rows in EXPECTED.values())


@pytest.mark.parametrize("version", SUPPORTS)
@pytest.mark.parametrize("env", ENVS, ids=lambda v: f"env={v!r}")
@pytest.mark.parametrize("name", sorted(ALL_FIXTURES))
def test_the_plan_of_every_fixture(name: str, env: str | None, version: str, folders, plan_target) -> None:
    """The plan serves or refuses each fixture exactly as ``plan_expectations.EXPECTED`` states: a plan
    that refused too much fails as surely as one that refused too little."""
    fx = ALL_FIXTURES[name]
    expected = EXPECTED[name][version][ENVS.index(env)]
    request = LaunchRequest(draft=str(folders[name]), target=str(plan_target), harvest_env=env)
    try:
        plan = make_plan(request, SUPPORTS[version])
    except DsparkHarvestError as err:
        assert isinstance(err, ValueError), "sglang shows argument errors as ValueError"
        assert refused(err.kind, relative_where(err.where, str(folders[name]))) == expected, err.message
        if err.kind == "conflict":
            assert ENV_VAR in err.message  # the message names the override
        return
    assert outcome_of(plan.builtin, plan.harvest.name(), plan.layout.mask_fill_dspark) == expected
    _check_plan(plan, plan.harvest.name(), version)
    assert plan.resolution.source == ("env" if env is not None else fx.expect_source)
    if fx.block_size is not None:
        assert plan.geometry.block_size == fx.block_size


@pytest.mark.parametrize("version", SUPPORTS)
@pytest.mark.parametrize("drafter", sorted(EMBEDDED_BUILTIN))
def test_the_plan_of_every_embedded_drafter(drafter: str, version: str) -> None:
    from sglang_dspark_plugin.embedded import EMBEDDED

    builtin, sample_from_anchor, window = EMBEDDED_BUILTIN[drafter]
    request = LaunchRequest(draft=str(EMBEDDED.root / drafter), target=str(EMBEDDED.target))
    if sample_from_anchor is False and not SUPPORTS[version].mask_fill_dspark:
        with pytest.raises(ServeRefusal, match="0.5.19 or later") as info:
            make_plan(request, SUPPORTS[version])
        assert info.value.kind == "unsupported"
        return
    plan = make_plan(request, SUPPORTS[version])
    assert (plan.builtin, plan.layout.sample_from_anchor, plan.geometry.verify_window) == (
        builtin,
        sample_from_anchor,
        window,
    )
    _check_plan(plan, plan.cfg.verdict or "dflash", version)


def test_the_plan_reads_no_process_environment(folders, monkeypatch: pytest.MonkeyPatch) -> None:
    """The settings are part of the request: a variable set in the process decides nothing here."""
    monkeypatch.setenv(ENV_VAR, "dspark")
    plan = _plan(folders["specforge_dflash"], "0.5.23")
    assert plan.harvest is DsparkHarvest.DFLASH and plan.resolution.source == "census"
    forced = _plan(folders["specforge_dflash"], "0.5.23", env="dspark")
    assert forced.harvest is DsparkHarvest.DSPARK and forced.resolution.warnings


def test_a_launch_request_maps_sglangs_argument_names() -> None:
    args = {
        "speculative_draft_model_path": "org/draft",
        "speculative_draft_model_revision": "abc123",
        "model_path": "/t",
        "speculative_num_draft_tokens": 8,
        "speculative_dflash_block_size": None,
        "speculative_dspark_block_size": "8",
        "disaggregation_mode": "null",
    }
    request = LaunchRequest.of(args, {ENV_VAR: "dflash", "MEMRA_DSPARK_MANIFEST": "/m.json"})
    assert (request.draft, request.draft_revision, request.target) == ("org/draft", "abc123", "/t")
    assert request.block_size_flags() == {
        "--speculative-dflash-block-size": None,
        "--speculative-dspark-block-size": "8",
    }
    assert (request.harvest_env, request.manifest_path) == ("dflash", "/m.json")
    assert LaunchRequest.of({}, {}).draft is None


def test_sglang_support_by_version() -> None:
    assert SglangSupport.for_version("0.5.17").mask_fill_dspark is False
    assert SglangSupport.for_version("0.5.23").mask_fill_dspark is True
    assert SglangSupport.for_version("0.6.0rc1").mask_fill_dspark is True


def test_refusals_name_the_flag(folders) -> None:
    draft = folders["specforge_dflash"]
    with pytest.raises(DsparkHarvestError, match="needs a draft checkpoint"):
        make_plan(LaunchRequest(draft=None), SUPPORTS["0.5.23"])
    with pytest.raises(GeometryError) as info:
        _plan(draft, "0.5.23", num_draft_tokens=9)  # wider than the trained block of 4
    assert info.value.where == "--speculative-num-draft-tokens"
    with pytest.raises(GeometryError, match="disagree"):
        _plan(draft, "0.5.23", num_draft_tokens=3, dflash_block_size=2)
    with pytest.raises(DsparkHarvestError, match="is not a block size") as bad:
        _plan(draft, "0.5.23", num_draft_tokens="eight")
    assert bad.value.where == "--speculative-num-draft-tokens"
    with pytest.raises(ServeRefusal, match="build_disagg_draft_input") as pd:
        _plan(draft, "0.5.17", disaggregation_mode="decode")  # 0.5.17 builds it for DSPARK only
    assert pd.value.kind == "unsupported"
    # the releases it names come from the release table's pd_builtins, not from the message's text
    assert "0.5.17 to 0.5.19 DSPARK; 0.5.20 on DFLASH and DSPARK" in pd.value.message


@pytest.mark.parametrize("mode", ("prefill", "decode"))
def test_disaggregation_where_the_builtin_serves_it(mode: str, folders) -> None:
    dflash, dspark = folders["specforge_dflash"], folders["dspark_markov_rank0"]
    assert _plan(dflash, "0.5.23", disaggregation_mode=mode).builtin == DFLASH
    assert _plan(dspark, "0.5.17", disaggregation_mode=mode).builtin == DSPARK
    advice = _plan(dspark, "0.5.23", disaggregation_mode=mode).advice
    assert bool(advice) == (mode == "decode") and all("MEMRA_DSPARK_PEER_MANIFEST" in a for a in advice)


def test_a_decode_server_must_serve_its_prefill_servers_plan(folders, tmp_path: Path) -> None:
    draft = folders["specforge_dflash"]
    prefill = _plan(draft, "0.5.23", disaggregation_mode="prefill")
    peer = tmp_path / "prefill.manifest.json"
    peer.write_text(json.dumps(prefill.manifest, default=str))
    same = _plan(draft, "0.5.23", disaggregation_mode="decode", peer_manifest=str(peer))
    assert same.advice == () and same.manifest["draft_content"] == prefill.manifest["draft_content"]
    with pytest.raises(ServeRefusal, match="differs from its prefill server") as info:
        _plan(draft, "0.5.23", env="dspark", disaggregation_mode="decode", peer_manifest=str(peer))
    assert "harvest" in info.value.message and "verify_window" in info.value.message
    other = folders["zlab_dflash"]  # another checkpoint: its content fingerprint differs
    with pytest.raises(ServeRefusal, match="draft_content"):
        _plan(other, "0.5.23", disaggregation_mode="decode", peer_manifest=str(peer))
    with pytest.raises(DsparkHarvestError, match="no such file"):
        _plan(draft, "0.5.23", disaggregation_mode="decode", peer_manifest=str(tmp_path / "none.json"))
    # a huge field is named, not repeated whole (issue 36: 15 MiB made a 15.7M-character message)
    huge = tmp_path / "huge.manifest.json"
    huge.write_text(json.dumps({**prefill.manifest, "draft_content": "x" * 10_000_000}, default=str))
    with pytest.raises(ServeRefusal, match="draft_content") as info:
        _plan(draft, "0.5.23", disaggregation_mode="decode", peer_manifest=str(huge))
    assert len(info.value.message) < 2_000
    deep = tmp_path / "deep.manifest.json"
    deep.write_text('{"harvest": ' + "[" * 500 + "]" * 500 + "}")
    with pytest.raises(DsparkHarvestError, match="not a geometry manifest"):
        _plan(draft, "0.5.23", disaggregation_mode="decode", peer_manifest=str(deep))


@pytest.mark.parametrize(
    ("drafter", "flags", "gamma", "declared_gamma"),
    [
        ("drafter-dflash", {"dflash_block_size": 4}, 3, None),
        ("drafter-dflash", {"num_draft_tokens": 5}, 4, None),
        ("drafter-dspark-markov", {"dspark_block_size": 4}, 4, 4),
        ("drafter-dspark-markov", {"num_draft_tokens": 5}, 4, 4),  # DSPARK needs its gamma flag then
        ("drafter-dspark-maskfill", {"dspark_block_size": 3}, 3, 3),
        ("drafter-dspark-maskfill", {"dspark_block_size": 7}, 7, 7),  # the trained gamma, b-1: not narrower
    ],
)
def test_a_narrower_width_is_served_in_its_builtins_terms(drafter, flags, gamma, declared_gamma) -> None:
    from sglang_dspark_plugin.embedded import EMBEDDED

    plan = _plan(EMBEDDED.root / drafter, "0.5.23", **flags)
    assert plan.geometry.gamma == gamma and plan.geometry.verify_window == gamma + 1
    assert plan.declared_args.get("speculative_dspark_block_size") == declared_gamma
    assert plan.narrowed == (gamma != _plan(EMBEDDED.root / drafter, "0.5.23").geometry.gamma)
    rows = plan.geometry.harvested_rows
    assert plan.geometry.trained_offsets == tuple(range(1, gamma + 1)) and len(rows) == gamma  # aligned


def test_a_markov_head_only_the_tensors_declare(tmp_path) -> None:
    """The census keeps the head itself (rank, type, who declared it): the plan serves it as sglang's
    DSPARK reads it, for the shifted arm and for the mask-fill layout alike."""
    from checkpoints import Fixture

    base = FIXTURES["specforge_dspark"]
    keys = ("markov_rank", "markov_head_type")
    nested = {k: v for k, v in base.config["dflash_config"].items() if k not in keys}
    fx = Fixture("tensors_only", {**base.config, "dflash_config": nested}, base.tensors, base.expect)
    draft = write_checkpoint(tmp_path, fx)
    shifted = _plan(draft, "0.5.23")
    head = shifted.cfg.markov_head
    assert shifted.cfg.markov_rank is None and head is not None
    assert (head.rank, head.head_type, head.declared_by) == (8, "gated", "tensors")
    assert shifted.route.head == ServedHead(8, "gated") and shifted.manifest["markov_head"]["rank"] == 8
    mask_fill = _plan(draft, "0.5.23", env="dflash")
    assert mask_fill.layout.mask_fill_dspark and mask_fill.route.head == ServedHead(8, "gated")
    with pytest.raises(ServeRefusal, match="0.5.19 or later"):
        _plan(draft, "0.5.17", env="dflash")


def test_a_releases_support_record_follows_the_measured_releases() -> None:
    # DSPARK's mask-fill layout from 0.5.19; DFLASH's prefill->decode draft input from 0.5.20
    records = {v: SglangSupport.for_version(v) for v in ("0.5.18", "0.5.19", "0.5.20")}
    assert [r.mask_fill_dspark for r in records.values()] == [False, True, True]
    assert [r.disaggregation for r in records.values()] == [("DSPARK",), ("DSPARK",), ("DFLASH", "DSPARK")]


def test_a_release_whose_dflash_reads_the_anchor_first_keys_never_shifts_twice(folders) -> None:
    """sglang PR 40203 makes DFLASH honour sample_from_anchor / query_zero_predicts_next itself (PR 40181
    refuses them): a draft declaring the anchor-first layout, served mask-fill through DFLASH under the
    override, would be shifted a second time. On such a release the plan refuses it; DSPARK is unaffected."""
    import dataclasses

    reads = dataclasses.replace(SUPPORTS["0.5.23"], dflash_reads_layout=True)
    draft = str(folders["query_zero_predicts_next"])  # dflash_config.query_zero_predicts_next: true
    served = make_plan(LaunchRequest(draft=draft, harvest_env="dflash"), SUPPORTS["0.5.23"])
    assert served.builtin == DFLASH  # today's releases read no layout key: the override is served
    with pytest.raises(DsparkHarvestError, match="second time") as info:
        make_plan(LaunchRequest(draft=draft, harvest_env="dflash"), reads)
    assert info.value.kind == "unsupported" and info.value.where.endswith("query_zero_predicts_next")
    assert make_plan(LaunchRequest(draft=draft), reads).builtin == DSPARK  # its census: shifted
    plain = make_plan(LaunchRequest(draft=str(folders["zlab_dflash"])), reads)  # declares no layout key
    assert plain.builtin == DFLASH


@pytest.mark.parametrize("window", [8, 9, 12, 13, 16, 17])
@pytest.mark.parametrize("page_size", [1, 2, 4])
def test_the_row_holds_every_decode_reserve(window: int, page_size: int) -> None:
    """sglang reserves committed + 2W slots a round (page-aligned); a decoding request has at most
    context_len - 4 committed; sglang's own row is context_len + 4 + W at page size 1. The plugin's
    headroom holds the last round's reserve at every W and page size, and is never narrower than sglang's."""
    from sglang_dspark_plugin.serving.context_edge import overruns_row, reserve_headroom

    sglang_extra = 4 + window  # page size 1; at page size > 1 sglang already applies the reserve rule
    headroom = reserve_headroom(window, page_size)
    assert headroom >= sglang_extra and not overruns_row(window, page_size, headroom)
    last_reserve = -4 + 2 * window + page_size - 1  # beyond context_len, page-aligned upwards
    assert last_reserve <= headroom
    # sglang's own page-size-1 row: past it exactly where W > 8, the condition docs/sglang.md states
    assert overruns_row(window, 1, sglang_extra) == (window > 8)


@pytest.mark.parametrize(
    "drafter, flags, widened",
    [
        ("drafter-dspark", {}, True),  # shifted, block 8: W = 9 at sglang's default page size
        ("drafter-dspark", {"speculative_dspark_block_size": 7}, True),  # narrowed: W = 8, still 2W > 4 + W
        ("drafter-dflash", {}, True),  # mask-fill, block 8: W = 8
    ],
)
def test_the_plan_widens_the_row_and_steps_aside_where_sglang_sizes_it(
    drafter: str, flags: dict, widened: bool
) -> None:
    from sglang_dspark_plugin.embedded import EMBEDDED

    request = {}
    if "speculative_dspark_block_size" in flags:
        request["dspark_block_size"] = flags["speculative_dspark_block_size"]
    plan = _plan(EMBEDDED.root / drafter, "0.5.23", **request)
    w = plan.geometry.verify_window
    headroom, said = plan.row_headroom(1, 4 + w)
    assert headroom == 2 * w and "widened" in said and "33579" in said
    # a release that sizes the row for the reserve itself (PR 33581): the plugin adds nothing
    assert plan.row_headroom(1, 2 * w + 3) == (2 * w + 3, plan.row_headroom(1, 2 * w + 3)[1])
    assert "adds nothing" in plan.row_headroom(1, 2 * w + 3)[1]
    # page size 2: sglang's own rule already (2W + 1); the plugin agrees with it
    assert plan.row_headroom(2, 2 * w + 1)[0] == 2 * w + 1
    assert not any("req_to_token" in a for a in plan.advice)  # prevented, so no WARNING is left
    # rows narrower than the reserve (the hook did not take effect): the worker's check refuses
    require_row_headroom(plan, 2 * w, 1)
    with pytest.raises(ServeRefusal, match="--page-size 2") as refused:
        require_row_headroom(plan, 4 + w, 1)
    assert refused.value.kind == "unsupported" and "another request's row" in refused.value.message
