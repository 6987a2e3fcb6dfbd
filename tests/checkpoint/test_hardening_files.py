"""Files read before a checkpoint is trusted, second review: the Hugging Face cache's own files and
safetensors headers no loader can read. Each class ends in a typed refusal, never a hang."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.checkpoint.shards import read_safetensors_header
from sglang_dspark_plugin.errors import InvalidCheckpointError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DRAFT = {"architectures": ["DFlashDraftModel"], "block_size": 8}


def _finishes(fn: Any, seconds: float = 20.0) -> Any:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _refused(fn: Any) -> InvalidCheckpointError:
    with pytest.raises(InvalidCheckpointError) as info:
        _finishes(fn)
    return info.value


# -- the Hugging Face cache ---------------------------------------------------------------------------


@pytest.fixture
def hub(tmp_path, monkeypatch) -> Path:
    """A cache holding org/draft at COMMIT, ``refs/main`` not yet written."""
    repo = tmp_path / "hub" / "models--org--draft"
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(DRAFT))
    (repo / "refs").mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    return repo


def test_a_well_formed_cache_still_resolves(hub):
    (hub / "refs" / "main").write_text(COMMIT)
    assert Path(census("org/draft").path) == hub / "snapshots" / COMMIT


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "huge"])
def test_a_cache_ref_that_is_not_a_small_regular_file_is_refused_without_reading_it(hub, kind):
    ref = hub / "refs" / "main"
    if kind == "fifo":
        os.mkfifo(ref)
    elif kind == "dev-zero":
        ref.symlink_to("/dev/zero")
    elif kind == "directory":
        ref.mkdir()
    else:
        with open(ref, "wb") as f:
            f.truncate(2**31)  # sparse
    error = _refused(lambda: census("org/draft"))
    assert "refs/main" in error.message and "org/draft" in error.message


@pytest.mark.parametrize("content", ["../../../../etc", COMMIT + "\n", "main", ""])
def test_a_cache_ref_that_is_not_a_commit_hash_is_refused(hub, content):
    (hub / "refs" / "main").write_text(content)
    error = _refused(lambda: census("org/draft"))
    assert "commit hash" in error.message and "refs/main" in error.where


def test_a_fifo_tree_listing_in_the_cache_is_refused_without_blocking(hub):
    (hub / "refs" / "main").write_text(COMMIT)
    (hub / "trees").mkdir()
    os.mkfifo(hub / "trees" / f"{COMMIT}.json")
    error = _refused(lambda: census("org/draft"))
    assert "FIFO" in error.message and "trees" in error.message


# -- safetensors headers no loader can read -------------------------------------------------------------


def _header_file(path: Path, header: dict[str, Any], data: bytes = b"") -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + data)
    return path


@pytest.mark.parametrize("dtype", ["F17", "float16", "", "f16", "Q4_K"])
def test_a_safetensors_dtype_no_loader_knows_is_refused(tmp_path, dtype):
    path = _header_file(
        tmp_path / "x.safetensors", {"w": {"dtype": dtype, "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4
    )
    error = _refused(lambda: read_safetensors_header(path))
    assert "dtype" in error.message and "x.safetensors" in error.message


@pytest.mark.parametrize(
    "metadata", [{"format": 1}, {"format": None}, {"a": ["pt"]}, ["pt"], "pt", {"x": {"y": "z"}}]
)
def test_safetensors_metadata_that_is_not_strings_is_refused(tmp_path, metadata):
    header = {"__metadata__": metadata, "w": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}
    path = _header_file(tmp_path / "x.safetensors", header, b"\0" * 4)
    error = _refused(lambda: read_safetensors_header(path))
    assert "__metadata__" in error.message


def test_every_dtype_the_safetensors_library_writes_is_read(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    arrays = {
        str(t): np.zeros((3, 2), dtype=t)
        for t in (
            "bool",
            "uint8",
            "int8",
            "int16",
            "uint16",
            "float16",
            "int32",
            "uint32",
            "float32",
            "int64",
            "uint64",
            "float64",
        )
    }
    save_file(arrays, str(tmp_path / "all.safetensors"), metadata={"format": "np"})
    assert set(read_safetensors_header(tmp_path / "all.safetensors")) == set(arrays)
