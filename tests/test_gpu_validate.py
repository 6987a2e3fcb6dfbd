"""scripts/gpu_validate.py without a GPU or sglang: the dry run, the log parser, the checks.

The log parser is fed lines written by the real ``AcceptTelemetry`` (not copies of its format), so a
change of the plugin's log format breaks this test instead of the GPU validation.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoints import FIXTURES, write_checkpoint

from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_validate.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["gpu_validate"] = module
    spec.loader.exec_module(module)
    return module


gv = load_script()


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize("name", ["zlab_dflash", "specforge_dspark", "dspark_markov_rank0"])
def test_dry_run_prints_every_configuration(name: str, tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, name)
    proc = dry_run("--model-path", "my/target", "--draft", str(draft), "--builtins", "DFLASH,DSPARK")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"# census arm of {draft}: {FIXTURES[name].expect}"
    names = [line[2:] for line in lines if line.startswith("# ") and not line.startswith("# census")][1:]
    assert names == [
        "baseline",
        "builtin-DFLASH",
        "builtin-DSPARK",
        "plugin-auto",
        "plugin-dflash",
        "plugin-dspark",
    ]
    commands = {n: shlex.split(lines[lines.index(f"# {n}") + 1]) for n in names}
    for n, argv in commands.items():
        launch = argv[argv.index("-m") :]
        assert launch[:2] == ["-m", "sglang.launch_server"]
        assert launch[launch.index("--model-path") + 1] == "my/target"
        spec = (
            launch[launch.index("--speculative-algorithm") + 1]
            if "--speculative-algorithm" in launch
            else None
        )
        expected = {"baseline": None, "builtin-DFLASH": "DFLASH", "builtin-DSPARK": "DSPARK"}.get(
            n, "DSPARK_HARVEST"
        )
        assert spec == expected
        assert ("--speculative-draft-model-path" in launch) is (spec is not None)
        if spec is not None:
            assert launch[launch.index("--speculative-draft-model-path") + 1] == str(draft)
        env = argv[: argv.index("-m")]
        if n == "plugin-auto":
            assert env[:3] == ["env", "-u", "MEMRA_DSPARK_HARVEST"]
        for arm in ("dflash", "dspark"):
            assert (f"MEMRA_DSPARK_HARVEST={arm}" in env) is (n == f"plugin-{arm}")
        assert any(a.startswith("MEMRA_DSPARK_ALARM_WARMUP=") for a in env) is n.startswith("plugin-")


def test_dry_run_extra_args_and_refusals(tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, "specforge_dflash")
    proc = dry_run("--model-path", "t", "--draft", str(draft), "--extra-args", "--mem-fraction-static 0.7")
    assert proc.returncode == 0
    headers = [line for line in proc.stdout.splitlines() if line.startswith("# ")]
    assert len(headers) - 2 == 5  # baseline, builtin-DFLASH, plugin-{auto,dflash,dspark}
    assert proc.stdout.count("--mem-fraction-static 0.7") == 5  # every launch carries the extra arguments
    bad = dry_run("--model-path", "t", "--draft", str(draft), "--builtins", "EAGLE")
    assert bad.returncode == 2 and "EAGLE" in bad.stderr
    missing = dry_run("--model-path", "t", "--draft", str(tmp_path / "nope"))
    assert missing.returncode == 0 and "unknown (" in missing.stdout.splitlines()[0]


def telemetry_log(counts_per_round: list[list[int]], gamma: int, harvest: str) -> str:
    """Real plugin log lines for these rounds (accepted-draft counts per request)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"[2026-01-01 00:00:00] {record.getMessage()}")

    logger = logging.getLogger(f"test_gpu_validate.{harvest}.{gamma}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    settings = TelemetrySettings(summary_every=2, alarm_warmup=1, alarm_window=2)
    tel = AcceptTelemetry(gamma, DsparkHarvest.from_name(harvest), "env", settings=settings, logger=logger)
    for counts in counts_per_round:
        tel.on_verify_complete(counts)
    return "\n".join(lines)


def test_parse_log_reads_real_telemetry_lines() -> None:
    rounds = [[3, 0], [1], [2, 2, 0], [0]]
    text = "[x] DSPARK_HARVEST: harvest=dspark (DSPARK semantics) from census\n" + telemetry_log(
        rounds, 4, "dspark"
    )
    res = gv.RunResult("plugin-dspark")
    gv.parse_log(text, res)
    flat = [c + 1 for r in rounds for c in r]  # accept length = accepted drafts + 1
    assert res.log_rounds == len(rounds)
    assert res.log_accept_length == pytest.approx(sum(flat) / len(flat))
    assert res.log_summary_accept_length == pytest.approx(sum(flat) / len(flat), abs=0.005)
    assert res.startup_harvest == "dspark"
    assert res.alarms == 0


def test_parse_log_counts_real_alarms() -> None:
    text = telemetry_log([[0, 0]] * 12, 7, "dflash")
    res = gv.RunResult("plugin-dflash")
    gv.parse_log(text, res)
    assert res.log_accept_length == pytest.approx(1.0)
    assert res.alarms >= 1


def _result(name: str, outputs: list[str], accept: float, alarms: int = 0, harvest: str | None = None):
    res = gv.RunResult(name, outputs=outputs, output_ids=[None] * len(outputs))
    res.meta_accept_lengths = [accept] * len(outputs)
    res.server_info_accept_length = accept
    res.alarms, res.startup_harvest = alarms, harvest
    return res


def test_evaluate_passes_and_fails() -> None:
    good = {
        "baseline": _result("baseline", ["a", "b"], 1.0),
        "builtin-DFLASH": _result("builtin-DFLASH", ["a", "b"], 3.1),
        "plugin-auto": _result("plugin-auto", ["a", "b"], 3.1, harvest="dflash"),
        "plugin-dflash": _result("plugin-dflash", ["a", "b"], 3.1),
        "plugin-dspark": _result("plugin-dspark", ["a", "b"], 1.1, alarms=2),
    }
    checks = gv.evaluate(good, "dflash")
    assert all(c["ok"] for c in checks.values()), checks
    assert set(checks) >= {
        "exact[plugin-dspark]",
        "dflash_arm_identical_to_builtin_DFLASH",
        "alarm_on_forced_wrong_arm",
    }

    bad = dict(good)
    bad["plugin-dflash"] = _result("plugin-dflash", ["a", "B"], 2.9)  # a token and the accept length differ
    bad["plugin-dspark"] = _result("plugin-dspark", ["a", "b"], 1.1, alarms=0)  # no alarm
    checks = gv.evaluate(bad, "dflash")
    assert checks["exact[plugin-dflash]"]["ok"] is False
    assert checks["dflash_arm_identical_to_builtin_DFLASH"]["ok"] is False
    assert checks["alarm_on_forced_wrong_arm"]["ok"] is False


def test_server_accept_length_shapes() -> None:
    assert gv.server_accept_length({"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert gv.server_accept_length({"avg_spec_accept_length": 3}) == 3.0
    assert gv.server_accept_length({"internal_states": [{}]}) is None
