"""The output channel of ``dspark-harvest``: a closed pipe, a full disk and an ASCII-only terminal give
an exit code, never a traceback; a bare command prints its usage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_dspark_plugin.cli.output import EXIT_BROKEN_PIPE, EXIT_OUTPUT_ERROR
from sglang_dspark_plugin.embedded import EMBEDDED

ROOT = Path(__file__).resolve().parents[2]
DRAFTER = str(EMBEDDED.drafters["dspark"])


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", **extra}
    env.pop("MEMRA_DSPARK_HARVEST", None)
    return env


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "sglang_dspark_plugin", *args]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_closed_pipe_exits_quietly(as_json: bool) -> None:
    args = ["inspect", DRAFTER, *(["--json"] if as_json else [])]
    proc = subprocess.Popen(_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the first byte is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "Exception ignored" not in err


def test_a_full_disk_is_one_line_and_an_exit_code() -> None:
    if not Path("/dev/full").exists():
        pytest.fail("this test needs /dev/full (Linux)")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(_command("inspect", DRAFTER), stdout=full, stderr=subprocess.PIPE, env=_env())
    err = proc.stderr.decode()
    assert proc.returncode == EXIT_OUTPUT_ERROR
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and "stdout" in err


def test_an_ascii_terminal_gets_escapes_for_a_non_ascii_folder(tmp_path: Path) -> None:
    folder = shutil.copytree(DRAFTER, tmp_path / "drafter-\u00df\u4e2d")
    proc = subprocess.run(
        _command("inspect", str(folder)), capture_output=True, env=_env(PYTHONIOENCODING="ascii")
    )
    out, err = proc.stdout.decode("ascii"), proc.stderr.decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "drafter-\\xdf\\u4e2d" in out


def test_a_bare_command_prints_its_usage_and_every_subcommand() -> None:
    proc = subprocess.run(_command(), capture_output=True, env=_env())
    err = proc.stderr.decode()
    assert proc.returncode == 2
    assert err.startswith("usage: dspark-harvest") and all(c in err for c in ("inspect", "check", "doctor"))
    assert "exit codes" in err


def test_a_wrong_argument_prints_the_usage_line_first(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_dspark_plugin.cli import main

    assert main(["inspect", DRAFTER, "--bogus"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("usage: dspark-harvest") and "refused (usage)" in err[-1]
    assert main(["inspect"]) == 2  # a missing argument: the subcommand's own usage
    assert capsys.readouterr().err.startswith("usage: dspark-harvest inspect")


def test_check_progress_is_off_when_stderr_is_not_a_terminal() -> None:
    proc = subprocess.run(
        _command("check", "--num-prompts", "1", "--max-new-tokens", "4"), capture_output=True, env=_env()
    )
    err = proc.stderr.decode()
    assert proc.returncode == 4, err  # one prompt: inconclusive
    assert "\r" not in err and "Traceback" not in err


def test_transformers_progress_shows_while_the_target_loads_only_when_asked() -> None:
    import torch
    from transformers.utils import logging as hf_logging

    from sglang_dspark_plugin.check.target import load_target_model

    load_target_model(EMBEDDED.target, torch.device("cpu"), torch.float32, progress=True)
    assert hf_logging.is_progress_bar_enabled()
    load_target_model(EMBEDDED.target, torch.device("cpu"), torch.float32, progress=False)
    assert not hf_logging.is_progress_bar_enabled()
