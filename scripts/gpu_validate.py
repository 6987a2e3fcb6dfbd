#!/usr/bin/env python3
"""Validate DSPARK_HARVEST on serving hardware against sglang's own algorithms.

For a GPU machine with sglang and this package installed, and a real target + DFlash-family drafter.
It launches sglang once per configuration, sends the same prompts at temperature 0, and reports:

* exactness: every configuration's outputs equal the no-speculation outputs (greedy is lossless);
* the dflash arm (``MEMRA_DSPARK_HARVEST=dflash``) is identical to the builtin ``DFLASH``: same tokens
  and the same accept lengths;
* accept lengths per configuration: from the plugin's ``sglang_dspark_plugin.accept`` log lines, from
  ``/get_server_info`` (``avg_spec_accept_length``) and from each response's ``meta_info``;
* the alarm: forcing the arm the census did not choose raises the plugin's accept-length ALARM, and the
  matched arm does not.

Configurations: ``baseline`` (no speculation), ``builtin-DFLASH`` (and ``builtin-DSPARK`` with
``--builtins DFLASH,DSPARK``), ``plugin-auto`` (census decides), ``plugin-dflash``, ``plugin-dspark``.

    python scripts/gpu_validate.py --model-path TARGET --draft DRAFT --out report.json
    python scripts/gpu_validate.py --model-path TARGET --draft DRAFT --dry-run   # print the commands

``--embedded`` runs instead the served cases of the CPU test suite (``scripts/served_cases.py``, the one
definition both read) on the package's embedded tiny models, without the CPU patches: the same runs,
prompts and checks (builtin = plugin arm, served = reference engine = greedy, the forced-harvest
collapse and its alarm, concurrent requests), here with CUDA graphs and the GPU attention kernels:

    python scripts/gpu_validate.py --embedded --out report.json

Exit status: 0 when every check passes, 1 when one fails, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PROMPTS = (
    "Compute 37 * 43 step by step, then check the result by another method.",
    "Write a Python function that returns the n-th Fibonacci number iteratively, with a docstring.",
    "List the planets of the solar system in order from the Sun, one line each with one fact.",
    "Explain what a hash table is and how collisions are handled, in three short paragraphs.",
    "You are an agent with a `search(query)` tool. Plan, step by step, how to find the boiling point "
    "of water at 2000 m altitude, and show each tool call as JSON.",
    "Solve for x: 3x + 7 = 2x - 5. Show your work.",
    "Translate to French: 'The weather is nice today, so we will walk to the market.'",
    "Summarize the rules of chess in ten bullet points.",
)

ACCEPT_ROUND = re.compile(r"dspark accept round=(\d+) bs=(\d+) accept_len=\[([0-9,]*)\]")
ACCEPT_SUMMARY = re.compile(r"dspark accept summary .*?mean_accept_len=([0-9.]+|n/a)")
ALARM = "dspark accept ALARM"
STARTUP = re.compile(r"DSPARK_HARVEST: harvest=(dflash|dspark)")


@dataclass
class RunSpec:
    """One server configuration."""

    name: str
    spec_args: list[str]
    env: dict[str, str] = field(default_factory=dict)

    @property
    def plugin(self) -> bool:
        return self.name.startswith("plugin-")


@dataclass
class RunResult:
    """What one configuration produced."""

    name: str
    outputs: list[str] = field(default_factory=list)
    output_ids: list[list[int] | None] = field(default_factory=list)
    meta_accept_lengths: list[float | None] = field(default_factory=list)
    server_info_accept_length: float | None = None
    log_accept_length: float | None = None
    log_rounds: int = 0
    log_summary_accept_length: float | None = None
    alarms: int = 0
    startup_harvest: str | None = None
    error: str | None = None


def build_runs(builtins: list[str]) -> list[RunSpec]:
    """The configurations, in launch order."""
    runs = [RunSpec("baseline", [])]
    for name in builtins:
        runs.append(RunSpec(f"builtin-{name}", ["--speculative-algorithm", name]))
    plugin = ["--speculative-algorithm", "DSPARK_HARVEST"]
    runs.append(RunSpec("plugin-auto", list(plugin)))
    runs.append(RunSpec("plugin-dflash", list(plugin), {"MEMRA_DSPARK_HARVEST": "dflash"}))
    runs.append(RunSpec("plugin-dspark", list(plugin), {"MEMRA_DSPARK_HARVEST": "dspark"}))
    return runs


def server_command(args: argparse.Namespace, run: RunSpec) -> list[str]:
    """The ``launch_server`` command line of one configuration."""
    cmd = [
        args.python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        args.model_path,
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--tp-size",
        str(args.tp_size),
        "--log-level",
        "info",
    ]
    if run.spec_args:
        cmd += [*run.spec_args, "--speculative-draft-model-path", args.draft]
    cmd += shlex.split(args.extra_args)
    return cmd


def run_env(args: argparse.Namespace, run: RunSpec) -> dict[str, str]:
    """Environment overrides of one configuration (forced arm, a short alarm warm-up/window)."""
    env = {"MEMRA_DSPARK_HARVEST": ""} if run.plugin else {}
    env.update(run.env)
    if run.plugin:
        env["MEMRA_DSPARK_ALARM_WARMUP"] = str(args.alarm_warmup)
        env["MEMRA_DSPARK_ALARM_WINDOW"] = str(args.alarm_window)
        env["MEMRA_DSPARK_MANIFEST"] = str(Path(args.workdir) / f"{run.name}.manifest.json")
    return env


def census_arm(draft: str) -> tuple[str | None, str]:
    """The arm the census resolves for the draft (MEMRA_DSPARK_HARVEST ignored), or None + why."""
    try:
        from sglang_dspark_plugin.census import census
        from sglang_dspark_plugin.harvest import DsparkHarvest

        cfg = census(draft)
        return DsparkHarvest.explain(cfg, environ={}).harvest.name(), ""
    except Exception as err:  # noqa: BLE001 - reported, the run decides what it can
        return None, f"{type(err).__name__}: {err}"


def load_prompts(path: str | None) -> list[str]:
    """Prompts from a file (one per line, or JSON lines with a "prompt"/"text" key), else the defaults."""
    if path is None:
        return list(DEFAULT_PROMPTS)
    prompts = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            obj = json.loads(line)
            line = obj.get("prompt") or obj.get("text") or ""
        prompts.append(line)
    if not prompts:
        raise SystemExit(f"gpu_validate: {path} holds no prompt; one prompt per line, or JSON lines.")
    return prompts


def _http(url: str, payload: dict[str, Any] | None = None, timeout: float = 600) -> Any:
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "null")


def wait_ready(base: str, proc: subprocess.Popen, timeout: float) -> None:
    """Wait until the server answers /health, or fail when it exits or times out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before it was ready")
        try:
            urllib.request.urlopen(f"{base}/health", timeout=5).read()
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(2)
    raise RuntimeError(f"server not ready after {timeout:.0f} s")


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def parse_log(text: str, result: RunResult) -> None:
    """Accept lengths, summaries, alarms and the resolved harvest from a server log."""
    lengths: list[int] = []
    for match in ACCEPT_ROUND.finditer(text):
        result.log_rounds += 1
        lengths += [int(x) for x in match.group(3).split(",") if x]
    result.log_accept_length = sum(lengths) / len(lengths) if lengths else None
    summaries = [m.group(1) for m in ACCEPT_SUMMARY.finditer(text) if m.group(1) != "n/a"]
    result.log_summary_accept_length = float(summaries[-1]) if summaries else None
    result.alarms = text.count(ALARM)
    startup = STARTUP.search(text)
    result.startup_harvest = startup.group(1) if startup else None


