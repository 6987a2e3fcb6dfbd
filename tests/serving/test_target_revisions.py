"""A hub-id target at ``--revision``: every check the plan makes of the target (the layers sglang can
capture, the vocabulary the Markov head biases) reads the target sglang serves, at the launch's
revision, from ``--download-dir`` when given, ``HF_HUB_OFFLINE`` honoured. No network: a pre-populated
cache holds two revisions of one target whose config.json differ."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundled_checkpoints import hub_cache, subfolder_target

from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import DsparkHarvestError
from sglang_dspark_plugin.serving import LaunchRequest, ServePlan, SglangSupport, make_plan
from sglang_dspark_plugin.serving.target_checkpoint import load_target

REPO = "org/tiny-target"
MAIN = "0123456789abcdef0123456789abcdef01234567"
V2 = "89abcdef0123456789abcdef0123456789abcdef"
WIDE = "fedcba9876543210fedcba9876543210fedcba98"
SUPPORT = SglangSupport.for_version("0.5.23")
DRAFT = str(EMBEDDED.root / "drafter-dflash")  # reads target layers [1, 4, 6]: needs 8 layers, not 7
MARKOV_DRAFT = str(EMBEDDED.root / "drafter-dspark-markov")  # DSPARK: its vocabulary must be the target's


def _target(folder: Path, **config: object) -> Path:
    """The embedded target's config (8 layers, 1536 tokens) with ``config`` changed."""
    subfolder_target(folder, None)
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    return folder


@pytest.fixture(params=["main-captures", "v2-captures"])
def cache(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Two revisions of one target, one of 8 layers and one of 7; which one ``main`` holds is the
    parameter, so neither outcome can come from reading ``main`` alone. Tag ``wide``: 8 layers and a
    2048-token vocabulary."""
    eight = _target(tmp_path / "eight")
    seven = _target(tmp_path / "seven", num_hidden_layers=7)
    wide = _target(tmp_path / "wide", vocab_size=2048)
    main, v2 = (eight, seven) if request.param == "main-captures" else (seven, eight)
    revisions = {"main": (MAIN, main), "v2": (V2, v2), "wide": (WIDE, wide)}
    root = hub_cache(tmp_path / "hub", REPO, revisions)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # nothing here may reach the network
    return root, request.param == "main-captures"


def _plan(revision: str | None, draft: str = DRAFT, **fields: object) -> ServePlan:
    request = LaunchRequest(draft=draft, target=REPO, revision=revision, **fields)  # type: ignore[arg-type]
    return make_plan(request, SUPPORT)


def _serves(revision: str | None, draft: str = DRAFT, **fields: object) -> bool:
    try:
        _plan(revision, draft, **fields)
    except DsparkHarvestError as err:
        assert err.kind == "unsupported" and isinstance(err, ValueError)  # shown as an argument error
        return False
    return True


@pytest.mark.parametrize("revision", [None, "main", MAIN, "v2", V2])
def test_target_layers_are_read_at_the_launch_revision(cache, revision) -> None:
    _, main_captures = cache
    at_main = revision in (None, "main", MAIN)
    assert _serves(revision) is (at_main == main_captures)


def test_the_refusal_names_the_revision_read(cache) -> None:
    _, main_captures = cache
    refused = "v2" if main_captures else "main"
    commit = V2 if main_captures else MAIN
    with pytest.raises(DsparkHarvestError) as info:
        _plan(refused)
    err = info.value
    assert err.where == "target_layer_ids" and "7 layers" in err.message and "[6]" in err.message
    assert REPO in err.message and commit in err.message  # the snapshot whose config.json said 7


def test_the_target_vocabulary_is_read_at_the_launch_revision(cache) -> None:
    _, main_captures = cache
    assert _serves("main" if main_captures else "v2", MARKOV_DRAFT)  # 8 layers, the drafter's 1536 tokens
    with pytest.raises(DsparkHarvestError) as info:
        _plan("wide", MARKOV_DRAFT)
    assert info.value.where == "vocab_size" and "2048" in info.value.message


def test_the_download_dir_is_the_cache_the_target_is_read_from(cache, tmp_path, monkeypatch) -> None:
    root, main_captures = cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    assert _serves("v2", download_dir=str(root)) is not main_captures
    with pytest.raises(DsparkHarvestError) as info:
        _plan("v2")  # not in the default cache, and offline: refused, not skipped
    assert "'v2'" in info.value.message


def test_a_revision_missing_offline_is_a_typed_refusal_naming_repo_revision_and_fix(cache) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        _plan("v3")
    err = info.value
    assert err.kind == "invalid" and isinstance(err, ValueError)
    assert REPO in err.message and "'v3'" in err.message and "HF_HUB_OFFLINE" in err.message
    assert f"download {REPO} --revision v3" in err.message  # how to fetch it before launching


@pytest.mark.parametrize("revision", ["../../etc", "v 2"])
def test_a_malformed_target_revision_is_refused_naming_the_flag(cache, revision) -> None:
    with pytest.raises(DsparkHarvestError) as info:
        _plan(revision)
    assert info.value.where == "--revision"


def test_a_local_target_is_read_as_it_is_whatever_the_revision(tmp_path) -> None:
    target = _target(tmp_path / "seven", num_hidden_layers=7)
    found = load_target(LaunchRequest(draft=None, target=str(target), revision="v2"))
    assert found is not None and found.folder == target and not found.hub
    assert (found.num_layers, found.vocab_size) == (7, 1536)
    assert load_target(LaunchRequest(draft=None, target="not a path or a hub id")) is None


def test_a_hub_target_resolves_to_the_snapshot_of_its_revision(cache) -> None:
    root, main_captures = cache
    found = load_target(LaunchRequest(draft=None, target=REPO, revision="v2"))
    assert found is not None and found.hub and found.folder.name == V2
    assert found.folder.is_relative_to(root)
    assert found.num_layers == (7 if main_captures else 8)


def test_online_a_missing_revision_is_fetched_as_sglang_fetches_it(cache, monkeypatch) -> None:
    """Without HF_HUB_OFFLINE the plan downloads the target's configs at the launch's revision into
    --download-dir; a download that fails (here: no network) leaves the target's checks to sglang,
    which downloads it again, and refuses only a launch that needs the target's files to find its draft."""
    import huggingface_hub

    root, _ = cache
    calls: list[dict] = []

    def no_network(repo_id: str, **kwargs: object) -> str:
        calls.append({"repo_id": repo_id, **kwargs})
        raise ConnectionError("no network in this test")

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    plan = _plan("v3", download_dir=str(root))  # the checks are left to sglang
    assert plan.request.revision == "v3"
    assert calls == [
        {
            "repo_id": REPO,
            "revision": "v3",
            "local_files_only": False,
            "cache_dir": str(root),
            "allow_patterns": ["*.json"],
        }
    ]
    with pytest.raises(DsparkHarvestError) as info:
        make_plan(LaunchRequest(draft=None, target=REPO, revision="v3"), SUPPORT)  # its draft is in it
    assert info.value.kind == "invalid" and "download failed" in info.value.message
    assert calls[-1]["allow_patterns"] == ["*.json", "dspark/*"]
