"""scripts/gpu_validate.py without a GPU or sglang: the dry run, the checks, a stand-in server.

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
from bundled_checkpoints import TARGETS
from checkpoints import FIXTURES, write_checkpoint

from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_validate.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules["gpu_validate"] = module
    spec.loader.exec_module(module)
    return module


gv = load_script()
sys.path[:0] = [str(SCRIPT.parent), str(SCRIPT.parents[1] / "tests" / "sglang")]
import served_cases as sc  # noqa: E402
import validate_deployment as vd  # noqa: E402

from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan  # noqa: E402


def dry_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, timeout=120
    )


def _commands(stdout: str) -> dict[str, list[str]]:
    lines = stdout.splitlines()
    names = [line[2:].split(" (")[0] for line in lines[2:] if line.startswith("# ")]
    return {
        n: shlex.split(lines[lines.index(next(x for x in lines if x.startswith(f"# {n}"))) + 1])
        for n in names
    }


@pytest.mark.parametrize("name", ["zlab_dflash", "specforge_dspark", "dspark_markov_rank0"])
def test_dry_run_compares_each_arm_with_the_builtin_its_plan_names(name: str, tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, name)
    proc = dry_run("--model-path", "my/target", "--draft", str(draft))
    assert proc.returncode == 0, proc.stderr
    arm = FIXTURES[name].expect
    other = "dspark" if arm == "dflash" else "dflash"
    assert proc.stdout.splitlines()[0] == f"# census arm of {draft}: {arm}"
    commands = _commands(proc.stdout)
    # the forced arm has no builtin twin (a builtin reads the checkpoint as trained)
    assert list(commands) == ["baseline", "plugin-auto", f"builtin-{arm}", f"plugin-{other}"]
    support = SglangSupport.for_version(vd.ASSUMED_VERSION)  # no sglang in this interpreter
    plan = make_plan(LaunchRequest(draft=str(draft), target="my/target"), support)
    launch = commands[f"builtin-{arm}"][commands[f"builtin-{arm}"].index("-m") :]
    for field, value in plan.declared_args.items():  # the builtin, its window, its gamma flag
        flag = "--" + field.replace("_", "-")
        assert launch[launch.index(flag) + 1] == str(value)
    assert launch[launch.index("--speculative-draft-model-path") + 1] == str(draft)
    for n, argv in commands.items():
        env = argv[: argv.index("-m")]
        launch = argv[argv.index("-m") :]
        assert launch[launch.index("--model-path") + 1] == "my/target"
        plugin = n.startswith("plugin-")
        assert ("DSPARK_HARVEST" in launch) is plugin
        assert ("MEMRA_DSPARK_SYNC_DEBUG=1" in env and "MEMRA_DSPARK_HOST_TIMING=1" in env) is plugin
        assert (f"MEMRA_DSPARK_HARVEST={other}" in env) is (n == f"plugin-{other}")
        if n == "plugin-auto" or n.startswith("builtin-"):
            assert env[:3] == ["env", "-u", "MEMRA_DSPARK_HARVEST"]


def test_dry_run_extra_args_and_refusals(tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, "specforge_dflash")
    proc = dry_run("--model-path", "t", "--draft", str(draft), "--extra-args", "--mem-fraction-static 0.7")
    assert proc.returncode == 0
    assert proc.stdout.count("--mem-fraction-static 0.7") == 4  # every launch carries the extra arguments
    missing = dry_run("--model-path", "t", "--draft", str(tmp_path / "nope"))
    assert missing.returncode == 0 and "unknown (" in missing.stdout.splitlines()[0]
    # no census, no plan: both arms forced, each must be refused by the server, and no builtin to run
    assert list(_commands(missing.stdout)) == ["baseline", "plugin-dflash", "plugin-dspark"]
    assert missing.stdout.count("(the plan refuses it:") == 2
    bad = dry_run("--model-path", "t", "--draft", str(draft), "--embedded", "--cpu-harness")
    assert bad.returncode == 2 and "--cpu-harness" in bad.stderr


def telemetry_log(counts_per_round: list[list[int]], gamma: int, harvest: str) -> str:
    """Real plugin log lines for these rounds (accepted-draft counts per request)."""
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(f"[2026-01-01 00:00:00] {record.getMessage()}")

    logger = logging.getLogger(f"test_gpu_validate.{harvest}.{gamma}.{len(counts_per_round)}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Collect())
    settings = TelemetrySettings(summary_every=2, alarm_warmup=1, alarm_window=2)
    tel = AcceptTelemetry(gamma, DsparkHarvest.from_name(harvest), "env", settings=settings, logger=logger)
    for counts in counts_per_round:
        tel.on_verify_complete(counts)
    return "\n".join(lines)


def outcome(
    rounds: list[list[int]], gamma: int, tokens: list[list[int]], alarm_rounds: int = 0
) -> sc.Outcome:
    """An Outcome whose log holds real telemetry lines: ``rounds`` are each request's accepted-draft
    counts, served one at a time, then the same requests batched; ``alarm_rounds`` more rounds of 0
    accepted raise the alarm."""
    per_round = [[c] for r in rounds for c in r]
    batched = [
        [r[i] for r in rounds if i < len(r)] for i in range(max(map(len, rounds)))
    ]  # finished ones leave
    log = telemetry_log(per_round + batched, gamma, "dflash")
    metas = [
        {"spec_verify_ct": len(r), "completion_tokens": len(t), "spec_accept_length": len(t) / len(r)}
        for r, t in zip(rounds, tokens, strict=True)
    ]
    return sc.Outcome(list(tokens), metas, log, list(tokens), [dict(m) for m in metas])


def test_log_checks_pass_on_agreeing_log_and_meta_and_fail_on_a_missing_round() -> None:
    rounds, tokens = [[2, 2, 1], [3, 0, 2]], [[1] * 9, [2] * 9]  # the prefill's token, then 3+3+2 and 4+1+3
    good = vd.log_checks("plugin-auto", outcome(rounds, 3, tokens), gamma=3)
    assert good and all(c.ok for c in good), [c for c in good if not c.ok]
    short = outcome(rounds, 3, tokens)
    short.metas[0]["spec_verify_ct"] = 4  # sglang counts a round the plugin did not log
    failed = {c.name for c in vd.log_checks("plugin-auto", short, gamma=3) if not c.ok}
    assert (
        "plugin-auto: one logged round per verify round of each request (meta_info spec_verify_ct)" in failed
    )
    more = outcome(rounds, 3, [[1] * 3, [2] * 8])  # 8 tokens logged for a request that got 3
    failed = {c.name for c in vd.log_checks("plugin-auto", more, gamma=3) if not c.ok}
    assert "plugin-auto: each request's logged accept lengths add up to its tokens" in failed


def _runs() -> list:
    return [
        vd.RunSpec("baseline", []),
        vd.RunSpec("plugin-auto", ["--speculative-algorithm", "DSPARK_HARVEST"], {}, "dflash", True),
        vd.RunSpec("builtin-dflash", ["--speculative-algorithm", "DFLASH"], {}, "dflash"),
        vd.RunSpec("plugin-dspark", ["--speculative-algorithm", "DSPARK_HARVEST"], {}, "dspark", True),
    ]


def _served(rounds, tokens, startup="dflash", builtin=False) -> vd.RunResult:
    got = outcome(rounds, 7, tokens)
    if builtin:
        got.log = ""
    else:
        got.log = f"[x] DSPARK_HARVEST: harvest={startup} (DFLASH semantics) from census\n" + got.log
    return vd.RunResult(got, got.log)


def test_evaluate_passes_identical_arms_and_fails_each_broken_one() -> None:
    tokens = [[5] * 7, [6] * 7]
    good_rounds, bad_rounds = [[2, 2], [1, 1, 1]], [[0] * 6, [0] * 6]
    results = {
        "baseline": vd.RunResult(sc.Outcome(tokens, [{}, {}], ""), ""),
        "plugin-auto": _served(good_rounds, tokens),
        "builtin-dflash": _served(good_rounds, tokens, builtin=True),
        "plugin-dspark": _served(bad_rounds, tokens, startup="dspark"),
    }
    checks = vd.evaluate(_runs(), results, "dflash")
    failed = [c for c in checks if not c.ok]
    # the stand-in logs carry no live-probe verdict: those checks, and only those, fail
    assert failed and all("probe" in c.name for c in failed), failed
    assert any(c.name == "dflash: tokens equal the builtin's" for c in checks)
    assert any(c.name == "plugin-dspark: alarm raised" and c.ok for c in checks)

    broken = dict(results)
    broken["plugin-auto"] = _served(good_rounds, [[5] * 7, [6] * 6 + [7]])  # one token differs
    names = {c.name for c in vd.evaluate(_runs(), broken, "dflash") if not c.ok}
    assert {"dflash: tokens equal the builtin's", "dflash: batched tokens equal the builtin's"} <= names
    broken = dict(results)
    broken["plugin-auto"] = _served([[2, 1, 1], [1, 1, 1]], tokens)  # one more round than the builtin
    names = {c.name for c in vd.evaluate(_runs(), broken, "dflash") if not c.ok}
    assert "dflash: verify rounds per request equal the builtin's" in names
    broken = dict(results)
    broken["plugin-auto"] = _served(good_rounds, tokens, startup="dspark")
    assert "auto: the census's arm resolves" in {
        c.name for c in vd.evaluate(_runs(), broken, "dflash") if not c.ok
    }
    broken = dict(results)
    broken["plugin-dspark"] = vd.RunResult(None, "Traceback ...", "RuntimeError: server exited")
    assert "plugin-dspark: served" in {c.name for c in vd.evaluate(_runs(), broken, "dflash") if not c.ok}


def test_a_refused_arm_passes_only_when_the_server_refused_it() -> None:
    runs = [
        vd.RunSpec("plugin-dflash", ["--speculative-algorithm", "DSPARK_HARVEST"], {}, "dflash", True, "no")
    ]
    refused = vd.RunResult(None, "DSPARK_HARVEST: ... refused", "RuntimeError: exited")
    assert [c.ok for c in vd.evaluate(runs, {"plugin-dflash": refused}, "dspark")] == [True]
    served = _served([[1]], [[1, 2]])
    assert [c.ok for c in vd.evaluate(runs, {"plugin-dflash": served}, "dspark")] == [False]


def test_information_reports_exactness_as_a_prefix_statistic() -> None:
    tokens = [[1, 2, 3, 4], [5, 6, 7, 8]]
    results = {
        "baseline": vd.RunResult(sc.Outcome(tokens, [{}, {}], ""), ""),
        "plugin-auto": _served([[3], [3]], [[1, 2, 3, 4], [5, 6, 0, 0]]),
    }
    info = vd.information(_runs()[:2], results)["exact_vs_no_speculation"]["plugin-auto"]
    assert info == {"identical_requests": 1, "requests": 2, "mean_common_prefix_fraction": 0.75}


def test_server_accept_length_shapes() -> None:
    assert gv.server_accept_length({"internal_states": [{"avg_spec_accept_length": 2.5}]}) == 2.5
    assert gv.server_accept_length({"avg_spec_accept_length": 3}) == 3.0
    assert gv.server_accept_length({"internal_states": [{}]}) is None


# -- the whole orchestration against a stand-in server ---------------------------------------------
# No GPU here, so a small HTTP server stands in for `python -m sglang.launch_server`: it serves
# /health, /generate and /get_server_info, resolves the harvest with the plugin's real make_plan() and
# logs through the real AcceptTelemetry, one line per round (bs 1 alone, bs N batched). Matched
# harvest: 2 drafts accepted per round; mismatched: 0. It has no live probe. Under
# --disaggregation-mode it answers only requests carrying a bootstrap room; the prefill side runs no
# verify round, the decode side's plan checks MEMRA_DSPARK_PEER_MANIFEST (make_plan's own check).
FAKE_SERVER = r"""
import json, logging, math, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving import LaunchRequest, SglangSupport, make_plan
from sglang_dspark_plugin.serving.announce import describe
from sglang_dspark_plugin.serving.manifest import write_manifest
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", stream=sys.stdout)
argv = sys.argv[1:]
opt = lambda name: argv[argv.index(name) + 1] if name in argv else None
algo, draft, port = opt("--speculative-algorithm"), opt("--speculative-draft-model-path"), int(opt("--port"))
mode, named = opt("--disaggregation-mode"), draft
if algo is not None and draft is None:  # a draft bundled in the target: its dspark/, else its own keys
    sub = os.path.join(opt("--model-path"), "dspark")
    draft = sub if os.path.exists(os.path.join(sub, "config.json")) else opt("--model-path")