def server_accept_length(info: Any) -> float | None:
    """``avg_spec_accept_length`` from /get_server_info (top level or in internal_states)."""
    if not isinstance(info, dict):
        return None
    if isinstance(info.get("avg_spec_accept_length"), (int, float)):
        return float(info["avg_spec_accept_length"])
    for state in info.get("internal_states") or []:
        if isinstance(state, dict) and isinstance(state.get("avg_spec_accept_length"), (int, float)):
            return float(state["avg_spec_accept_length"])
    return None


def execute(args: argparse.Namespace, run: RunSpec, prompts: list[str]) -> RunResult:
    """Launch one configuration, send the prompts, collect everything, stop the server."""
    result = RunResult(run.name)
    log_path = Path(args.workdir) / f"{run.name}.log"
    env = {**os.environ, **run_env(args, run)}
    if env.get("MEMRA_DSPARK_HARVEST") == "":
        del env["MEMRA_DSPARK_HARVEST"]  # auto: unset, so the census decides
    base = f"http://127.0.0.1:{args.port}"
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            server_command(args, run), stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            wait_ready(base, proc, args.startup_timeout)
            for prompt in prompts:
                out = _http(
                    f"{base}/generate",
                    {
                        "text": prompt,
                        "sampling_params": {"temperature": 0, "max_new_tokens": args.max_new_tokens},
                    },
                )
                meta = out.get("meta_info", {}) if isinstance(out, dict) else {}
                result.outputs.append(out.get("text", "") if isinstance(out, dict) else "")
                result.output_ids.append(out.get("output_ids") if isinstance(out, dict) else None)
                result.meta_accept_lengths.append(meta.get("spec_accept_length"))
            result.server_info_accept_length = server_accept_length(_http(f"{base}/get_server_info"))
        except Exception as err:  # noqa: BLE001 - one failed configuration is reported, not fatal
            result.error = f"{type(err).__name__}: {err} (log: {log_path})"
        finally:
            stop_server(proc)
    parse_log(log_path.read_text(encoding="utf-8", errors="replace"), result)
    return result


