#!/usr/bin/env python3
"""Validate DSPARK_HARVEST on serving hardware against sglang's own algorithms.

For a GPU machine with sglang and this package installed, and a real target + DFlash-family drafter.
It launches sglang once per configuration (``scripts/validate_deployment.py`` has the runs and the
checks), sends the same prompts at temperature 0, each alone and then all at once, and passes when:

* each harvest arm of ``DSPARK_HARVEST`` serves exactly as the builtin that serves it (the builtin,
  verify window and gamma flag the plugin's own plan names: DFLASH, DSPARK, or DSPARK with
  ``sample_from_anchor`` false for a mask-fill DSpark drafter): the same tokens alone and batched, the
  same verify rounds and accept lengths per request; an arm the plan refuses is refused by the server;
* the plugin's per-round log agrees with sglang's ``meta_info`` (rounds and tokens per request);
* the census's arm resolves; the matched arm raises no accept-length ALARM and its live probe says
  matched, the forced other arm raises it and its probe names the census's arm;
* every plugin run ran with ``MEMRA_DSPARK_SYNC_DEBUG`` (on CUDA, a device synchronisation the plugin
  adds stops the run) and ``MEMRA_DSPARK_HOST_TIMING`` (its host time per round goes in the report).

* every served output is the run without speculation's, up to near-tie flips: each point where it
  departs is judged by ``dspark-harvest check``'s own rule (``check/exactness.py``, docs/check.md): the
  float32 margin against the rounding measured there, with the target loaded by transformers after the
  servers stop. A near-tie flip is reported (sglang does not promise bit-identical bf16 greedy output
  across its verify and decode kernels, even for its builtins); a departure by a clear margin fails.
  The prompts are sent as token ids (``--tokenizer``, default the target's) so the judge decodes the same.

    python scripts/gpu_validate.py --model-path TARGET --draft DRAFT --out report.json
    python scripts/gpu_validate.py --model-path TARGET --draft DRAFT --dry-run   # print the commands

Without ``--draft`` the deployment is a DSPARK draft bundled in the target, as sglang's DSPARK serves one
that names no ``--speculative-draft-model-path`` (the target's ``dspark_*`` config keys, e.g. a DeepSeek-V4
checkpoint with its head, or its ``dspark/`` subfolder on sglang 0.5.23): every run then launches
without a draft path, the plugin's against the builtin's, and the plugin's must name the bundled draft:

    python scripts/gpu_validate.py --model-path DEEPSEEK_V4_TARGET --tp-size 8 --out report.json

``--pd`` adds prefill-decode disaggregation (1P1D: a prefill server on the first GPU, a decode server on
``--pd-decode-gpu``, sglang's transfer backend between them): the census arm's builtin pair and the
plugin's pair, each prompt sent to both sides with one bootstrap room, as sglang's router sends it. The
plugin's pair must serve as the builtin's (the decode side's tokens, verify rounds and accept lengths, its
log against ``meta_info``), its decode server checking the prefill server's manifest
(``MEMRA_DSPARK_PEER_MANIFEST``); a decode server forced to the other arm against that manifest must
refuse to start. It needs two GPUs and a transfer backend that runs there (``--pd-transfer-backend``).

``--cpu-harness`` runs the same on this machine's CPU with the test suite's CPU patches
(``tests/sglang/cpu_support``) and CPU engine arguments, so the script's logic runs in CI (tests/sglang/
test_gpu_validate_cpu.py); only the CUDA-specific parts (graphs, kernels, the sync debug mode) need a GPU.

``--embedded`` runs instead the served cases of the CPU test suite (``tests/sglang/served_cases.py``, the one
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
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SERVED_CASES = Path(__file__).resolve().parents[1] / "tests" / "sglang"
"""Where the served cases and their checks live (``served_cases``, ``served``): with the CPU tests."""
if str(SERVED_CASES) not in sys.path:
    sys.path.insert(0, str(SERVED_CASES))

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


def census_arm(draft: str | None, model_path: str | None = None) -> tuple[str | None, str]:
    """The arm the census resolves for the draft (MEMRA_DSPARK_HARVEST ignored), or None + why;
    ``draft`` None: the draft bundled in ``model_path``."""
    try:
        from sglang_dspark_plugin.census import census
        from sglang_dspark_plugin.harvest import DsparkHarvest

        if draft is None:
            from sglang_dspark_plugin.serving.bundled import bundled_in

            found = bundled_in(str(model_path))
            if found is None:
                return None, f"no --draft, and {model_path} bundles no DSPARK draft (dspark_* keys, dspark/)"
            draft = found[1].folder
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


QUEUE_ON_THREAD = "telemetry queue on its own thread"
"""The plugin's startup line where the queue's runs are on their own thread (``MEMRA_DSPARK_QUEUE_THREAD``;
auto on an accelerator): then a request's lines land after its answer."""
AWAIT_LINES_S = 120.0