TOKENS = 10
state = {"accepted": 0, "rounds": 0}
telemetry, accept = None, None
if algo is not None:
    trained = DsparkHarvest.explain(census(draft), environ={}).harvest
    if algo == "DSPARK_HARVEST":
        given = {"speculative_draft_model_path": named, "model_path": opt("--model-path")}
        given["disaggregation_mode"] = mode
        request = LaunchRequest.of(given, os.environ)
        try:
            s = make_plan(request, SglangSupport.for_version("0.5.23"))
        except Exception as err:
            print(f"DSPARK_HARVEST refused: {err}", flush=True)
            sys.exit(1)
        print(describe(s), flush=True)
        if request.manifest_path:
            write_manifest(request.manifest_path, s.manifest)
        arm = s.resolution.harvest
        settings = TelemetrySettings.from_env()
        telemetry = AcceptTelemetry(s.geometry.gamma, arm, s.resolution.source, settings=settings)
    else:
        arm = DsparkHarvest.DFLASH if algo == "DFLASH" else DsparkHarvest.DSPARK
    accept = 2 if arm is trained else 0

def serve(texts):
    ids = lambda t: [len(t) + i for i in range(TOKENS)]
    outs = [{"output_ids": ids(t), "meta_info": {}} for t in texts]
    if accept is None or mode == "prefill":
        return outs
    rounds = math.ceil((TOKENS - 1) / (accept + 1))  # the first token comes from the prefill
    for _ in range(rounds):
        state["rounds"] += 1; state["accepted"] += accept
        if telemetry is not None:
            telemetry.on_verify_complete([accept] * len(texts))
    for out in outs:
        meta = {"spec_verify_ct": rounds, "completion_tokens": TOKENS, "spec_accept_length": TOKENS / rounds}
        out["meta_info"] = meta
    return outs

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
        if mode is not None and not isinstance(req.get("bootstrap_room"), int):
            self.send_response(400); self.end_headers(); return
        ids = req["input_ids"]
        self.reply(serve(ids) if isinstance(ids[0], list) else serve([ids])[0])

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
    # "-c import sglang" (the version probe) fails as without sglang; a launch drops "-m sglang.launch_server"
    fake_python.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && exit 1\nshift 2\nexec {run_server} "$@"\n')
    os.chmod(fake_python, 0o755)
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("first prompt\n\n" + json.dumps({"prompt": "second prompt"}) + "\n")
    out = tmp_path / "report.json"
    argv = [
        "--model-path", "t", "--tokenizer", str(EMBEDDED.target),
        "--draft", str(draft), "--python", str(fake_python), "--port", str(_free_port()),
        "--prompts", str(prompts), "--workdir", str(tmp_path / "runs"), "--out", str(out),
        "--alarm-warmup", "2", "--alarm-window", "5", "--startup-timeout", "120",
    ]  # fmt: skip
    code = gv.main(argv)
    report = json.loads(out.read_text())
    arm = FIXTURES[name].expect
    wrong = "dspark" if arm == "dflash" else "dflash"
    assert report["census_arm"] == arm and report["prompts"] == 2
    checks = {c["check"]: c for c in report["checks"]}
    failed = [n for n, c in checks.items() if not c["ok"]]
    assert failed and all("probe" in n for n in failed), failed  # the stand-in has no live probe
    assert code == 1
    assert checks[f"{arm}: tokens equal the builtin's"]["ok"]
    assert checks[f"{arm}: verify rounds per request equal the builtin's"]["ok"]
    assert not any(n.startswith(f"{wrong}: ") for n in checks)  # the forced arm has no builtin twin
    assert checks["auto: the census's arm resolves"]["ok"]
    assert checks[f"plugin-{wrong}: alarm raised"]["ok"] and checks["plugin-auto: alarm absent"]["ok"]
    assert checks["plugin-auto: concurrent: request-rounds logged = sglang's verify rounds"]["ok"]
    rows = {row["run"]: row for row in report["accept_lengths"]}
    assert rows["plugin-auto"]["plugin_log_accept_len"] == pytest.approx(3.0)
    assert rows["plugin-auto"]["server_info_accept_len"] == pytest.approx(3.0)
    assert rows[f"plugin-{wrong}"]["plugin_log_accept_len"] == pytest.approx(1.0)
    assert rows["baseline"]["server_info_accept_len"] is None
    exact = report["information"]["exact_vs_no_speculation"]
    assert exact["plugin-auto"] == {
        "identical_requests": 2,
        "requests": 2,
        "mean_common_prefix_fraction": 1.0,
    }
    assert (tmp_path / "runs" / "plugin-auto.log").read_text().count("DSPARK_HARVEST: harvest=") == 1


