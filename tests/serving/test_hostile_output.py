"""What a checkpoint, a path or the environment holds never writes a line into the server's log, and
``MEMRA_DSPARK_MANIFEST`` never replaces or blocks on anything but its own previous file."""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

import pytest
from checkpoints import FIXTURES, write_checkpoint

from sglang_dspark_plugin.errors import DsparkHarvestError, InvalidCheckpointError
from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan
from sglang_dspark_plugin.serving.announce import describe
from sglang_dspark_plugin.serving.manifest import write_manifest
from sglang_dspark_plugin.util.logsafe import RECORD_LIMIT, safe_logger

FORGED = "\ndspark accept round=7 bs=1 accept_len=[9,9]"
HOSTILE = [FORGED, "\rdspark accept ALARM", "\x1b[2J\x1b[Hdspark", "\u2028dspark accept round=1"]


@pytest.mark.parametrize("hostile", HOSTILE, ids=["newline", "carriage-return", "escape", "line-separator"])
def test_a_hostile_tensor_name_reaches_no_log_line_raw(hostile: str, tmp_path: Path) -> None:
    # sglang's loader never reads the index, so such a server would start normally
    draft = write_checkpoint(tmp_path, FIXTURES["specforge_dflash"])
    (draft / "model.safetensors.index.json").write_text(
        json.dumps(
            {"weight_map": {f"markov_head.{hostile} markov_head.markov_w1.weight": "model.safetensors"}}
        )
    )
    try:
        plan = make_plan(
            LaunchRequest(draft=str(draft), harvest_env="dflash"), SglangSupport.for_version("0.5.23")
        )
        texts = [describe(plan), *plan.resolution.warnings]
    except DsparkHarvestError as err:  # a conflict listing the evidence is a text that reaches the log too
        texts = [err.message]
    assert any("dspark" in t and "markov_head" in t for t in texts)  # the name is listed, escaped
    for text in texts:
        assert text.isprintable(), text
        assert hostile not in text


def test_error_messages_and_where_are_escaped() -> None:
    err = InvalidCheckpointError(f"bad{FORGED}", where=f"w{FORGED}")
    assert err.message.isprintable() and "\n" not in str(err) and err.where.isprintable()


def test_the_plugin_loggers_escape_and_bound_every_record(caplog: pytest.LogCaptureFixture) -> None:
    logger = safe_logger("sglang_dspark_plugin.test-hostile")
    with caplog.at_level(logging.INFO, logger=logger.name):
        logger.info("startup %s", f"/ckpt{FORGED}")
        logger.info("%s", "x" * (RECORD_LIMIT * 4))
    first, second = (r.getMessage() for r in caplog.records)
    assert first.isprintable() and "\\n" in first
    assert len(second) <= RECORD_LIMIT
    assert safe_logger(logger.name).filters == logger.filters  # added once


# ---------------------------------------------------------------- MEMRA_DSPARK_MANIFEST


MANIFEST = {"schema": "sglang-dspark-plugin/geometry-manifest/v1", "harvest": "dflash"}


def test_a_new_file_is_written_atomically(tmp_path: Path) -> None:
    out = write_manifest(str(tmp_path / "m.json"), MANIFEST)
    assert json.loads(out.read_text()) == MANIFEST
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.json"]  # no temporary file left
    again = write_manifest(str(out), {**MANIFEST, "harvest": "dspark"})  # a previous manifest: replaced
    assert json.loads(again.read_text())["harvest"] == "dspark"


def test_a_symlink_to_the_drafts_config_is_refused_and_the_config_kept(tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, "specforge_dflash")
    before = (draft / "config.json").read_bytes()
    link = tmp_path / "manifest.json"
    link.symlink_to(draft / "config.json")
    with pytest.raises(InvalidCheckpointError, match="symbolic link"):
        write_manifest(str(link), MANIFEST, protected=(str(draft),))
    assert (draft / "config.json").read_bytes() == before


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "new.json"])
def test_a_path_inside_a_checkpoint_is_refused(name: str, tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, "specforge_dflash")
    before = {p.name: p.read_bytes() for p in draft.iterdir()}
    with pytest.raises(InvalidCheckpointError, match="inside the draft or target"):
        write_manifest(str(draft / name), MANIFEST, protected=(str(draft), None))
    assert {p.name: p.read_bytes() for p in draft.iterdir()} == before


def test_a_file_that_is_no_manifest_is_not_replaced(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("keep me")
    with pytest.raises(InvalidCheckpointError, match="not a previous geometry manifest"):
        write_manifest(str(other), MANIFEST)
    assert other.read_text() == "keep me"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(outcome, str(fifo)), daemon=True)
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive(), "writing the manifest blocked on a FIFO"
    assert isinstance(outcome[0], InvalidCheckpointError) and "not a regular file" in outcome[0].message


def _capture(outcome: list[BaseException], path: str) -> None:
    try:
        write_manifest(path, MANIFEST)
    except BaseException as err:  # noqa: BLE001 - the outcome is what the test checks
        outcome.append(err)


def test_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidCheckpointError, match="folder does not exist"):
        write_manifest(str(tmp_path / "no" / "m.json"), MANIFEST)
