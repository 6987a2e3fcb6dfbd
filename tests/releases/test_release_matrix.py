"""scripts/release_matrix.py's parts that need no sglang: the release range, pytest's junit XML, the
doctor's key lines, the table and the docs block it writes."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import release_matrix as rm


def test_the_range_keeps_final_and_patch_releases_in_order():
    listed = ["0.5.23", "0.5.22", "0.5.17", "0.5.16", "0.5.18.post1", "0.5.18", "0.5.24rc1", "0.5.24"]
    expected = ["0.5.17", "0.5.18", "0.5.18.post1", "0.5.22", "0.5.23"]
    assert rm.in_range(listed, rm.LOWEST, rm.HIGHEST) == expected
    assert rm.release_key("0.5.15.post1") == (0, 5, 15, 1) and rm.release_key("0.5.24rc1") is None


def test_the_release_environment_pins_that_sglang_with_the_tests_extras():
    project = rm.env_spec._project()
    reqs = rm.env_spec.release_requirements(project, "0.5.20")
    assert reqs[-1] == "sglang==0.5.20" and [r for r in reqs if r.startswith("sglang")] == ["sglang==0.5.20"]
    assert set(rm.env_spec._extra(project, "test")) <= set(reqs)
    assert set(project["project"]["dependencies"]) <= set(reqs)


def test_a_wheels_own_requirements_leave_its_extras_out(tmp_path: Path):
    wheel = tmp_path / "sglang-0.5.20-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as whl:
        whl.writestr(
            "sglang-0.5.20.dist-info/METADATA",
            "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.20\nRequires-Dist: cuda-tile==1.6.0rc5\n"
            'Requires-Dist: torchcodec==0.15.0; sys_platform != "linux"\n'
            'Requires-Dist: pytest; extra == "test"\n\nlong description\n',
        )
    assert rm.release_requires(wheel) == [
        "cuda-tile==1.6.0rc5",
        'torchcodec==0.15.0; sys_platform != "linux"',
    ]


def test_junit_counts_and_the_first_failure_come_from_a_real_pytest_run(tmp_path: Path):
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n"
        "def test_ok():\n    assert True\n"
        "def test_bad():\n    assert 1 == 2, 'one is not two'\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('fixture broke')\n"
        "def test_err(broken):\n    pass\n"
        "def test_bad_too():\n    assert False\n"
    )
    xml = tmp_path / "junit.xml"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path), f"--junitxml={xml}"]
    subprocess.run(cmd, capture_output=True, cwd=tmp_path, timeout=300)
    got = rm.parse_junit(xml)
    assert (got["tests"], got["passed"], got["failures"], got["errors"]) == (4, 1, 2, 1)
    assert got["first_failure"].startswith("test_bad: AssertionError: one is not two")
    assert [f.split(": ", 1)[0] for f in got["failed"]] == [
        "test_probe::test_bad",
        "test_probe::test_err",
        "test_probe::test_bad_too",
    ]


def test_the_doctor_summary_keeps_the_verdict_and_what_is_missing():
    out = (
        "python: 3.11.7 (x)\nsglang: 0.5.19 (NOT a tested version); tested versions: 0.5.17, 0.5.23\n"
        "  OK      a.b.C.d\n  MISSING sglang.srt.arg_groups.overrides.resolved_view  (missing)\n"
        "DSPARK_HARVEST registered through the entry point: NO\nproblem: hook x: missing\ndoctor: FAILED\n"
    )
    summary = rm.doctor_summary(1, out)
    assert summary["lines"][0].startswith("sglang: 0.5.19") and summary["lines"][-1] == "doctor: FAILED"
    assert not any(line.startswith(("python:", "  OK")) for line in summary["lines"])
    assert rm._doctor_cell(summary) == "FAILED (missing: overrides.resolved_view)"


def _result(release: str, failure: str | None) -> dict:
    return {
        "release": release,
        "torch": "2.9.1",
        "features": {
            "resolution": "resolve_once",
            "foreign_defaults": False,
            "mask_fill_dspark": True,
            "disaggregation": ["EAGLE", "DSPARK"],
        },
        "doctor": {"returncode": 0, "lines": ["doctor: OK"]},
        "tests": {"passed": 9, "failures": int(failure is not None), "errors": 0, "first_failure": failure},
    }


def test_the_table_has_a_row_a_release_and_escapes_the_reason():
    text = rm.table([_result("0.5.19", "test_x: assert a | b"), {"release": "0.5.20", "install_error": "e"}])
    lines = text.splitlines()
    assert len(lines) == 4 and lines[0].count("|") == lines[1].count("|") == lines[2].count("|") - 1
    assert "| 0.5.19 | 2.9.1 | OK | 9 / 1 / 0 | test_x: assert a \\| b |" in lines[2]
    assert "mask-fill DSPARK: yes; PD draft input: EAGLE, DSPARK" in lines[2]
    assert lines[3].startswith("| 0.5.20 | - | not run |") and "install failed: e" in lines[3]


def test_the_docs_block_is_replaced_and_nothing_else(tmp_path: Path):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# t\nbefore\n{rm.BEGIN}\nold table\n{rm.END}\nafter\n")
    rm.write_docs(doc, "| new |")
    assert doc.read_text() == f"# t\nbefore\n{rm.BEGIN}\n| new |\n{rm.END}\nafter\n"
    doc.write_text("no markers\n")
    with pytest.raises(SystemExit, match="release-matrix"):
        rm.write_docs(doc, "| new |")