def _stand_in(tmp_path: Path) -> Path:
    server = tmp_path / "fake_server.py"
    server.write_text(FAKE_SERVER)
    fake_python = tmp_path / "fakepython"
    run_server = f"{shlex.quote(sys.executable)} {shlex.quote(str(server))}"
    fake_python.write_text(f'#!/bin/sh\n[ "$1" = "-c" ] && exit 1\nshift 2\nexec {run_server} "$@"\n')
    fake_python.chmod(0o755)
    return fake_python


def test_pd_serves_the_census_arm_1p1d_and_a_mismatched_decode_server_is_refused(tmp_path: Path) -> None:
    """--pd: the builtin's and the plugin's 1P1D pairs (every request to both sides with one bootstrap
    room), the decode side checked against the prefill side's manifest; a decode server forced to the
    other arm refuses, naming the difference."""
    import json

    draft = write_checkpoint(tmp_path, "zlab_dflash")
    out = tmp_path / "report.json"
    port = _free_port()
    argv = [
        "--model-path", "t", "--tokenizer", str(EMBEDDED.target),
        "--draft", str(draft), "--python", str(_stand_in(tmp_path)), "--port", str(port),
        "--workdir", str(tmp_path / "runs"), "--out", str(out), "--alarm-warmup", "2", "--alarm-window", "5",
        "--startup-timeout", "120", "--pd", "--pd-bootstrap-port", str(_free_port()),
    ]  # fmt: skip
    gv.main(argv)
    report = json.loads(out.read_text())
    checks = {c["check"]: c for c in report["checks"]}
    pd = {n: c["ok"] for n, c in checks.items() if n.startswith(("pd ", "pd-"))}
    assert pd["pd dflash: tokens equal the builtin's"] and pd["pd dflash: batched tokens equal the builtin's"]
    assert pd["pd dflash: verify rounds per request equal the builtin's"]
    assert pd["pd-plugin-auto: one logged round per verify round of each request (meta_info spec_verify_ct)"]
    assert pd["pd-plugin-dspark-decode: refused, its plan differs from the prefill's"]
    # the stand-in serves each HTTP request alone; sglang batches the concurrent ones a pair sends
    assert [n for n, ok in pd.items() if not ok] == ["pd-plugin-auto: concurrent: requests were batched"]
    runs = tmp_path / "runs"
    assert (runs / "pd-plugin-auto.manifest.json").exists()  # written by the prefill side
    assert (
        "plan differs from its prefill server's" in (runs / "pd-plugin-dspark-decode.decode.log").read_text()
    )
    assert not (runs / "pd-plugin-dspark-decode.prefill.log").exists()  # the decode side alone


