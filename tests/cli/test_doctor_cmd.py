"""``dspark-harvest doctor``: the environment lines, SGLANG_PLUGINS, and a broken sglang install on the
path reported as findings with escaped text, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_dspark_plugin.cli.doctor import plugins_setting

ROOT = Path(__file__).resolve().parents[2]
ESC = "\x1b"


def _doctor(site: Path | None, *args: str, **env: str) -> tuple[int, str, str]:
    path = [str(site)] if site else []
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, str(ROOT)]), **env}
    if "SGLANG_PLUGINS" not in env:
        environ.pop("SGLANG_PLUGINS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_dspark_plugin", "doctor", *args], capture_output=True, env=environ
    )
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def _fake_sglang(site: Path, metadata: bytes, init: str = "") -> Path:
    (site / "sglang").mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text(init)
    info = site / "sglang-0.5.23.dist-info"
    info.mkdir()
    (info / "METADATA").write_bytes(metadata)
    return site


def _assert_clean(code: int, out: str, err: str) -> None:
    assert code == 1, out + err
    assert "Traceback" not in out + err
    assert ESC not in out + err  # every string from the broken install is escaped


def test_a_non_utf8_sglang_metadata_is_a_finding(tmp_path: Path) -> None:
    site = _fake_sglang(tmp_path, b"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n\xff\xfe\n")
    code, out, err = _doctor(site)
    _assert_clean(code, out, err)
    assert "sglang-0.5.23.dist-info" in out and "doctor: FAILED" in out


def test_a_malformed_entry_points_file_in_any_distribution_is_named(tmp_path: Path) -> None:
    info = tmp_path / "other-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: other\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[sglang.srt.plugins]\nno_equals_sign\n")
    code, out, err = _doctor(tmp_path, "--json")
    report = json.loads(out)
    _assert_clean(code, out, err)
    assert report["ok"] is False
    assert any("other-1.0.dist-info" in p for p in report["problems"])


def test_escape_codes_in_an_import_error_and_a_version_are_escaped(tmp_path: Path) -> None:
    site = _fake_sglang(
        tmp_path,
        f"Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23{ESC}[31m\n".encode(),
        init=f"raise ImportError('boom {ESC}[2J')\n",
    )
    code, out, err = _doctor(site)
    _assert_clean(code, out, err)
    assert "\\x1b[2J" in out and "\\x1b[31m" in out
    code, out, err = _doctor(site, "--json")
    _assert_clean(code, out, err)  # JSON escapes it as \u001b
    assert any("boom" in p for p in json.loads(out)["problems"])


def test_the_environment_lines_are_reported(tmp_path: Path) -> None:
    code, out, _ = _doctor(None, "--json")
    env = json.loads(out)["environment"]
    assert {"python", "platform", "torch", "transformers", "huggingface_hub"} <= set(env)
    import torch

    assert env["torch"].startswith(torch.__version__)
    assert ("CPU build" in env["torch"]) is (torch.version.cuda is None)
    code, text, _ = _doctor(None)
    assert all(line in text for line in ("python: ", "platform: ", "torch: ", "transformers: "))


@pytest.mark.parametrize(
    ("value", "excluded"),
    [(None, False), ("", False), ("other", True), ("other, dspark_harvest", False), (" , ", True)],
)
def test_sglang_plugins_that_excludes_this_plugin_is_said(
    monkeypatch: pytest.MonkeyPatch, value: str | None, excluded: bool
) -> None:
    if value is None:
        monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    else:
        monkeypatch.setenv("SGLANG_PLUGINS", value)
    assert plugins_setting("dspark_harvest").excludes_plugin is excluded


def test_doctor_fails_and_says_so_when_sglang_plugins_excludes_it() -> None:
    code, out, _ = _doctor(None, "--json", SGLANG_PLUGINS="someone_else")
    report = json.loads(out)
    assert code == 1 and report["sglang_plugins"]["excludes_plugin"] is True
    assert any("SGLANG_PLUGINS" in p and "dspark_harvest" in p for p in report["problems"])