def _same_tokens(a: RunResult, b: RunResult) -> bool:
    if a.error or b.error or len(a.outputs) != len(b.outputs):
        return False
    if all(x is not None for x in a.output_ids + b.output_ids):
        return a.output_ids == b.output_ids
    return a.outputs == b.outputs


def evaluate(results: dict[str, RunResult], arm: str | None) -> dict[str, Any]:
    """The checks, each ``{"ok": bool, ...}``."""
    checks: dict[str, Any] = {}
    base = results.get("baseline")
    for name, res in results.items():
        if name == "baseline":
            continue
        checks[f"exact[{name}]"] = {"ok": base is not None and _same_tokens(res, base)}
    builtin, forced = results.get("builtin-DFLASH"), results.get("plugin-dflash")
    if builtin is not None and forced is not None:
        same_accept = builtin.meta_accept_lengths == forced.meta_accept_lengths and (
            builtin.server_info_accept_length == forced.server_info_accept_length
        )
        checks["dflash_arm_identical_to_builtin_DFLASH"] = {
            "ok": _same_tokens(builtin, forced) and same_accept,
            "tokens_equal": _same_tokens(builtin, forced),
            "accept_lengths_equal": same_accept,
        }
    if arm is not None:
        wrong = "dspark" if arm == "dflash" else "dflash"
        matched, mismatched = results.get(f"plugin-{arm}"), results.get(f"plugin-{wrong}")
        if matched is not None and mismatched is not None:
            checks["alarm_on_forced_wrong_arm"] = {
                "ok": mismatched.alarms > 0 and matched.alarms == 0,
                "census_arm": arm,
                "alarms_matched": matched.alarms,
                "alarms_mismatched": mismatched.alarms,
            }
        auto = results.get("plugin-auto")
        if auto is not None:
            checks["auto_resolves_census_arm"] = {
                "ok": auto.startup_harvest == arm,
                "seen": auto.startup_harvest,
            }
    for name, res in results.items():
        if res.error:
            checks[f"ran[{name}]"] = {"ok": False, "error": res.error}
    return checks


def accept_table(results: dict[str, RunResult]) -> list[dict[str, Any]]:
    rows = []
    for res in results.values():
        metas = [m for m in res.meta_accept_lengths if isinstance(m, (int, float))]
        rows.append(
            {
                "run": res.name,
                "plugin_log_accept_len": res.log_accept_length,
                "plugin_log_rounds": res.log_rounds,
                "plugin_summary_accept_len": res.log_summary_accept_length,
                "server_info_accept_len": res.server_info_accept_length,
                "meta_info_accept_len": sum(metas) / len(metas) if metas else None,
                "alarms": res.alarms,
                "harvest": res.startup_harvest,
            }
        )
    return rows


def _fmt(x: Any) -> str:
    return "-" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedded", action="store_true", help="run the served cases on the embedded models")
    p.add_argument("--model-path", help="target model (local folder or hub id)")
    p.add_argument("--draft", help="DFlash-family draft checkpoint")
    p.add_argument("--builtins", default="DFLASH", help="builtin algorithms to compare, e.g. DFLASH,DSPARK")
    p.add_argument("--prompts", default=None, help="file: one prompt per line, or JSON lines")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tp-size", type=int, default=1)
    p.add_argument("--extra-args", default="", help="more launch_server arguments, one shell string")
    p.add_argument("--python", default=sys.executable, help="the interpreter that has sglang")
    p.add_argument("--startup-timeout", type=float, default=1800)
    p.add_argument("--alarm-warmup", type=int, default=20, help="MEMRA_DSPARK_ALARM_WARMUP for plugin runs")
    p.add_argument("--alarm-window", type=int, default=50, help="MEMRA_DSPARK_ALARM_WINDOW for plugin runs")
    p.add_argument("--workdir", default="gpu_validate_runs", help="server logs and manifests go here")
    p.add_argument("--out", default=None, help="write the JSON report here")
    p.add_argument("--dry-run", action="store_true", help="print the commands, launch nothing")
    args = p.parse_args(argv)
    if not args.embedded and not (args.model_path and args.draft):
        p.error("--model-path and --draft are required (or --embedded for the served cases)")
    builtins = [b.strip().upper() for b in args.builtins.split(",") if b.strip()]
    unknown = sorted(set(builtins) - {"DFLASH", "DSPARK"})
    if unknown:
        p.error(f"--builtins {args.builtins!r}: unknown {unknown}; accepted: DFLASH, DSPARK")
    args.builtin_list = builtins
    return args