@pytest.mark.parametrize("form", ["dspark_subfolder", "dspark_keys"])
def test_without_a_draft_every_run_serves_the_draft_bundled_in_the_target(form: str, tmp_path: Path) -> None:
    """No --draft: the draft bundled in the target, each run launched without a draft path (the
    builtin's too, as sglang's DSPARK finds it), the census arm read from the folder the plan censuses."""
    target = TARGETS[form](tmp_path / "target")
    proc = dry_run("--model-path", str(target))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"# census arm of the draft bundled in {target}: dspark"
    commands = _commands(proc.stdout)
    assert list(commands) == ["baseline", "plugin-auto", "builtin-dspark", "plugin-dflash"]
    assert not any("--speculative-draft-model-path" in argv for argv in commands.values())
    plan = make_plan(
        LaunchRequest(draft=None, target=str(target)), SglangSupport.for_version(vd.ASSUMED_VERSION)
    )
    assert plan.bundled is not None and plan.bundled.form == form
    launch = commands["builtin-dspark"][commands["builtin-dspark"].index("-m") :]
    assert launch[launch.index("--speculative-algorithm") + 1] == "DSPARK"
    for field, value in plan.declared_args.items():
        assert launch[launch.index("--" + field.replace("_", "-")) + 1] == str(value)
    runs = vd.build_runs(None, str(target), "", "dspark", vd.ASSUMED_VERSION)
    auto = next(r for r in runs if r.name == "plugin-auto")
    assert auto.bundled == plan.bundled.describe()
    assert next(r for r in runs if r.name == "builtin-dspark").bundled is None
    # a target that bundles nothing: no census arm, said why
    empty = TARGETS["no_draft"](tmp_path / "empty")
    none = dry_run("--model-path", str(empty))
    assert none.returncode == 0 and "bundles no DSPARK draft" in none.stdout.splitlines()[0]
    usage = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"], capture_output=True, text=True, timeout=120
    )
    assert usage.returncode == 2 and "--model-path is required" in usage.stderr