def await_request_lines(log_path: Path, metas: list[Any], timeout: float = AWAIT_LINES_S) -> list[str]:
    """Before the server is stopped (which would lose them): where the log says the queue runs on its own
    thread, wait until it holds the plugin's per-request line of every answered request (its id in
    ``meta_info``), at most ``timeout`` s. The ids still missing (past it, the checks of the log fail on
    their own)."""
    rids = [str(m["id"]) for m in metas if isinstance(m, dict) and "id" in m]
    deadline = time.monotonic() + timeout
    while True:
        text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
        if QUEUE_ON_THREAD not in text:
            return []
        missing = [rid for rid in rids if f"dspark accept request rid={rid} " not in text]
        if not missing or time.monotonic() > deadline:
            if missing:
                print(f"[gpu_validate] no per-request line after {timeout:.0f} s: {missing[:4]}", flush=True)
            return missing
        time.sleep(0.05)


def stop_server(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, SIGKILL it after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--embedded", action="store_true", help="run the served cases on the embedded models")
    p.add_argument("--cpu-harness", action="store_true", help="serve on CPU with the test suite's patches")
    p.add_argument("--model-path", help="target model (local folder or hub id)")
    p.add_argument(
        "--draft",
        help="DFlash-family draft checkpoint (none: the DSPARK draft bundled in the target)",
    )
    p.add_argument("--prompts", default=None, help="file: one prompt per line, or JSON lines")
    p.add_argument(
        "--tokenizer",
        default=None,
        help="the folder whose tokenizer encodes the prompts (default: --model-path); they are sent as "
        "token ids, which the judge of departures decodes again",
    )
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
    p.add_argument("--pd", action="store_true", help="also serve the census arm 1P1D (two GPUs)")
    p.add_argument("--pd-decode-gpu", type=int, default=1, help="the decode server's --base-gpu-id")
    p.add_argument("--pd-bootstrap-port", type=int, default=8998, help="the prefill server's bootstrap port")
    p.add_argument(
        "--pd-transfer-backend", default=None, help="--disaggregation-transfer-backend (both sides)"
    )
    p.add_argument(
        "--pd-prefill-args", default="", help="more launch_server arguments for the prefill side only"
    )
    args = p.parse_args(argv)
    if not args.embedded and not args.model_path:
        p.error("--model-path is required, with --draft or a draft bundled in it (or --embedded)")
    if args.pd and (args.embedded or args.cpu_harness):
        p.error("--pd validates a deployment on GPUs: not with --embedded or --cpu-harness")
    if args.embedded and args.cpu_harness:
        p.error(
            "--cpu-harness validates a deployment (--model-path, --draft); "
            "the CPU suite runs the embedded cases"
        )
    return args


# ---------------------------------------------------------------- --embedded: the served cases


def embedded_command(args: argparse.Namespace, run: Any, folders: dict[str, Path] | None) -> list[str]:
    """``launch_server`` for one served-case run on the embedded target (``run`` None: no speculation);
    ``folders`` is ``served_cases.drafter_folders``."""
    import served_cases as sc

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
    prompts: list[Any],
    concurrent: bool,
    key: str = "input_ids",
    params: dict[str, Any] | None = None,
    base_env: dict[str, str] | None = None,
) -> Any:
    """Launch, send every prompt alone (then all at once when ``concurrent``), stop: an Outcome.

    ``prompts`` are token ids (``key`` "input_ids") or texts (``key`` "text"); ``env`` goes over
    ``base_env`` (default: this process's environment)."""
    import served_cases as sc

    log_path = Path(args.workdir) / f"{name.replace('/', '_')}.log"
    params = params or {"temperature": 0, "max_new_tokens": sc.MAX_NEW_TOKENS, "ignore_eos": True}
    base = f"http://127.0.0.1:{args.port}"
    outcome = sc.Outcome(outputs=[], metas=[], log="")
    environment = {**(os.environ if base_env is None else base_env), **env}
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, env=environment, start_new_session=True
        )
        try:
            wait_ready(base, proc, args.startup_timeout)
            for prompt in prompts:
                out = _http(f"{base}/generate", {key: prompt, "sampling_params": params})
                outcome.outputs.append(out["output_ids"])
                outcome.metas.append(out["meta_info"])
            outcome.server_info_accept_length = server_accept_length(_http(f"{base}/get_server_info"))
            if concurrent:
                batch = prompts[: sc.CONCURRENT_REQUESTS]
                outs = _http(f"{base}/generate", {key: batch, "sampling_params": params})
                outcome.concurrent_outputs = [o["output_ids"] for o in outs]
                outcome.concurrent_metas = [o["meta_info"] for o in outs]
            await_request_lines(log_path, outcome.metas + outcome.concurrent_metas)
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
    """The served cases of tests/sglang/served_cases.py on a GPU server; PASS/FAIL per check."""
    import tempfile

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
    if case.kind == "no-match":
        return [c for n in case.runs for c in sc.check_no_match(got[n], greedy)]
    return [c for n in case.runs for c in sc.check_concurrent(got[n], greedy)]


