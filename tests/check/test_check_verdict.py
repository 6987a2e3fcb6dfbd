"""``check`` as a deployment gate: the paired comparison, the verdicts and their exit codes, several
drafters, and the JSON Schema derived from the typed report."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from sglang_dspark_plugin.check.confidence import MIN_PROMPTS, compare
from sglang_dspark_plugin.check.report import SCHEMA_VERSION, report_schema
from sglang_dspark_plugin.check.verdicts import VERDICTS, exit_code, overall
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.harvest import ENV_VAR, DsparkHarvest

QUICK = ["--max-new-tokens", "10", "--no-progress"]
DECISIVE = [*QUICK, "--num-prompts", "5"]
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "check-report.schema.json"


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


# -- the paired comparison -------------------------------------------------------------------------


def test_a_clear_difference_is_decided_either_way() -> None:
    low = [(1, 10), (0, 8), (2, 9), (1, 10), (0, 12), (1, 9)]  # accept length ~1.1
    high = [(25, 10), (20, 8), (18, 9), (30, 10), (24, 12), (21, 9)]  # ~3.3
    up = compare(dflash=low, dspark=high)
    assert up.decided is DsparkHarvest.DSPARK and 0 < up.low <= up.difference <= up.high
    down = compare(dflash=high, dspark=low)
    assert down.decided is DsparkHarvest.DFLASH and down.low <= down.difference <= down.high < 0


def test_noise_around_no_difference_is_undecided() -> None:
    a = [(10, 10), (14, 10), (8, 10), (12, 10), (11, 10), (9, 10)]
    b = [(12, 10), (9, 10), (11, 10), (10, 10), (13, 10), (9, 10)]
    result = compare(dflash=a, dspark=b)
    assert result.decided is None and result.low < 0 < result.high


def test_too_few_prompts_state_no_confidence_however_large_the_gap() -> None:
    few = MIN_PROMPTS - 1
    result = compare(dflash=[(0, 10)] * few, dspark=[(30, 10)] * few)
    assert result.decided is None and result.prompts == few and result.difference == pytest.approx(3.0)


def test_the_difference_is_the_headline_accept_lengths_difference() -> None:
    # rounds are summed over prompts (the headline definition), not the prompts' means averaged
    dflash, dspark = [(0, 1), (0, 9)] * 3, [(9, 1), (9, 9)] * 3
    result = compare(dflash=dflash, dspark=dspark)
    assert result.difference == pytest.approx(54 / 30)


def test_the_interval_is_reproducible() -> None:
    a, b = [(3, 10), (5, 9), (2, 8), (4, 10), (6, 7)], [(9, 10), (7, 9), (8, 8), (12, 10), (5, 7)]
    assert compare(dflash=a, dspark=b) == compare(dflash=a, dspark=b)


# -- verdicts and exit codes -----------------------------------------------------------------------


def test_each_verdict_has_its_own_exit_code_and_the_worst_wins() -> None:
    codes = {v: exit_code(v) for v in VERDICTS}
    assert len(set(codes.values())) == len(codes)
    assert codes["serve-as-is"] == 0 and codes["not-exact"] == 1 and codes["refused"] == 2
    assert overall(["serve-as-is", "serve-as-is"], exact=True) == "serve-as-is"
    assert overall(["serve-as-is", "inconclusive"], exact=True) == "inconclusive"
    assert overall(["inconclusive", "contradicts"], exact=True) == "contradicts"
    assert overall(["contradicts"], exact=False) == "not-exact"


def test_help_documents_every_exit_code_and_gives_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--help"]) == 0
    out = capsys.readouterr().out
    for verdict, (code, _) in VERDICTS.items():
        assert re.search(rf"^\s+{code}\s+{verdict}\s", out, re.M), verdict
    assert "examples:" in out and "--draft A --draft B" in out


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_one_prompt_is_inconclusive_not_serve_as_is(capsys: pytest.CaptureFixture[str]) -> None:
    drafter = str(EMBEDDED.drafters["dspark"])
    code, report = _check(
        capsys, *QUICK, "--num-prompts", "1", "--target", str(EMBEDDED.target), "--draft", drafter
    )
    assert code == 4 == report["exit_code"] and report["verdict"] == "inconclusive"
    (rec,) = report["recommendations"]
    assert (
        rec["verdict"] == "inconclusive" and rec["comparison"]["decided"] is None and rec["override"] is None
    )


def test_a_served_harvest_that_contradicts_the_measurement_exits_3_with_the_override(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_VAR, "dflash")  # forces the wrong harvest on a shifted drafter
    drafter = str(EMBEDDED.drafters["dspark"])
    code = main(["check", *DECISIVE, "--target", str(EMBEDDED.target), "--draft", drafter])
    out = capsys.readouterr().out
    assert code == 3
    assert f"{ENV_VAR}=dspark" in out.split("verdict: contradicts", 1)[1]  # the override, in the verdict


def test_several_drafters_are_all_measured_and_graded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dflash = str(EMBEDDED.drafters["dflash"])
    dspark = str(EMBEDDED.drafters["dspark"])
    code, report = _check(
        capsys, *DECISIVE, "--target", str(EMBEDDED.target), "--draft", dflash, "--draft", dspark
    )
    assert code == 0 and report["verdict"] == "serve-as-is"
    names = [Path(dflash).name, Path(dspark).name]
    assert [r["drafter"] for r in report["recommendations"]] == names
    assert sorted({r["drafter"] for r in report["runs"]}) == sorted(names)
    assert [r["harvest"] for r in report["recommendations"]] == ["dflash", "dspark"]
    assert {t["drafter"] for t in report["targets"]} == set(names)
    # the same checkpoint twice is refused rather than measured twice under one name
    code, again = _check(
        capsys, *DECISIVE, "--target", str(EMBEDDED.target), "--draft", dflash, "--draft", dflash
    )
    assert code == 2 and again["error"]["kind"] == "usage"


def test_target_takes_a_hub_id_from_the_local_cache(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    snapshot = tmp_path / "hub" / "models--org--tiny-target" / "snapshots" / ("0" * 40)
    shutil.copytree(EMBEDDED.target, snapshot)
    (tmp_path / "hub" / "models--org--tiny-target" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--tiny-target" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    drafter = str(EMBEDDED.drafters["dflash"])
    code, report = _check(
        capsys, *QUICK, "--num-prompts", "1", "--target", "org/tiny-target", "--draft", drafter
    )
    assert code == 4 and Path(report["settings"]["target"]) == snapshot
    code, missing = _check(capsys, *QUICK, "--target", "org/not-cached", "--draft", drafter)
    assert code == 2 and missing["error"]["kind"] == "invalid"


def test_device_and_dtype_default_to_auto(capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    drafter = str(EMBEDDED.drafters["dflash"])
    _, report = _check(
        capsys, *QUICK, "--num-prompts", "1", "--target", str(EMBEDDED.target), "--draft", drafter
    )
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert report["settings"]["device"].startswith(expected)
    # float32 on a CPU; on CUDA the target checkpoint's own dtype
    assert report["settings"]["dtype"] == ("float32" if expected == "cpu" else "float16")


# -- the JSON Schema -------------------------------------------------------------------------------


TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def _validate_any_of(value: Any, options: list[dict[str, Any]], defs: dict[str, Any], where: str) -> None:
    errors = []
    for option in options:
        try:
            return _validate(value, option, defs, where)
        except AssertionError as exc:
            errors.append(str(exc))
    raise AssertionError(f"{where}: matches no option: {errors}")


def _validate_object(value: dict[str, Any], schema: dict[str, Any], defs: dict[str, Any], where: str) -> None:
    props = schema.get("properties", {})
    missing = set(schema.get("required", [])) - set(value)
    assert not missing, f"{where}: missing {missing}"
    for key, item in value.items():
        assert key in props or schema.get("additionalProperties") is not False, f"{where}: unexpected {key!r}"
        _validate(item, props.get(key, schema.get("additionalProperties", {})), defs, f"{where}.{key}")


def _validate(value: Any, schema: dict[str, Any], defs: dict[str, Any], where: str = "$") -> None:
    """A validator for the subset of JSON Schema that ``report_schema`` uses."""
    if "$ref" in schema:
        return _validate(value, defs[schema["$ref"].rsplit("/", 1)[1]], defs, where)
    if "anyOf" in schema:
        return _validate_any_of(value, schema["anyOf"], defs, where)
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    kind = schema.get("type")
    assert kind is None or TYPES[kind](value), f"{where}: {value!r} is not {kind}"
    if kind == "array":
        for i, item in enumerate(value):
            _validate(item, schema["items"], defs, f"{where}[{i}]")
    if kind == "object":
        _validate_object(value, schema, defs, where)
    return None


def test_the_published_schema_is_the_generated_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--schema"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == report_schema() == json.loads(SCHEMA_FILE.read_text())
    assert str(SCHEMA_VERSION) in printed["title"]


def test_a_real_report_validates_against_the_schema_and_a_wrong_one_does_not(
    capsys: pytest.CaptureFixture[str],
) -> None:
    schema = report_schema()
    code, report = _check(capsys, *QUICK, "--num-prompts", "1")
    assert code == 4
    _validate(report, schema, schema["$defs"])
    assert report["schema_version"] == SCHEMA_VERSION
    broken = json.loads(json.dumps(report))
    broken["recommendations"][0]["verdict"] = "ship it"
    with pytest.raises(AssertionError):
        _validate(broken, schema, schema["$defs"])
    del broken["runs"][0]["accept_length"]
    with pytest.raises(AssertionError):
        _validate(broken, schema, schema["$defs"])
