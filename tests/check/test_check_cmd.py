"""``dspark-harvest check``: the JSON schema, the table and plot, custom checkpoints, refusals."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import DRAFTERS, EMBEDDED
from sglang_dspark_plugin.harvest import DsparkHarvest

RUN_KEYS = {
    "drafter",
    "drafter_strategy",
    "harvest",
    "matched",
    "accept_length",
    "sglang_meta_accept_length",
    "per_position",
    "per_prompt_accepted",
    "per_prompt_rounds",
    "exact_match",
    "departures",
    "tokens_per_s",
    "probe_verdict",
}
QUICK = ["--max-new-tokens", "10", "--num-prompts", "1", "--no-progress"]
DECISIVE = ["--num-prompts", "5"]  # with QUICK's 10 tokens: enough for the embedded drafters' verdicts
EXIT_INCONCLUSIVE = 4  # one prompt states no confidence


def check_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    code = main(["check", "--json", *QUICK, *args])
    return code, json.loads(capsys.readouterr().out)


def assert_run_shape(run: dict, block_size: int) -> None:
    assert set(run) == RUN_KEYS
    harvest = DsparkHarvest.from_name(run["harvest"])
    assert harvest is not None and run["drafter_strategy"] in ("dflash", "dspark")
    assert run["matched"] is (run["harvest"] == run["drafter_strategy"])
    gamma = harvest.n_drafts(block_size)
    rates = run["per_position"]
    assert len(rates) == gamma
    assert all(0.0 <= r <= 1.0 for r in rates)
    # acceptance is a prefix: draft k+1 is only accepted when draft k was
    assert all(later <= earlier for earlier, later in zip(rates, rates[1:], strict=False))
    # mean accept length = 1 + accepted drafts per round = 1 + the sum of the per-position rates
    assert run["accept_length"] == pytest.approx(1.0 + sum(rates))
    assert 1.0 <= run["accept_length"] <= gamma + 1
    # sglang's meta_info figure: tokens / verify rounds per request, capped by the budget (<= gamma + 1)
    assert 1.0 <= run["sglang_meta_accept_length"] <= gamma + 1
    assert run["exact_match"] is True
    assert run["tokens_per_s"] > 0
    assert isinstance(run["probe_verdict"], str) and run["probe_verdict"]


def test_check_json_schema_on_the_embedded_models(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    code, report = check_json(capsys)
    assert code == EXIT_INCONCLUSIVE == report["exit_code"] and report["verdict"] == "inconclusive"
    assert report["schema_version"] >= 2
    runs = report["runs"]
    folder = {p.name: name for name, p in EMBEDDED.drafters.items()}  # drafter (folder) -> embedded name
    assert len(folder) == len(DRAFTERS) == 4
    # every embedded drafter under each harvest
    assert sorted((r["drafter"], r["harvest"]) for r in runs) == sorted(
        (p.name, h.name()) for p in EMBEDDED.drafters.values() for h in DsparkHarvest
    )
    # the census names each embedded drafter's own training strategy (not its name)
    assert {r["drafter"]: r["drafter_strategy"] for r in runs} == {
        p.name: EMBEDDED.strategy(name) for name, p in EMBEDDED.drafters.items()
    }
    for run in runs:
        assert_run_shape(run, EMBEDDED.block_sizes[folder[run["drafter"]]])
    assert report["ar_tokens_per_s"] > 0
    assert "uncapped" in report["accept_length_definition"]
    # one manifest per drafter, in EMBEDDED.drafters order, each at that drafter's own block size
    assert len(report["manifests"]) == len(DRAFTERS)
    for manifest, (name, path) in zip(report["manifests"], EMBEDDED.drafters.items(), strict=True):
        assert manifest["producer"] == "reference-engine"
        assert manifest["checkpoint"] == str(path)
        assert manifest["block_size"] == EMBEDDED.block_sizes[name]
        assert manifest["harvest"] in ("dflash", "dspark")
        harvest = DsparkHarvest.from_name(manifest["harvest"])
        assert manifest["gamma"] == harvest.n_drafts(EMBEDDED.block_sizes[name])
    # the DSpark heads, as loaded: only the SpecForge-shaped drafters (shifted, mask-fill) have them
    heads = {d["drafter"]: (d["markov_head"], d["confidence_head"]) for d in report["drafters"]}
    assert heads["drafter-dflash"] == heads["drafter-dspark"] == (None, None)
    for name in ("dspark-markov", "dspark-maskfill"):
        markov, confidence = heads[f"drafter-{name}"]
        assert markov["type"] == "vanilla"
        assert markov["rank"] == EMBEDDED.report["drafters"][name]["markov_rank"]
        assert confidence["with_markov"] is True
    assert report["settings"]["prompts"] == 1 and report["settings"]["max_new_tokens"] == 10
    # what DSPARK_HARVEST would serve now: the census's own strategy (MEMRA_DSPARK_HARVEST unset)
    assert {s["drafter"]: (s["harvest"], s["source"]) for s in report["served"]} == {
        p.name: (EMBEDDED.strategy(name), "census") for name, p in EMBEDDED.drafters.items()
    }
    # the embedded targets are graded per drafter: four each
    from sglang_dspark_plugin.cli.check import targets

    graded = targets(report)
    assert len(graded) == 4 * len(DRAFTERS)
    for name in folder:
        assert sum(text.startswith(f"{name}: ") for text, _ in graded) == 4


def test_check_takes_each_drafter_census_once(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_dspark_plugin import census as census_module
    from sglang_dspark_plugin.check.conclusions import releases_to_plan

    calls: list[str] = []
    planned: list[str] = []
    real = census_module.census

    def counted(path: str, *args: object, **kwargs: object) -> object:
        (planned if kwargs.get("download") else calls).append(path)  # the plan censuses as a launch does
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(census_module, "census", counted)
    code, _ = check_json(capsys)
    assert code == EXIT_INCONCLUSIVE
    assert sorted(calls) == sorted(str(p) for p in EMBEDDED.drafters.values())
    # the served harvest is the launch's own plan: one per drafter and release planned
    assert sorted(planned) == sorted([str(p) for p in EMBEDDED.drafters.values()] * len(releases_to_plan()))


def test_check_table_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    png = tmp_path / "accept.png"
    code = main(["check", *QUICK, "--plot", str(png)])
    out = capsys.readouterr().out
    assert code == EXIT_INCONCLUSIVE
    header = next(line for line in out.splitlines() if line.startswith("drafter "))
    for column in (
        "strategy",
        "harvest",
        "matched",
        "accept",
        "per-position",
        "probe",
        "exact",
        "tok/s",
        "speedup",
    ):
        assert column in header
    # one row per embedded drafter and harvest
    assert sum(line.startswith("drafter-") for line in out.splitlines()) == 2 * len(DRAFTERS)
    assert any(line.startswith("autoregressive") for line in out.splitlines())
    assert "recommendation:" in out and "targets:" in out
    assert "DSpark heads:\n  drafter-dspark-markov: Markov head vanilla" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_check_on_local_checkpoints_recommends_a_harvest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    draft = shutil.copytree(EMBEDDED.drafters["dspark"], tmp_path / "my-drafter")
    code, report = check_json(capsys, *DECISIVE, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert code == 0 and report["verdict"] == "serve-as-is"
    assert [(r["drafter"], r["harvest"]) for r in report["runs"]] == [
        ("my-drafter", "dflash"),
        ("my-drafter", "dspark"),
    ]
    for run in report["runs"]:
        assert_run_shape(run, EMBEDDED.block_sizes["dspark"])
        assert run["drafter_strategy"] == "dspark"
    (rec,) = report["recommendations"]
    accept = {r["harvest"]: r["accept_length"] for r in report["runs"]}
    assert accept[rec["harvest"]] == max(accept.values())  # ties go to the census
    assert rec["harvest"] == "dspark" and rec["comparison"]["low"] > 0 and rec["override"] is None
    (manifest,) = report["manifests"]
    assert manifest["harvest"] == rec["harvest"]
    assert manifest["checkpoint"] == str(draft)


def _refusal(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    code = main(["check", "--json", *QUICK, *args])
    assert code == 2
    return json.loads(capsys.readouterr().out)["error"]


def test_check_refuses_half_a_pair(capsys: pytest.CaptureFixture[str]) -> None:
    error = _refusal(capsys, "--target", str(EMBEDDED.target))
    assert error["kind"] == "usage" and "--draft" in error["message"]


def test_check_refuses_a_domino_drafter(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    draft = shutil.copytree(EMBEDDED.drafters["dflash"], tmp_path / "domino")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["architectures"] = ["DominoDraftModel"]
    (draft / "config.json").write_text(json.dumps(cfg))
    error = _refusal(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert error["kind"] == "unsupported" and "Domino" in error["message"]


def test_check_refuses_a_reduced_draft_vocabulary_before_loading(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A speculators drafter the engine cannot map is refused from its config, before anything loads."""
    import sys

    from sglang_dspark_plugin.check import cli

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from export_formats import to_speculators

    draft = to_speculators(
        EMBEDDED.drafters["dflash"], tmp_path / "spec", model_type="dflash", sample_from_anchor=False
    )
    cfg = json.loads((draft / "config.json").read_text())
    (draft / "config.json").write_text(json.dumps({**cfg, "draft_vocab_size": 512}))

    def must_not_load(*args: object) -> None:
        raise AssertionError("the target was loaded")

    monkeypatch.setattr(cli, "load_target_model", must_not_load)
    error = _refusal(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert error["kind"] == "unsupported" and "draft_vocab_size" in error["message"]


def test_check_runs_a_speculators_format_drafter_like_its_original(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The same drafter exported by speculators: its names mapped, the same rounds, the same result."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from export_formats import to_speculators

    original = shutil.copytree(EMBEDDED.drafters["dspark-markov"], tmp_path / "sf")
    spec = to_speculators(original, tmp_path / "spec", model_type="dspark", sample_from_anchor=True)
    reports = {}
    for name, draft in (("sf", original), ("spec", spec)):
        code, reports[name] = check_json(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
        # exact (else 1); one prompt states no confidence; sglang itself cannot load the speculators
        # config, so the launch's plan refuses that copy, and check says so (exit 2)
        assert code == (EXIT_INCONCLUSIVE if name == "sf" else 2)
    assert reports["spec"]["served"][0]["harvest"] is None and reports["spec"]["verdict"] == "refused"
    for a, b in zip(reports["sf"]["runs"], reports["spec"]["runs"], strict=True):
        assert (a["harvest"], a["drafter_strategy"]) == (b["harvest"], b["drafter_strategy"])
        assert (a["accept_length"], a["per_position"], a["exact_match"]) == (
            b["accept_length"],
            b["per_position"],
            b["exact_match"],
        )
    assert reports["spec"]["recommendations"][0]["harvest"] == "dspark"


def test_check_refuses_a_drafter_for_another_target(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    draft = shutil.copytree(EMBEDDED.drafters["dflash"], tmp_path / "elsewhere")
    cfg = json.loads((draft / "config.json").read_text())
    n = len(cfg["dflash_config"]["target_layer_ids"])
    cfg["dflash_config"]["target_layer_ids"] = list(range(90, 90 + n))
    cfg["num_target_layers"] = 100
    (draft / "config.json").write_text(json.dumps(cfg))
    error = _refusal(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert error["kind"] == "invalid" and "target_layer_ids" in error["message"]


def test_check_refuses_a_missing_target(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    error = _refusal(capsys, "--target", str(tmp_path), "--draft", str(EMBEDDED.drafters["dflash"]))
    assert error["kind"] == "invalid" and "config.json" in error["message"]


def test_check_refuses_an_unknown_device(capsys: pytest.CaptureFixture[str]) -> None:
    error = _refusal(capsys, "--device", "abacus")
    assert error["kind"] == "usage" and "abacus" in error["message"] and "--device" in error["message"]


def test_a_non_exact_run_exits_1_and_says_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_dspark_plugin.check import cli
    from sglang_dspark_plugin.check.report import CheckReport, Departure, RunRow, Settings
    from sglang_dspark_plugin.check.verdicts import exit_code, overall

    run = RunRow(
        drafter="d",
        drafter_strategy="dflash",
        harvest=DsparkHarvest.DFLASH,
        matched=True,
        accept_length=2.0,
        sglang_meta_accept_length=None,
        per_position=(0.6, 0.4),
        per_prompt_accepted=(2,),
        per_prompt_rounds=(2,),
        exact_match=False,
        departures=(Departure(0, 3, 11, 12, margin=2.5, tolerance=0.3, near_tie=False),),
        tokens_per_s=10.0,
        probe_verdict="aligned",
    )
    settings = Settings(
        target="t",
        embedded=False,
        device="cpu",
        dtype="bfloat16",
        prompts=1,
        max_new_tokens=4,
        threads=1,
        wall_s=0.1,
    )
    verdict = overall([], exact=False)
    report = CheckReport(
        schema_version=3,
        verdict=verdict,
        exit_code=exit_code(verdict),
        accept_length_definition="",
        runs=[run],
        ar_tokens_per_s=5.0,
        manifests=[],
        drafters=[],
        recommendations=[],
        probes=[],
        served=[],
        targets=[],
        settings=settings,
    )
    monkeypatch.setattr(cli, "check", lambda args: report)
    assert main(["check", "--no-progress"]) == 1
    out = capsys.readouterr().out
    assert "NOT EXACT: 1 token(s)" in out and "clear margin" in out
    assert "prompt 0, new token 3: 11 instead of 12, float32 margin 2.5 > tolerance 0.3" in out
    assert "2.00x" in out  # speedup = 10 / 5 tokens/s