def test_a_bundled_deployment_against_a_stand_in_server(tmp_path: Path) -> None:
    """The bundled draft served by the plugin and by the builtin, neither given a draft path; the
    plugin's startup line must name the bundled draft, and a log that names another fails the check."""
    import json

    target = TARGETS["dspark_subfolder"](tmp_path / "target")
    out = tmp_path / "report.json"
    argv = [
        "--model-path", str(target), "--python", str(_stand_in(tmp_path)), "--port", str(_free_port()),
        "--workdir", str(tmp_path / "runs"), "--out", str(out), "--alarm-warmup", "2", "--alarm-window", "5",
        "--startup-timeout", "120",
    ]  # fmt: skip
    gv.main(argv)
    report = json.loads(out.read_text())
    assert report["census_arm"] == "dspark" and report["draft"] == f"bundled in {target}"
    checks = {c["check"]: c["ok"] for c in report["checks"]}
    described = "plugin-auto: serves the draft bundled in the target (its dspark/ subfolder)"
    assert checks[described] and checks["dspark: tokens equal the builtin's"]
    assert checks["dspark: verify rounds per request equal the builtin's"]
    assert (
        checks["plugin-dflash: alarm raised"]
        and checks["plugin-dflash: serves the " + described.split("serves the ")[1]]
    )
    assert all(ok for n, ok in checks.items() if "probe" not in n)  # the stand-in has no live probe
    assert [r["bundled"] for r in report["runs"] if r["name"] == "plugin-auto"] == [
        described.split("serves the ")[1]
    ]
    # the same run, its startup line naming the draft as a named one: the check fails
    auto = next(
        r
        for r in vd.build_runs(None, str(target), "", "dspark", vd.ASSUMED_VERSION)
        if r.name == "plugin-auto"
    )
    log = (tmp_path / "runs" / "plugin-auto.log").read_text()
    named = log.replace(" (" + str(auto.bundled) + ")", "")
    assert named != log
    got = vd.RunResult(sc.Outcome([], [], named), named)
    assert not {c.name: c.ok for c in vd.arm_checks(auto, got, "dspark")}[described]


