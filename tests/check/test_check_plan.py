"""``check`` and the launch agree on what DSPARK_HARVEST serves: both ask the serving plan (``make_plan``)."""

from __future__ import annotations

import json

import pytest

from sglang_dspark_plugin import releases
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED

MASKFILL = EMBEDDED.drafters["dspark-maskfill"]
DECISIVE = ["--num-prompts", "5", "--max-new-tokens", "10", "--no-progress"]


def _check(capsys: pytest.CaptureFixture[str], draft: str, *args: str) -> tuple[int, dict]:
    code = main(["check", "--json", "--target", str(EMBEDDED.target), "--draft", draft, *DECISIVE, *args])
    return code, json.loads(capsys.readouterr().out)


def test_a_draft_the_installed_release_refuses_is_refused_by_check(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mask-fill drafter with a Markov head: the census says dflash (what check used to serve as is), and
    sglang 0.5.17's plan refuses it (no mask-fill DSPARK layout, and DFLASH would drop the head)."""
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    monkeypatch.setattr(releases, "installed_sglang", lambda: "0.5.17")
    code, report = _check(capsys, str(MASKFILL))
    (served,) = report["served"]
    assert served["harvest"] is None and "sglang 0.5.17" in served["refused"]
    assert [r["version"] for r in served["releases"]] == ["0.5.17"]
    (rec,) = report["recommendations"]
    assert rec["verdict"] == "refused" and "refuses it at startup" in rec["advice"]
    assert code == 2 == report["exit_code"] and report["verdict"] == "refused"


def test_a_release_that_serves_it_through_another_builtin_serves_it_as_is(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    monkeypatch.setattr(releases, "installed_sglang", lambda: "0.5.23")
    code, report = _check(capsys, str(MASKFILL))
    (served,) = report["served"]
    (release,) = served["releases"]
    # the dflash harvest, served through DSPARK (sample_from_anchor=false), as the launch plans it
    assert (served["harvest"], release["builtin"], release["harvest"]) == ("dflash", "DSPARK", "dflash")
    assert code == 0 and report["recommendations"][0]["verdict"] == "serve-as-is"


def test_without_sglang_every_tested_release_is_planned(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    monkeypatch.setattr(releases, "installed_sglang", lambda: None)
    code = main(["check", "--target", str(EMBEDDED.target), "--draft", str(MASKFILL), *DECISIVE])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith(f"  {MASKFILL.name}: dflash harvest"))
    assert "on sglang 0.5.23; sglang 0.5.17 refuses it: " in line
    assert code == 0  # a release that serves it decides; the refusing one is named
