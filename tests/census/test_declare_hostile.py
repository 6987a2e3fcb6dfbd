"""``declare`` under hostile and broken input (issue 36): a typed refusal (exit 2), nothing left behind,
the source untouched, never a traceback; a declared copy holds everything a loader reads, or is refused.

Write failures a test cannot cause as root (a read-only folder, a full disk) are injected at the system
call the command makes (``shutil.copyfile``, ``os.fsync``); the rest are real."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoints import write_checkpoint

from sglang_dspark_plugin import ENV_VAR
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census import declaration as dec
from sglang_dspark_plugin.census import folder as writer
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.errors import DsparkHarvestError

SOURCE = "specforge_dspark"


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _state(folder: Path) -> dict[str, str]:
    """Every entry under ``folder`` (links not followed): its kind and content."""
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            out[rel] = "link:" + os.readlink(path)
        elif path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            out[rel] = "folder" if path.is_dir() else "other"
    return out


def _refused(tmp_path: Path, source: Path, out: Path, kind: str, says: str, copy: bool = False) -> None:
    """``declare`` refuses with ``kind``, the message saying ``says``; nothing is left beside ``out``."""
    before, beside = _state(source), sorted(p.name for p in out.parent.iterdir())
    with pytest.raises(DsparkHarvestError) as refused:
        dec.declare(census(source), out, copy_files=copy)
    assert refused.value.kind == kind and says in refused.value.message, refused.value.message
    assert _state(source) == before
    assert sorted(p.name for p in out.parent.iterdir()) == beside  # no claim, no staging folder


@pytest.mark.parametrize("where", ["copying the tensors", "writing config.json", "renaming into place"])
def test_a_write_failure_is_a_typed_refusal_with_nothing_left_behind(tmp_path, monkeypatch, where):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    (tmp_path / "dst").mkdir()

    def full(*_a, **_k):
        raise OSError(errno.ENOSPC, "No space left on device")

    def read_only(*_a, **_k):
        raise OSError(errno.EROFS, "Read-only file system")

    if where == "copying the tensors":
        monkeypatch.setattr(writer.shutil, "copyfile", full)
    elif where == "writing config.json":
        monkeypatch.setattr(writer.os, "fsync", full)
    else:
        monkeypatch.setattr(writer.os, "rename", read_only)
    says = "writable file system" if where == "renaming into place" else "free some space"
    _refused(tmp_path, source, tmp_path / "dst" / "out", "write", says, copy=True)


def test_an_out_name_past_the_file_name_limit_is_refused_cleanly(tmp_path):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    _refused(tmp_path, source, tmp_path / ("d" * 300), "write", "name a shorter --out")


def _special(kind: str, source: Path) -> None:
    target = source / "extra"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        short = Path("/tmp") / f"dspark-sock-{os.getpid()}"
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(short))
        sock.close()
        os.rename(short, target)
    elif kind == "looping link":
        target.symlink_to(target)
    elif kind == "dangling link":
        target.symlink_to(source / "gone")
    elif kind == "link to /dev/zero":
        target.symlink_to("/dev/zero")


@pytest.mark.parametrize("kind", ["fifo", "socket", "looping link", "dangling link", "link to /dev/zero"])
@pytest.mark.parametrize("copy", [True, False], ids=["copy", "link"])
def test_a_source_with_something_no_loader_reads_is_refused_naming_it(tmp_path, kind, copy):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    _special(kind, source)
    says = "cannot be followed" if "link" in kind and "zero" not in kind else "not a regular file"
    _refused(tmp_path, source, tmp_path / "out", "invalid", says, copy=copy)


def test_a_folder_that_cannot_be_listed_is_refused(tmp_path, monkeypatch):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    (source / "tokenizer").mkdir()
    listdir = os.listdir

    def unreadable(path):
        if Path(path).name == "tokenizer":
            raise PermissionError(errno.EACCES, "Permission denied")
        return listdir(path)

    monkeypatch.setattr(writer.os, "listdir", unreadable)
    _refused(tmp_path, source, tmp_path / "out", "invalid", "tokenizer is a folder that cannot be listed")


@pytest.mark.parametrize("copy", [True, False], ids=["copy", "link"])
def test_a_linked_folder_in_the_source_is_mirrored_whole_and_a_loop_is_refused(tmp_path, copy):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    shared = tmp_path / "shared-tokenizer"
    shared.mkdir()
    (shared / "tokenizer.json").write_text('{"model": {}}\n')
    (source / "tokenizer").symlink_to(shared)
    declared = dec.declare(census(source), tmp_path / "out", copy_files=copy)
    got = tmp_path / "out" / "tokenizer" / "tokenizer.json"
    assert got.read_text() == '{"model": {}}\n' and declared.files == 2
    assert got.is_symlink() != copy
    (shared / "back").symlink_to(source)
    _refused(tmp_path, source, tmp_path / "out2", "invalid", "a loop", copy=copy)


def test_an_out_taken_by_another_process_is_refused_and_theirs_left_alone(tmp_path, monkeypatch):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    out = tmp_path / "out"
    listing = writer._source_files

    def then_taken(src):  # another process creates --out after the check
        found = listing(src)
        out.mkdir()
        (out / "theirs.txt").write_text("theirs")
        return found

    monkeypatch.setattr(writer, "_source_files", then_taken)
    with pytest.raises(DsparkHarvestError, match="exists") as refused:
        dec.declare(census(source), out)
    assert refused.value.kind == "usage" and (out / "theirs.txt").read_text() == "theirs"
    mirror = writer._mirror

    def filled(src, staging, entries, copy_files):  # ... or writes into it while it is built
        (out2 / "theirs.txt").write_text("theirs")
        return mirror(src, staging, entries, copy_files)

    out2 = tmp_path / "out2"
    monkeypatch.setattr(writer, "_source_files", listing)
    monkeypatch.setattr(writer, "_mirror", filled)
    with pytest.raises(DsparkHarvestError, match="another process wrote into --out") as refused:
        dec.declare(census(source), out2)
    assert refused.value.kind == "write" and os.listdir(out2) == ["theirs.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".declaring-")]


def test_concurrent_declares_to_one_out_give_one_declaration_and_typed_refusals(tmp_path):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sglang_dspark_plugin", "declare", str(source), "--out", str(out)]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(6)]
    results = [(r.wait(timeout=120), r.stderr.read().decode()) for r in runs]
    for r in runs:
        r.stdout.close()
        r.stderr.close()
    codes = sorted(code for code, _ in results)
    assert codes == [0, 2, 2, 2, 2, 2], results
    assert all("Traceback" not in err for _, err in results)
    assert all("refused (usage)" in err and "exists" in err for code, err in results if code == 2)
    assert json.loads((out / "config.json").read_text())["sample_from_anchor"] is True
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src"]


def test_a_users_folder_named_like_the_old_staging_folder_is_never_deleted(tmp_path):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    mine = tmp_path / f".out.declaring-{os.getpid()}"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine")
    dec.declare(census(source), tmp_path / "out")
    assert (mine / "keep.txt").read_text() == "mine"


def test_a_config_nested_hundreds_of_levels_is_refused_by_the_depth_bound(tmp_path):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    config = json.loads((source / "config.json").read_text())
    deep: object = 1
    for _ in range(400):
        deep = {"x": deep}
    config["notes"] = deep
    (source / "config.json").write_text(json.dumps(config))
    with pytest.raises(DsparkHarvestError, match="MAX_JSON_DEPTH") as refused:
        dec.declare(census(source), tmp_path / "out")
    assert refused.value.kind == "invalid" and not (tmp_path / "out").exists()


def test_a_newline_in_a_folder_name_cannot_forge_a_line(tmp_path, capsys):
    source = write_checkpoint(tmp_path / "src", SOURCE)
    out = tmp_path / "x\nharvest:  dflash (mask-fill)"
    assert main(["declare", str(source), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert [line for line in printed.splitlines() if line.startswith("harvest:")] == [
        "harvest:  dspark (shifted; trained block 7: 7 drafts, window 8)"
    ]
    assert "\\n" in printed.splitlines()[0]


def test_an_unreadable_file_is_refused(tmp_path, monkeypatch):
    """As root every file reads; the permission a user lacks is injected at the check ``declare`` makes."""
    source = write_checkpoint(tmp_path / "src", SOURCE)
    access = os.access
    monkeypatch.setattr(
        writer.os, "access", lambda path, mode: Path(path).name != "model.safetensors" and access(path, mode)
    )
    _refused(tmp_path, source, tmp_path / "out", "invalid", "model.safetensors cannot be read", copy=True)