def test_pd_dry_run_prints_both_sides_of_each_pair(tmp_path: Path) -> None:
    draft = write_checkpoint(tmp_path, "specforge_dspark")
    proc = dry_run(
        "--model-path", "t", "--draft", str(draft), "--pd", "--pd-transfer-backend", "nixl",
        "--pd-prefill-args", "--pp-size 2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    prefills = [line for line in text.splitlines() if "--disaggregation-mode prefill" in line]
    assert len(prefills) == 2 and all(line.endswith("--pp-size 2") for line in prefills)
    assert text.count("--pp-size 2") == 2  # the prefill side only
    assert (
        text.count("--disaggregation-mode prefill") == 2 and text.count("--disaggregation-mode decode") == 3
    )
    assert text.count("--disaggregation-transfer-backend nixl") == 5
    assert text.count("MEMRA_DSPARK_PEER_MANIFEST=") == 2  # the plugin's decode side and the forced one
    assert "# pd-plugin-dflash-decode (the plan refuses it:" in text
    bad = dry_run("--model-path", "t", "--draft", str(draft), "--pd", "--cpu-harness")
    assert bad.returncode == 2 and "--pd" in bad.stderr


def test_embedded_dry_run_lists_exactly_the_served_cases_runs(tmp_path: Path) -> None:
    """--embedded runs the CPU suite's served cases (tests/sglang/served_cases.py), no second list."""
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


def test_served_outputs_are_judged_by_checks_rule() -> None:
    """A near-tie-free identical run passes; a run with a token the target clearly does not pick fails,
    the departure recomputed with the target (the embedded one, float32 on CPU) as ``check`` does."""
    import argparse

    import torch

    from sglang_dspark_plugin.check.target import encode_prompts, load_target_model
    from sglang_dspark_plugin.engine import autoregressive_generate

    target, tokenizer = load_target_model(EMBEDDED.target, torch.device("cpu"), torch.float32)
    prompts = encode_prompts(tokenizer, list(EMBEDDED.prompts[:2]))
    greedy = [autoregressive_generate(target, p, 12).tokens for p in prompts]
    wrong = [list(g) for g in greedy]
    wrong[1][5] = (wrong[1][5] + 1) % target.config.vocab_size
    results = {
        "baseline": vd.RunResult(sc.Outcome(greedy, [{}, {}], ""), ""),
        "plugin-auto": vd.RunResult(sc.Outcome([list(g) for g in greedy], [{}, {}], ""), ""),
        "plugin-dspark": vd.RunResult(sc.Outcome(wrong, [{}, {}], ""), ""),
    }
    args = argparse.Namespace(model_path=str(EMBEDDED.target), cpu_harness=True)
    departures = gv.judge_departures(args, prompts, results)
    assert departures["plugin-auto"] == []
    found = departures["plugin-dspark"][0]  # then the rest, judged on the changed prefix
    assert (found["prompt"], found["position"], found["near_tie"]) == (1, 5, False)
    assert found["expected"] == greedy[1][5] and found["margin"] > found["tolerance"]
    checks = {c.name: c for c in vd.departure_checks(departures)}
    assert checks["plugin-auto: no departure beyond a near-tie vs no speculation"].ok
    bad = checks["plugin-dspark: no departure beyond a near-tie vs no speculation"]
    assert not bad.ok and f"{len(departures['plugin-dspark'])} clear departure(s)" in bad.detail


def test_the_server_is_stopped_only_once_the_queues_thread_logged_every_request(tmp_path: Path) -> None:
    """With the queue on its own thread (auto on a GPU) a request's line lands after its answer: the
    script waits for each answered id's line before it stops the server; without the thread it does not
    wait, and past its bound it names the ids still missing."""
    import threading
    import time

    log = tmp_path / "server.log"
    metas = [{"id": "a1"}, {"id": "b2"}]
    log.write_text("telemetry queue on the scheduler's thread (auto: device cpu)\n", encoding="utf-8")
    started = time.monotonic()
    assert gv.await_request_lines(log, metas, timeout=30) == []
    assert time.monotonic() - started < 5  # no thread: nothing to wait for

    log.write_text(f"{gv.QUEUE_ON_THREAD} (auto: device cuda)\n", encoding="utf-8")

    def late_lines() -> None:
        time.sleep(0.5)
        with open(log, "a", encoding="utf-8") as out:
            out.write("dspark accept request rid=a1 rounds=3 accepted_drafts=5 accept_len=2.67 \n")
            out.write("dspark accept request rid=b2 rounds=2 accepted_drafts=1 accept_len=1.50 \n")

    writer = threading.Thread(target=late_lines)
    started = time.monotonic()
    writer.start()
    assert gv.await_request_lines(log, metas, timeout=30) == []
    writer.join()
    assert time.monotonic() - started >= 0.5  # it waited for the lines
    assert gv.await_request_lines(log, [*metas, {"id": "c3"}], timeout=0.2) == ["c3"]