# ---------------------------------------------------------------- --embedded: the served cases


def embedded_command(args: argparse.Namespace, run: Any, folders: dict[str, Path] | None) -> list[str]:
    """``launch_server`` for one served-case run on the embedded target (``run`` None: no speculation);
    ``folders`` is ``served_cases.drafter_folders``."""
    import served_cases as sc  # on sys.path: run_embedded put it there

    from sglang_dspark_plugin.embedded import EMBEDDED

    model, draft = (
        (EMBEDDED.target, None) if run is None else sc.launch_paths(run, EMBEDDED.target, folders or {})
    )
    cmd = [
        args.python,
        "-m",
        "sglang.launch_server",
        "--model-path",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--log-level",
        "info",
        "--dtype",
        "float32",
    ]
    if run is not None:
        cmd += ["--speculative-algorithm", run.algorithm]
        cmd += [] if draft is None else ["--speculative-draft-model-path", str(draft)]
        for name, value in run.extra_args:
            cmd += ["--" + name.replace("_", "-"), str(value)]
    return cmd + shlex.split(args.extra_args)


def server_sglang_version(python: str) -> str | None:
    """The sglang version ``python`` imports, or None where it has none."""
    proc = subprocess.run(
        [python, "-c", "import sglang; print(sglang.__version__)"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def serve_outcome(
    args: argparse.Namespace,
    name: str,
    cmd: list[str],
    env: dict[str, str],
    prompts: list[list[int]],
    concurrent: bool,
) -> Any:
    """Launch, send every prompt alone (then all at once when ``concurrent``), stop: an Outcome."""
    import served_cases as sc

    log_path = Path(args.workdir) / f"{name.replace('/', '_')}.log"
    params = {"temperature": 0, "max_new_tokens": sc.MAX_NEW_TOKENS, "ignore_eos": True}
    base = f"http://127.0.0.1:{args.port}"
    outcome = sc.Outcome(outputs=[], metas=[], log="")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env}, start_new_session=True
        )
        try:
            wait_ready(base, proc, args.startup_timeout)
            for ids in prompts:
                out = _http(f"{base}/generate", {"input_ids": ids, "sampling_params": params})
                outcome.outputs.append(out["output_ids"])
                outcome.metas.append(out["meta_info"])
            if concurrent:
                batch = prompts[: sc.CONCURRENT_REQUESTS]
                outs = _http(f"{base}/generate", {"input_ids": batch, "sampling_params": params})
                outcome.concurrent_outputs = [o["output_ids"] for o in outs]
                outcome.concurrent_metas = [o["meta_info"] for o in outs]
        finally:
            stop_server(proc)
    outcome.log = log_path.read_text(encoding="utf-8", errors="replace")
    return outcome


def reference_rounds(drafter: Path, harvest: str, prompts: list[list[int]]) -> tuple[list, list]:
    """The reference engine's tokens and per-round accept lengths (float32, CUDA when there is one)."""
    import served_cases as sc
    import torch
    from transformers import AutoModelForCausalLM

    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import load_drafter, speculative_generate
    from sglang_dspark_plugin.harvest import DsparkHarvest

    device = "cuda" if torch.cuda.is_available() else "cpu"
    target = AutoModelForCausalLM.from_pretrained(str(EMBEDDED.target), dtype=torch.float32).to(device).eval()
    model = load_drafter(drafter).to(device).eval()
    gens = [
        speculative_generate(target, model, p, DsparkHarvest.from_name(harvest), sc.MAX_NEW_TOKENS)
        for p in prompts
    ]
    return [g.tokens for g in gens], [g.accept_lengths for g in gens]


