"""Shared test configuration: a skipped test fails the run (a missing dependency must not pass silently)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

# the shared helpers (checkpoints, plan_expectations, ...) sit in tests/, the tests in one folder per
# package folder: every test imports them by name
sys.path.insert(0, str(Path(__file__).resolve().parent))

_skipped: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    # A module-level skip (pytest.importorskip at import) is reported here, not per test.
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _skipped:
        terminalreporter.write_line(
            f"FAILED: {len(_skipped)} test(s) skipped; this suite treats a skip as a failure "
            "(install what is missing with scripts/setup_envs.sh): " + ", ".join(_skipped),
            red=True,
        )


@pytest.fixture(scope="session")
def plan_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The target of the planned launches (``plan_expectations``): a folder holding only its config.json."""
    from plan_expectations import PLAN_TARGET_CONFIG  # here: this conftest is also copied on its own

    folder = tmp_path_factory.mktemp("target")
    (folder / "config.json").write_text(json.dumps(PLAN_TARGET_CONFIG))
    return folder
