"""tests/conftest.py turns a skip into a failure, whether a test or a whole module skips."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.parametrize(
    ("body", "fails"),
    [
        ("def test_ok():\n    assert True\n", False),
        ("import pytest\n\ndef test_a():\n    pytest.skip('missing')\n", True),
        ("import pytest\npytest.importorskip('no_such_module_anywhere')\n\ndef test_a():\n    pass\n", True),
    ],
    ids=["pass", "test-skip", "module-skip"],
)
def test_a_skip_fails_the_run(tmp_path, body, fails):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_case.py").write_text(body)
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert True\n")  # the run has a pass
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert (run.returncode != 0) is fails, run.stdout + run.stderr
    assert ("treats a skip as a failure" in run.stdout) is fails