# ---------------------------------------------------------------- a deployment: target + drafter


def cpu_harness() -> tuple[dict[str, str], list[str]]:
    """The CPU patches' environment and the CPU engine's launch flags, as the served tests use them."""
    from served import cpu_env, cpu_launch_flags

    return cpu_env(), cpu_launch_flags()


def server_command(
    args: argparse.Namespace, run: Any, cpu_flags: list[str], port: int | None = None
) -> list[str]:
    """The ``launch_server`` command line of one configuration (``port``: default ``--port``)."""
    cmd = [args.python, "-m", "sglang.launch_server", "--model-path", args.model_path]
    cmd += ["--host", "127.0.0.1", "--port", str(port or args.port), "--tp-size", str(args.tp_size)]
    # no warm-up request: its verify rounds would sit in the plugin's log before the validation's own
    cmd += ["--log-level", "info", "--skip-server-warmup", *cpu_flags]
    if run.spec_args:  # no --draft: the draft bundled in the target, found by sglang's DSPARK itself
        cmd += [*run.spec_args] + (
            [] if args.draft is None else ["--speculative-draft-model-path", args.draft]
        )
    return cmd + shlex.split(args.extra_args)


def pd_commands(args: argparse.Namespace, run: Any, cpu_flags: list[str]) -> tuple[list[str], list[str]]:
    """The prefill and decode ``launch_server`` command lines of a 1P1D pair (ports ``--port`` and the
    next one; the decode side on ``--pd-decode-gpu``)."""
    backend = (
        []
        if args.pd_transfer_backend is None
        else ["--disaggregation-transfer-backend", args.pd_transfer_backend]
    )
    prefill = server_command(args, run, cpu_flags) + ["--disaggregation-mode", "prefill"]
    prefill += ["--disaggregation-bootstrap-port", str(args.pd_bootstrap_port), *backend]
    prefill += shlex.split(args.pd_prefill_args)  # e.g. --pp-size 2: DSPARK's PP runs on a prefill server
    decode = server_command(args, run, cpu_flags, args.port + 1) + ["--disaggregation-mode", "decode"]
    return prefill, decode + ["--base-gpu-id", str(args.pd_decode_gpu), *backend]