def run_embedded(args: argparse.Namespace) -> int:
    """The served cases of scripts/served_cases.py on a GPU server; PASS/FAIL per check."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import served_cases as sc
    from transformers import AutoTokenizer

    from sglang_dspark_plugin.embedded import EMBEDDED

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED.target), local_files_only=True)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in EMBEDDED.prompts]
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    drafters = sc.drafter_folders(EMBEDDED.root, Path(tempfile.mkdtemp(dir=args.workdir)))
    version = server_sglang_version(args.python)
    cases = sc.CASES if version is None else sc.cases_for(version)  # no sglang (dry run): every case
    runs = sc.runs_of(cases)
    if args.dry_run:
        print(
            f"# served cases (sglang {version or 'not installed: all'}): {', '.join(c.name for c in cases)}"
        )
        print("# baseline")
        print(shlex.join(embedded_command(args, None, None)))
        for run in runs:
            env = " ".join(f"{k}={v}" for k, v in sorted(run.env().items()))
            print(f"# {run.name}")
            print((f"env {env} " if env else "") + shlex.join(embedded_command(args, run, drafters)))
        return 0
    greedy = serve_outcome(args, "baseline", embedded_command(args, None, None), {}, prompts, False).outputs
    got = {}
    for run in runs:
        print(f"[gpu_validate] {run.name}: launching", flush=True)
        cmd = embedded_command(args, run, drafters)
        got[run.name] = serve_outcome(args, run.name, cmd, run.env(), prompts, run.concurrent)
    checks = [(case.name, c) for case in cases for c in case_checks(sc, case, got, greedy, drafters, prompts)]
    for case_name, c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'} {case_name}: {c.name}" + (f" ({c.detail})" if c.detail else ""))
    if args.out:
        report = {"checks": [{"case": n, "check": c.name, "ok": c.ok, "detail": c.detail} for n, c in checks]}
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if all(c.ok for _, c in checks) else 1


def case_checks(
    sc: Any, case: Any, got: dict[str, Any], greedy: Any, drafters: dict[str, Path], prompts: Any
) -> list[Any]:
    """The checks of one served case over the outcomes ``got``, as the CPU served tests make them."""
    if case.kind == "identical":
        return sc.check_identical(got[case.runs[0]], got[case.runs[1]], greedy, case.window)
    if case.kind == "reference":
        results = []
        for name in case.runs:
            run = sc.RUNS[name]
            tokens, rounds = reference_rounds(drafters[run.drafter], run.served_harvest, prompts)
            results += sc.check_reference(run, got[name], tokens, rounds, greedy)
        return results
    if case.kind == "collapse":
        return sc.check_collapse({n: got[n] for n in case.runs}, greedy)
    return [c for n in case.runs for c in sc.check_concurrent(got[n], greedy)]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.embedded:
        return run_embedded(args)
    runs = build_runs(args.builtin_list)
    arm, why = census_arm(args.draft)
    prompts = load_prompts(args.prompts)
    if args.dry_run:
        print(f"# census arm of {args.draft}: {arm or 'unknown (' + why + ')'}")
        print(f"# {len(prompts)} prompts, temperature 0, max_new_tokens {args.max_new_tokens}")
        for run in runs:
            env = run_env(args, run)
            unset = [f"-u {k}" for k, v in sorted(env.items()) if not v]  # env wants -u first
            assign = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if v]
            prefix = f"env {' '.join(unset + assign)} " if env else ""
            print(f"# {run.name}")
            print(prefix + shlex.join(server_command(args, run)))
        return 0

    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    results: dict[str, RunResult] = {}
    for run in runs:
        print(f"[gpu_validate] {run.name}: launching", flush=True)
        results[run.name] = execute(args, run, prompts)
        status = results[run.name].error or "ok"
        print(f"[gpu_validate] {run.name}: {status}", flush=True)
    checks = evaluate(results, arm)
    table = accept_table(results)
    report = {"census_arm": arm, "checks": checks, "accept_lengths": table, "prompts": len(prompts)}
    print(f"{'run':16} {'plugin log':>10} {'summary':>8} {'server':>8} {'meta':>8} {'alarms':>6}")
    for row in table:
        print(
            f"{row['run']:16} {_fmt(row['plugin_log_accept_len']):>10} "
            f"{_fmt(row['plugin_summary_accept_len']):>8} {_fmt(row['server_info_accept_len']):>8} "
            f"{_fmt(row['meta_info_accept_len']):>8} {row['alarms']:>6}"
        )
    for name, check in checks.items():
        print(f"{'PASS' if check['ok'] else 'FAIL'} {name}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if all(c["ok"] for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
