"""A launch that names no draft: the plan finds a DSPARK draft bundled in the target where sglang's
builtin finds it (the target config's ``dspark_*`` keys first, then a ``dspark/`` subfolder on sglang
0.5.23), censuses that very folder, records how it was found, and refuses, typed, where the builtin
finds none. No sglang: the support records of both sglang lines stand for the versions."""

from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path

import pytest
from bundled_checkpoints import RANK, hub_cache, keys_target, subfolder_target, v4_tensors

from sglang_dspark_plugin.errors import DsparkHarvestError, GeometryError, InvalidCheckpointError
from sglang_dspark_plugin.harvest import ENV_VAR
from sglang_dspark_plugin.serving import LaunchRequest, ServePlan, SglangSupport, make_plan
from sglang_dspark_plugin.serving.announce import describe
from sglang_dspark_plugin.serving.bundled import KEYS, SUBFOLDER
from sglang_dspark_plugin.serving.route import ServedHead
from sglang_dspark_plugin.serving.stages import check_served_draft

NEW, OLD = SglangSupport.for_version("0.5.23"), SglangSupport.for_version("0.5.17")
FLAG = "--speculative-draft-model-path"


def _plan(target: str | Path, support: SglangSupport = NEW, **fields: object) -> ServePlan:
    return make_plan(LaunchRequest(draft=None, target=str(target), **fields), support)  # type: ignore[arg-type]


def _carried(plan: ServePlan) -> None:
    assert pickle.loads(pickle.dumps(plan)) == plan and copy.deepcopy(plan) == plan


# ---------------------------------------------------------------- dspark/ subfolder (sglang 0.5.23)


@pytest.mark.parametrize(
    ("drafter", "harvest", "anchor_first", "window"),
    [
        ("drafter-dspark-markov", "dspark", True, 8),
        ("drafter-dspark", "dspark", True, 9),  # no Markov head: the zero head, as with a named path
        ("drafter-dspark-maskfill", "dflash", False, 8),  # DSPARK's mask-fill layout
    ],
)
def test_a_dspark_subfolder_is_the_draft(tmp_path: Path, drafter, harvest, anchor_first, window) -> None:
    target = subfolder_target(tmp_path / "target", drafter)
    plan = _plan(target)
    assert plan.bundled is not None and plan.bundled.form == SUBFOLDER
    assert plan.cfg.path == str(target / "dspark")  # the folder sglang loads, censused
    assert plan.draft == plan.bundled.draft == os.path.join(str(target), "dspark")  # sglang's own join
    assert plan.request.draft is None
    assert (plan.harvest.name(), plan.builtin, plan.layout.sample_from_anchor) == (
        harvest,
        "DSPARK",
        anchor_first,
    )
    assert plan.declared_args["speculative_num_draft_tokens"] == window
    assert plan.manifest["bundled"] == {"form": SUBFOLDER, "draft": plan.draft, "revision": None}
    assert plan.manifest["draft"] == plan.draft
    assert "dspark/ subfolder" in describe(plan)
    _carried(plan)