def pd_payloads(args: argparse.Namespace, prompt: Any, params: dict[str, Any], room: int) -> dict[str, Any]:
    """One request of a 1P1D pair, as sglang's router sends it to both sides: the prompt and the
    prefill server's bootstrap address and room."""
    bootstrap = {
        "bootstrap_host": "127.0.0.1",
        "bootstrap_port": args.pd_bootstrap_port,
        "bootstrap_room": room,
    }
    return {"input_ids": prompt, "sampling_params": params, **bootstrap}


def _pd_generate(
    args: argparse.Namespace, prompts: list[Any], params: dict[str, Any], room: int
) -> list[Any]:
    """Every prompt to the prefill and the decode server at once (one bootstrap room each); the decode
    side's answers, in prompt order."""
    from concurrent.futures import ThreadPoolExecutor

    prefill, decode = f"http://127.0.0.1:{args.port}", f"http://127.0.0.1:{args.port + 1}"
    with ThreadPoolExecutor(max_workers=2 * len(prompts)) as pool:
        jobs = []
        for i, prompt in enumerate(prompts):
            payload = pd_payloads(args, prompt, params, room + i)
            jobs.append(
                (
                    pool.submit(_http, f"{prefill}/generate", payload),
                    pool.submit(_http, f"{decode}/generate", payload),
                )
            )
        answers = []
        for pre, dec in jobs:
            pre.result()  # a prefill failure is the pair's failure
            answers.append(dec.result())
    return answers


