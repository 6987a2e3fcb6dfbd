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


# -- the whole orchestration against a stand-in server ---------------------------------------------
# No GPU here, so a small HTTP server stands in for `python -m sglang.launch_server`: it serves
# /health, /generate and /get_server_info, resolves the harvest with the plugin's real make_plan() and
# logs through the real AcceptTelemetry. Matched harvest: 2 drafts accepted per round; mismatched: 0.
FAKE_SERVER = r"""
import json, logging, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stdout)
argv = sys.argv[1:]
opt = lambda name: argv[argv.index(name) + 1] if name in argv else None
algo, draft, port = opt("--speculative-algorithm"), opt("--speculative-draft-model-path"), int(opt("--port"))
state = {"accepted": 0, "rounds": 0}
telemetry, accept = None, None
if algo is not None:
    trained = DsparkHarvest.explain(census(draft), environ={}).harvest
    if algo == "DSPARK_HARVEST":
        env = os.environ.get("MEMRA_DSPARK_HARVEST")
        request = LaunchRequest(draft=draft, target=opt("--model-path"), harvest_env=env)
        s = make_plan(request, SglangSupport.for_version("0.5.23"))
        print(s.describe(), flush=True)
        arm = s.resolution.harvest
        telemetry = AcceptTelemetry(s.geometry.gamma, arm, s.resolution.source,
                                    settings=TelemetrySettings.from_env())
    else:
        arm = DsparkHarvest.DFLASH if algo == "DFLASH" else DsparkHarvest.DSPARK
    accept = 2 if arm is trained else 0

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/get_server_info":
            avg = None if accept is None else 1 + state["accepted"] / max(state["rounds"], 1)
            return self.reply({"internal_states": [{"avg_spec_accept_length": avg}]})
        return self.reply({})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        meta = {}
        if accept is not None:
            for _ in range(10):
                state["rounds"] += 1; state["accepted"] += accept
                if telemetry is not None:
                    telemetry.on_verify_complete([accept])
            meta["spec_accept_length"] = 1.0 + accept
        self.reply({"text": "out:" + req["text"][::-1], "meta_info": meta})

ThreadingHTTPServer(("127.0.0.1", port), Handler).serve_forever()
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", ["zlab_dflash", "specforge_dspark"])
def test_full_run_against_a_stand_in_server(name: str, tmp_path: Path) -> None:
    import json
    import os

    draft = write_checkpoint(tmp_path, name)
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    fake_python = tmp_path / "fakepython"
    run_server = f"{shlex.quote(sys.executable)} {shlex.quote(str(server))}"
    fake_python.write_text(f'#!/bin/sh\nshift 2  # drop "-m sglang.launch_server"\nexec {run_server} "$@"\n')
    os.chmod(fake_python, 0o755)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\n" + json.dumps({"prompt": "second prompt"}) + "\n")
    out = tmp_path / "report.json"
    argv = [
        "--model-path", "t", "--draft", str(draft), "--python", str(fake_python), "--port", str(_free_port()),
        "--prompts", str(prompts), "--workdir", str(tmp_path / "runs"), "--out", str(out),
        "--alarm-warmup", "2", "--alarm-window", "5", "--startup-timeout", "120",
    ]  # fmt: skip
    code = gv.main(argv)
    report = json.loads(out.read_text())
    arm = FIXTURES[name].expect
    assert report["census_arm"] == arm and report["prompts"] == 2
    checks = report["checks"]
    rows = {row["run"]: row for row in report["accept_lengths"]}
    assert rows["plugin-auto"]["harvest"] == arm
    assert rows[f"plugin-{arm}"]["plugin_log_accept_len"] == pytest.approx(3.0)
    assert rows[f"plugin-{arm}"]["server_info_accept_len"] == pytest.approx(3.0)
    wrong = "dspark" if arm == "dflash" else "dflash"
    assert rows[f"plugin-{wrong}"]["plugin_log_accept_len"] == pytest.approx(1.0)
    assert rows[f"plugin-{wrong}"]["plugin_log_rounds"] == 20
    assert rows["baseline"]["server_info_accept_len"] is None
    assert checks["alarm_on_forced_wrong_arm"]["ok"] is True
    assert checks["auto_resolves_census_arm"]["ok"] is True
    assert all(checks[f"exact[{r}]"]["ok"] for r in rows if r != "baseline")
    # the stand-in's builtin DFLASH accepts only when the checkpoint is mask-fill, like the real one
    assert checks["dflash_arm_identical_to_builtin_DFLASH"]["ok"] is True
    assert code == 0
    assert (tmp_path / "runs" / "plugin-auto.log").read_text().count("DSPARK_HARVEST: harvest=") == 1


def test_embedded_dry_run_lists_exactly_the_served_cases_runs(tmp_path: Path) -> None:
    """--embedded runs the CPU suite's served cases (scripts/served_cases.py), no second list."""
    sys.path.insert(0, str(SCRIPT.parent))
    import served_cases as sc

    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--embedded", "--dry-run", "--workdir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    names = [
        line[2:] for line in proc.stdout.splitlines() if line.startswith("# ") and "served cases" not in line
    ]
    assert names == ["baseline", *[r.name for r in sc.runs_of()]]
    commands = [line for line in proc.stdout.splitlines() if "sglang.launch_server" in line]
    for run, cmd in zip(sc.runs_of(), commands[1:], strict=True):
        assert f"--speculative-algorithm {run.algorithm}" in cmd
        # a bundled run names no draft: sglang's DSPARK finds it in the target's dspark/ subfolder
        assert ("--speculative-draft-model-path" in cmd) is not run.bundled
        assert (sc.bundled_key(run.drafter) in cmd) is run.bundled
        assert (
            ("MEMRA_DSPARK_HARVEST=" + run.harvest in cmd)
            if run.harvest
            else "MEMRA_DSPARK_HARVEST" not in cmd
        )
    assert "drafter-dspark-zero-markov" in proc.stdout