def test_the_worker_refuses_a_draft_sglang_resolved_elsewhere(tmp_path: Path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    plan = _plan(target)
    check_served_draft(plan, os.path.join(str(target), "dspark"))  # what sglang's handler declares
    check_served_draft(plan, str(target / "." / "dspark"))
    with pytest.raises(GeometryError) as info:
        check_served_draft(plan, str(target))
    assert info.value.where == FLAG and str(target / "dspark") in info.value.message


def test_a_mask_fill_drafter_without_a_markov_head_needs_its_path(tmp_path: Path) -> None:
    """DFLASH serves it, and only DSPARK looks for a draft in the target checkpoint."""
    target = subfolder_target(tmp_path / "target", "drafter-dflash")
    with pytest.raises(DsparkHarvestError) as info:
        _plan(target)
    assert info.value.kind == "unsupported" and info.value.where == FLAG
    assert os.path.join(str(target), "dspark") in info.value.message


def test_sglang_0517_has_no_subfolder_form_and_refuses_as_its_builtin_does(tmp_path: Path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    with pytest.raises(DsparkHarvestError) as info:
        _plan(target, OLD)
    err = info.value
    assert isinstance(err, ValueError) and err.kind == "unsupported" and err.where == FLAG
    assert "0.5.17" in err.message and "0.5.23" in err.message and str(target / "dspark") in err.message


@pytest.mark.parametrize("support", [NEW, OLD], ids=lambda s: s.version)
def test_no_draft_anywhere_names_the_places_looked_at_and_the_flag(tmp_path: Path, support) -> None:
    target = subfolder_target(tmp_path / "target", None)
    with pytest.raises(InvalidCheckpointError) as info:
        _plan(target, support)
    msg = info.value.message
    assert info.value.where == FLAG and FLAG in msg
    assert str(target / "config.json") in msg and "dspark_block_size" in msg
    assert (str(target / "dspark" / "config.json") in msg) is support.dspark_subfolder


def test_a_named_draft_is_served_whatever_the_target_bundles(tmp_path: Path) -> None:
    from sglang_dspark_plugin.embedded import EMBEDDED

    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    draft = str(EMBEDDED.root / "drafter-dflash")
    plan = make_plan(LaunchRequest(draft=draft, target=str(target)), NEW)
    assert plan.bundled is None and plan.cfg.path == draft and plan.manifest["bundled"] is None


# ---------------------------------------------------------------- a hub target, two revisions

REPO = "org/tiny-target"
MAIN = "0123456789abcdef0123456789abcdef01234567"
V2 = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``main`` bundles the shifted drafter, tag ``v2`` the mask-fill DSpark one."""
    root = hub_cache(
        tmp_path / "hub",
        REPO,
        {
            "main": (MAIN, subfolder_target(tmp_path / "main", "drafter-dspark-markov")),
            "v2": (V2, subfolder_target(tmp_path / "v2", "drafter-dspark-maskfill")),
        },
    )
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    return root


@pytest.mark.parametrize(
    ("revision", "harvest", "commit"),
    [(None, "dspark", MAIN), ("main", "dspark", MAIN), ("v2", "dflash", V2), (V2, "dflash", V2)],
)
def test_a_hub_target_bundles_the_draft_of_its_revision(cache: Path, revision, harvest, commit) -> None:
    plan = _plan(REPO, revision=revision)
    snapshot = cache / "models--org--tiny-target" / "snapshots" / commit
    assert plan.harvest.name() == harvest
    assert plan.bundled is not None and plan.bundled.draft == os.path.join(str(snapshot), "dspark")
    assert Path(plan.cfg.path) == snapshot / "dspark"
    assert plan.draft == f"{REPO}/dspark"  # the same name on every node, wherever its cache sits


def test_two_target_revisions_make_two_plans(cache: Path) -> None:
    assert _plan(REPO, revision="main") != _plan(REPO, revision="v2")


def test_a_target_revision_missing_offline_is_refused_naming_it(cache: Path) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        _plan(REPO, revision="v3")
    assert "'v3'" in info.value.message and "HF_HUB_OFFLINE" in info.value.message


def test_the_download_dir_is_the_cache_sglang_fetches_into(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(DsparkHarvestError):
        _plan(REPO)
    assert _plan(REPO, download_dir=str(cache)).cfg.path.startswith(str(cache))


# ---------------------------------------------------------------- dspark_* keys (0.5.17 and 0.5.23)


@pytest.mark.parametrize("support", [NEW, OLD], ids=lambda s: s.version)
@pytest.mark.parametrize("spelling", [("embed", "head"), ("markov_w1", "markov_w2")])
def test_a_target_config_with_dspark_keys_is_its_own_draft(tmp_path: Path, support, spelling) -> None:
    target = keys_target(tmp_path / "target", tensors=v4_tensors(spelling=spelling))
    plan = _plan(target, support, revision="v1")
    assert plan.bundled is not None and plan.bundled.form == KEYS
    assert plan.draft == str(target) and plan.cfg.path == str(target)
    assert plan.architectures == ("DeepseekV4ForCausalLMDSpark",)  # the class sglang loads the head as
    g = plan.geometry
    assert (plan.harvest.name(), g.block_size, g.gamma, g.verify_window) == ("dspark", 5, 5, 6)
    assert plan.declared_args == {"speculative_algorithm": "DSPARK", "speculative_num_draft_tokens": 6}
    assert plan.route.head == ServedHead(RANK, "vanilla") and plan.route.loads_as is None  # sglang's class
    assert plan.manifest["bundled"] == {"form": KEYS, "draft": str(target), "revision": "v1"}
    assert plan.manifest["draft_revision"] == "v1"  # sglang gives the draft the target's --revision
    assert "dspark_* keys" in describe(plan)
    _carried(plan)


def test_keys_first_a_subfolder_beside_them_is_named_not_served(tmp_path: Path) -> None:
    target = keys_target(tmp_path / "target")
    subfolder_target(tmp_path / "donor", "drafter-dspark-markov")
    (tmp_path / "donor" / "dspark").rename(target / "dspark")
    plan = _plan(target)
    assert plan.bundled is not None and plan.bundled.form == KEYS
    assert any("dspark" in a and "not served" in a for a in plan.advice)
    assert not _plan(target, OLD).advice  # 0.5.17 never looks in dspark/


@pytest.mark.parametrize(
    ("change", "kind", "where"),
    [
        ({"architectures": ["Qwen3ForCausalLM"]}, "unsupported", "architectures"),  # loaded whole
        ({"dspark_markov_rank": None}, "invalid", "dspark_markov_rank"),  # sglang's class needs one
        ({"dspark_markov_rank": 8}, "invalid", "dspark_markov_rank"),  # the tensors say rank 4
        ({"dspark_noise_token_id": None}, "invalid", "mask_token_id"),
        ({"tensors": v4_tensors(markov=False)}, "invalid", "mtp.N.markov_head.*"),  # config vs weights
    ],
)
def test_a_contradictory_or_unloadable_bundled_head_is_refused(tmp_path: Path, change, kind, where) -> None:
    target = keys_target(tmp_path / "target", **change)
    with pytest.raises(DsparkHarvestError) as info:
        _plan(target)
    assert isinstance(info.value, ValueError) and info.value.kind == kind
    assert where in (info.value.where or "")


def test_a_forced_mask_fill_harvest_of_a_bundled_head_is_refused(tmp_path: Path) -> None:
    target = keys_target(tmp_path / "target")
    with pytest.raises(DsparkHarvestError) as info:
        _plan(target, harvest_env="dflash")
    assert info.value.kind == "unsupported" and ENV_VAR in info.value.message


def test_the_subfolder_form_is_sglang_0523s() -> None:
    assert (NEW.dspark_subfolder, OLD.dspark_subfolder) == (True, False)


def test_a_launch_request_carries_the_target_revision_and_download_dir() -> None:
    request = LaunchRequest.of({"model_path": "org/t", "revision": "v1", "download_dir": "/cache"}, {})
    assert (request.target, request.revision, request.download_dir) == ("org/t", "v1", "/cache")
    assert LaunchRequest.of({}, {}).revision is None