def serve_pd(
    args: argparse.Namespace,
    run: Any,
    cpu_flags: list[str],
    prompts: list[Any],
    params: dict[str, Any],
    envs: tuple[dict[str, str], dict[str, str]],
) -> Any:
    """Launch a 1P1D pair (the decode side alone for ``run.decode_only``), send every prompt alone, then
    all at once, stop both: the decode side's Outcome (its log: the decode server's)."""
    import random

    import served_cases as sc

    commands = pd_commands(args, run, cpu_flags)
    sides = ("decode",) if run.decode_only else ("prefill", "decode")
    logs = {side: Path(args.workdir) / f"{run.name}.{side}.log" for side in sides}
    procs: dict[str, subprocess.Popen] = {}
    outcome = sc.Outcome(outputs=[], metas=[], log="")
    room = random.Random(run.name).randrange(1 << 40)
    try:
        for side in sides:  # the decode side reads the manifest the prefill side wrote
            command, env = (commands[0], envs[0]) if side == "prefill" else (commands[1], envs[1])
            with open(logs[side], "w", encoding="utf-8") as log:
                procs[side] = subprocess.Popen(
                    command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            port = args.port if side == "prefill" else args.port + 1
            wait_ready(f"http://127.0.0.1:{port}", procs[side], args.startup_timeout)
        for i, prompt in enumerate(prompts):
            out = _pd_generate(args, [prompt], params, room + 1000 * i)[0]
            outcome.outputs.append(out["output_ids"])
            outcome.metas.append(out["meta_info"])
        batch = _pd_generate(args, prompts[: sc.CONCURRENT_REQUESTS], params, room + 1000 * len(prompts))
        outcome.concurrent_outputs = [o["output_ids"] for o in batch]
        outcome.concurrent_metas = [o["meta_info"] for o in batch]
        await_request_lines(logs["decode"], outcome.metas + outcome.concurrent_metas)
    finally:
        for proc in procs.values():
            stop_server(proc)
        outcome.log = (
            logs["decode"].read_text(encoding="utf-8", errors="replace") if logs["decode"].exists() else ""
        )
    return outcome


def run_env(args: argparse.Namespace, run: Any) -> dict[str, str | None]:
    """Environment changes of one configuration (None: unset); plugin runs get a short alarm
    warm-up/window and write their manifest into the work folder."""
    env = dict(run.env)
    if run.plugin:
        env["MEMRA_DSPARK_ALARM_WARMUP"] = str(args.alarm_warmup)
        env["MEMRA_DSPARK_ALARM_WINDOW"] = str(args.alarm_window)
        env["MEMRA_DSPARK_MANIFEST"] = str(Path(args.workdir) / f"{run.name}.manifest.json")
    return env


def _dry_run(args: argparse.Namespace, runs: list[Any], arm: str | None, why: str, version: str) -> int:
    draft = args.draft or f"the draft bundled in {args.model_path}"
    print(f"# census arm of {draft}: {arm or 'unknown (' + why + ')'}")
    print(f"# sglang {version}; temperature 0, max_new_tokens {args.max_new_tokens}")
    for run in runs:
        env = run_env(args, run)
        unset = [f"-u {k}" for k, v in sorted(env.items()) if v is None]  # env wants -u first
        assign = [f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()) if v is not None]
        prefix = f"env {' '.join(unset + assign)} " if env else ""
        print(f"# {run.name}" + (f" (the plan refuses it: {run.refusal[:120]})" if run.refusal else ""))
        if not run.pd:
            print(prefix + shlex.join(server_command(args, run, [])))
            continue
        prefill, decode = pd_commands(args, run, [])
        decode_env = {**env, **run.decode_env}
        decode_prefix = "env " + " ".join(
            f"{k}={shlex.quote(v)}" for k, v in sorted(decode_env.items()) if v is not None
        )
        if not run.decode_only:
            print(prefix + shlex.join(prefill))
        print(decode_prefix + " " + shlex.join(decode))
    return 0


def encode_texts(model_path: str, texts: list[str]) -> list[list[int]]:
    """The prompts as the target's tokenizer encodes them (sglang's own encoding of a text prompt)."""
    from transformers import AutoTokenizer

    from sglang_dspark_plugin.check.target import encode_prompts

    return encode_prompts(AutoTokenizer.from_pretrained(model_path, local_files_only=True), texts)


def judge_departures(
    args: argparse.Namespace, prompts: list[list[int]], results: dict[str, Any]
) -> dict[str, list[dict[str, Any]]]:
    """Each served run's outputs against the run without speculation, by ``check``'s own rule
    (``check/exactness.py``): a near-tie flip is reported, a departure by a clear margin fails. The target
    is loaded with transformers once every server has stopped, on the device and in the dtype ``check``
    picks for it (on a GPU, the checkpoint's own: what sglang served)."""
    import torch

    from sglang_dspark_plugin.check.arguments import compute_dtype
    from sglang_dspark_plugin.check.exactness import judge_outputs
    from sglang_dspark_plugin.check.target import load_target_model

    base = results.get("baseline")
    if base is None or base.outcome is None:
        return {}
    served = {
        name: got.outcome.outputs
        for name, got in results.items()
        if name != "baseline" and got.outcome is not None and len(got.outcome.outputs) == len(prompts)
    }
    judged: dict[str, list[dict[str, Any]]] = {name: [] for name in served}
    differing = {name: outs for name, outs in served.items() if outs != base.outcome.outputs}
    if not differing:  # every output identical: nothing to recompute, no model to load
        return judged
    device = torch.device("cuda" if torch.cuda.is_available() and not args.cpu_harness else "cpu")
    dtype = getattr(torch, compute_dtype("auto", device, Path(args.model_path)))
    target, _ = load_target_model(args.model_path, device, dtype)
    for name, outputs in differing.items():
        found = judge_outputs(target, prompts, outputs, base.outcome.outputs)
        judged[name] = [d.to_json() for d in found]
    return judged


