"""A hub-id draft at a revision: the plan resolves it the way sglang does (the same cache, the same
revision, ``HF_HUB_OFFLINE`` honoured) and keys itself on the revision. No network: a pre-populated
cache holds two revisions of one repo, one trained mask-fill, the other shifted."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from checkpoints import write_checkpoint

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.errors import DsparkHarvestError, InvalidCheckpointError
from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan

REPO = "org/tiny-drafter"
MAIN = "0123456789abcdef0123456789abcdef01234567"
V2 = "89abcdef0123456789abcdef0123456789abcdef"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``main`` -> a mask-fill drafter, tag ``v2`` -> a shifted one, as huggingface_hub lays them out."""
    root = tmp_path / "hub"
    storage = root / "models--org--tiny-drafter"
    (storage / "refs").mkdir(parents=True)
    for ref, commit, fixture in (("main", MAIN, "specforge_dflash"), ("v2", V2, "specforge_dspark")):
        (storage / "refs" / ref).write_text(commit)
        source = write_checkpoint(tmp_path / ref, fixture)
        shutil.copytree(source, storage / "snapshots" / commit)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    return root


def _plan(revision: str | None):
    return make_plan(LaunchRequest(draft=REPO, draft_revision=revision), SglangSupport.for_version("0.5.23"))


@pytest.mark.parametrize(
    ("revision", "harvest", "commit"),
    [
        (None, "dflash", MAIN),
        ("main", "dflash", MAIN),
        ("v2", "dspark", V2),
        (V2, "dspark", V2),
        (MAIN, "dflash", MAIN),
    ],
)
def test_the_plan_serves_the_revision_asked_for(cache: Path, revision, harvest: str, commit: str) -> None:
    plan = _plan(revision)
    assert plan.harvest.name() == harvest
    assert Path(plan.cfg.path).name == commit
    assert plan.manifest["draft"] == REPO and plan.manifest["draft_revision"] == revision


def test_two_revisions_make_two_plans(cache: Path) -> None:
    assert _plan("main") != _plan("v2")
    assert _plan("main").request.draft_revision == "main"


def test_a_revision_missing_offline_is_refused_naming_it(cache: Path) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        _plan("v3")
    assert "'v3'" in info.value.message and "HF_HUB_OFFLINE" in info.value.message


@pytest.mark.parametrize("revision", ["../../etc", "a" * 300, "v 2"])
def test_a_malformed_revision_is_refused(cache: Path, revision: str) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        _plan(revision)
    assert info.value.where == "--speculative-draft-model-revision"


def test_inspect_and_check_never_download(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with pytest.raises(InvalidCheckpointError, match="never download"):
        census(REPO, "v3")  # the census alone (inspect, check) is local only
    assert census(REPO, "v2").verdict == "dspark"
