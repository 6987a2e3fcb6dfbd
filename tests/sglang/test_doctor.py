"""``dspark-harvest doctor`` against the real sglang: text, JSON, exit codes, a broken contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sglang

from sglang_dspark_plugin.cli import doctor
from sglang_dspark_plugin.cli import parser as cli
from sglang_dspark_plugin.sglang_plugin import contract, workers


def run_doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli.main(["doctor", *args])
    return code, capsys.readouterr().out


def test_doctor_json_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True
    tested = sglang.__version__ in contract.SUPPORTED_SGLANG
    assert report["sglang"] == sglang.__version__ and report["version_supported"] is tested
    assert report["registered"] is True
    assert report["registered_class"].endswith("DsparkHarvestSpecAlgo")
    assert report["entry_point"] == "sglang_dspark_plugin.sglang_plugin:register"
    hooks = {h["hook"]: h["ok"] for h in report["hooks"]}
    expected = contract.full_contract() + list(workers.WORKER_CONTRACT)
    assert len(hooks) >= len(expected)
    for module, qualname, _ in expected:
        assert hooks[f"{module}.{qualname}"] is True
    untested = [f"sglang {sglang.__version__} is not a tested version"]
    assert [p[: len(untested[0])] for p in report["problems"]] == ([] if tested else untested)


def test_doctor_text_ok(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_doctor(capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("python: ")  # the environment lines first, as `transformers env` prints
    tested = "(tested)" if sglang.__version__ in contract.SUPPORTED_SGLANG else "(NOT a tested version)"
    assert any(line.startswith(f"sglang: {sglang.__version__} {tested}") for line in lines)
    assert "OK      sglang.srt.arg_groups.speculative_hook._handle_dflash" in out
    assert "DSPARK_HARVEST registered through the entry point: yes" in out
    assert out.rstrip().endswith("doctor: OK")


def test_doctor_reports_a_missing_hook(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    broken = ("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm.no_such_hook", None)
    monkeypatch.setattr(contract, "PLUGIN_CONTRACT", [*contract.PLUGIN_CONTRACT, broken])
    code, out = run_doctor(capsys)
    assert code == 1
    assert "MISSING sglang.srt.speculative.spec_info.SpeculativeAlgorithm.no_such_hook  (missing)" in out
    assert out.rstrip().endswith("doctor: FAILED")
    code, out = run_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert any("no_such_hook" in p for p in report["problems"])


def test_doctor_passes_an_untested_version_whose_hooks_are_all_ok(
    capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    # The rule register() applies: registered with a warning, so the doctor says OK and names it.
    monkeypatch.setattr(doctor, "SUPPORTED_SGLANG", ("0.0.1",))
    code, out = run_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True and report["version_supported"] is False
    assert [p for p in report["problems"] if "not a tested version" in p] == report["problems"] != []


def test_doctor_without_sglang(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setattr(doctor, "sglang_version", lambda: None)
    code, out = run_doctor(capsys, "--json")
    report = json.loads(out)
    assert code == 1
    assert report["sglang"] is None and report["ok"] is False
    assert any("not installed" in p for p in report["problems"])


def test_doctor_in_a_fresh_process() -> None:
    """The console path end to end: a new interpreter discovers the entry point itself."""
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_dspark_plugin", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["registered"] is True and report["sglang"] == sglang.__version__


def test_cli_does_not_import_sglang() -> None:
    code = (
        "import sys; from sglang_dspark_plugin.cli import parser; parser.build_parser(); "
        "import sglang_dspark_plugin.cli.doctor, sglang_dspark_plugin.sglang_plugin; "
        "print(sorted(m for m in sys.modules if m == 'sglang' or m.startswith('sglang.')))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