def validate_deployment(args: argparse.Namespace) -> tuple[int, dict[str, Any], list[Any], dict[str, Any]]:
    """Every configuration served, checked and reported: (exit status, report, runs, results)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import validate_deployment as vd

    arm, why = census_arm(args.draft, args.model_path)
    version = server_sglang_version(args.python)
    runs = vd.build_runs(args.draft, args.model_path, args.extra_args, arm, version or vd.ASSUMED_VERSION)
    if args.pd:
        runs += vd.build_pd_runs(runs, arm, str(Path(args.workdir) / "pd-plugin-auto.manifest.json"))
    texts = load_prompts(args.prompts)
    if args.dry_run:
        return (
            _dry_run(args, runs, arm, why, version or f"not installed: planned for {vd.ASSUMED_VERSION}"),
            {},
            runs,
            {},
        )
    prompts = encode_texts(
        args.tokenizer or args.model_path, texts
    )  # token ids: the judge of departures decodes the same
    base_env, cpu_flags = cpu_harness() if args.cpu_harness else (dict(os.environ), [])
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    params = {"temperature": 0, "max_new_tokens": args.max_new_tokens}
    results: dict[str, Any] = {}
    for run in runs:
        print(f"[gpu_validate] {run.name}: launching", flush=True)
        env = {**base_env, **{k: v for k, v in run_env(args, run).items() if v is not None}}
        for name, value in run_env(args, run).items():
            if value is None:
                env.pop(name, None)
        try:
            if run.pd:
                decode_env = {
                    **env,
                    "MEMRA_DSPARK_MANIFEST": str(Path(args.workdir) / f"{run.name}.decode.manifest.json"),
                }
                decode_env.update({k: v for k, v in run.decode_env.items() if v is not None})
                out = serve_pd(args, run, cpu_flags, prompts, params, (env, decode_env))
            else:
                command = server_command(args, run, cpu_flags)
                out = serve_outcome(args, run.name, command, {}, prompts, True, "input_ids", params, env)
            results[run.name] = vd.RunResult(out, out.log)
        except Exception as err:  # noqa: BLE001 - one failed configuration is reported, not fatal
            path = Path(args.workdir) / (f"{run.name}.decode.log" if run.pd else f"{run.name}.log")
            log = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            results[run.name] = vd.RunResult(None, log, f"{type(err).__name__}: {err}")
        print(f"[gpu_validate] {run.name}: {results[run.name].error or 'served'}", flush=True)
    departures = judge_departures(args, prompts, results)
    checks = vd.evaluate(runs, results, arm) + vd.departure_checks(departures)
    report = {
        "sglang": version,
        "census_arm": arm,
        "draft": args.draft or f"bundled in {args.model_path}",
        "prompts": len(prompts),
        "cpu_harness": bool(args.cpu_harness),
        "runs": [
            {
                "name": r.name,
                "arm": r.arm,
                "args": r.spec_args,
                "refused_by_plan": r.refusal,
                "pd": r.pd,
                "bundled": r.bundled,
            }
            for r in runs
        ],
        "checks": [{"check": c.name, "ok": c.ok, "detail": c.detail} for c in checks],
        "accept_lengths": vd.accept_table(runs, results),
        "information": {**vd.information(runs, results), "departures": departures},
    }
    for c in checks:
        print(f"{'PASS' if c.ok else 'FAIL'} {c.name}" + ("" if c.ok or not c.detail else f" ({c.detail})"))
    print(json.dumps(report["information"], indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    code = 0 if checks and all(c.ok for c in checks) else 1
    return code, report, runs, results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.embedded:
        return run_embedded(args)
    return validate_deployment(args)[0]


if __name__ == "__main__":
    sys.exit(main())
