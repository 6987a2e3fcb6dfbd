"""The served-test harness: sglang's real ``Engine`` on CPU, one subprocess per engine configuration.

Each configuration runs ``served_driver.py`` in a fresh Python process whose ``PYTHONPATH`` starts with
``cpu_support/`` (the CPU patches, applied there and in every scheduler process sglang spawns), so the
pytest process itself is never patched. The driver starts the engine, generates, and always shuts it
down; this side reads its JSON results and its log (the plugin's startup line, manifest and per-round
accept lines come from the scheduler processes' stderr).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CPU_SUPPORT = HERE / "cpu_support"
DRIVER = HERE / "served_driver.py"

ENGINE_TIMEOUT_S = int(os.environ.get("DSPARK_SERVED_TIMEOUT", "900"))
"""One engine configuration (start, every batch, shutdown); generous: a loaded 2-core machine is slow."""

CPU_ENGINE_ARGS: dict[str, Any] = {
    "device": "cpu",
    "attention_backend": "torch_native",
    "speculative_draft_attention_backend": "torch_native",
    "disable_cuda_graph": True,
    "dtype": "float32",
    # On CPU sglang sizes its budget from the host's free memory, measured at start: 0.05 of 24 GB left
    # too little margin when another process allocated meanwhile ("Loaded weights leave no GPU memory
    # for the KV cache ... minimum viable 0.0576"). The KV pool itself is fixed by max_total_tokens, so
    # a generous fraction costs nothing and leaves room to spare.
    "mem_fraction_static": 0.3,
    "max_total_tokens": 4096,
    "max_running_requests": 8,
    "log_level": "info",
    "random_seed": 0,
}
"""What the CPU run needs on top of a GPU run's arguments (``tests/sglang/served_cases.py`` has the rest)."""


def cpu_launch_flags(overrides: dict[str, Any] | None = None) -> list[str]:
    """``CPU_ENGINE_ARGS`` (with ``overrides``) as ``launch_server`` flags; the log level and seed are
    left to the caller's own command line."""
    flags = []
    for key, value in {**CPU_ENGINE_ARGS, **(overrides or {})}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif key not in ("log_level", "random_seed"):
            flags += [flag, str(value)]
    return flags


def cpu_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a served process: CPU engine, patches on, one OpenMP thread."""
    env = dict(os.environ)
    env.pop("MEMRA_DSPARK_HARVEST", None)
    env["PYTHONPATH"] = os.pathsep.join([str(CPU_SUPPORT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.pop("DSPARK_ROW_OVERRUNS", None)  # a test asks for the count mode itself (cpu_support)
    env["DSPARK_CPU_PATCHES"] = "1"
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    env.setdefault("SGLANG_CPU_OMP_THREADS_BIND", "0")
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    env.update(extra or {})
    return env


@dataclass
class ServedRun:
    """What one engine configuration produced."""

    output_ids: list[list[list[int]]]  # [batch][request] -> generated token ids
    meta: list[list[dict[str, Any]]]  # [batch][request] -> sglang's meta_info
    log: str
    start_seconds: float
    batch_seconds: list[float] = field(default_factory=list)

    @property
    def outputs(self) -> list[list[int]]:
        """Every request's output ids, in order, over all batches."""
        return [ids for batch in self.output_ids for ids in batch]

    @property
    def metas(self) -> list[dict[str, Any]]:
        return [m for batch in self.meta for m in batch]


def run_process_group(cmd: list[str], env: dict[str, str], timeout: int, cwd: str) -> tuple[int, str]:
    """Run ``cmd`` in its own process group; on timeout kill the whole group (sglang's schedulers too)."""
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            log.seek(0)
            raise AssertionError(
                f"served process timed out after {timeout} s: {cmd}\n{log.read()[-6000:]}"
            ) from None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # stragglers of a finished engine
        log.seek(0)
        return proc.returncode, log.read()


def run_engine(
    engine_args: dict[str, Any],
    batches: list[list[list[int]]],
    max_new_tokens: int,
    env: dict[str, str] | None = None,
    timeout: int = ENGINE_TIMEOUT_S,
    await_request_lines: bool = False,
) -> ServedRun:
    """Start sglang's Engine with ``engine_args`` (on top of the CPU ones) and generate ``batches``;
    with ``await_request_lines``, shut it down once the log holds the plugin's line for each request."""
    spec = {
        "engine": {**CPU_ENGINE_ARGS, **engine_args},
        "batches": batches,
        "max_new_tokens": max_new_tokens,
        "await_request_lines": await_request_lines,
    }
    with tempfile.TemporaryDirectory(prefix="dspark-served-") as tmp:
        spec_path, out_path = Path(tmp) / "spec.json", Path(tmp) / "out.json"
        spec_path.write_text(json.dumps(spec))
        returncode, log = run_process_group(
            [sys.executable, str(DRIVER), str(spec_path), str(out_path)], cpu_env(env), timeout, cwd=tmp
        )
        if returncode != 0 or not out_path.exists():
            raise AssertionError(
                f"served engine failed (exit {returncode}) for {engine_args}:\n{log[-6000:]}"
            )
        data = json.loads(out_path.read_text())
    return ServedRun(
        output_ids=[[r["output_ids"] for r in b["requests"]] for b in data["batches"]],
        meta=[[r["meta_info"] for r in b["requests"]] for b in data["batches"]],
        log=log,
        start_seconds=data["start_seconds"],
        batch_seconds=[b["seconds"] for b in data["batches"]],
    )


def free_port() -> int:
    """A TCP port on the loopback interface that nothing listens on now."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def launch_server(args: list[str], env: dict[str, str] | None = None, timeout: int = ENGINE_TIMEOUT_S):
    """``python -m sglang.launch_server ARGS`` on CPU (loopback only); yields (base url, log reader,
    pid): the server runs in its own process group (its id is ``pid``), always killed on exit.
    """
    import time
    import urllib.request

    port = free_port()
    cmd = [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port), *args]
    with tempfile.TemporaryDirectory(prefix="dspark-http-") as tmp, open(Path(tmp) / "log", "w+") as log:
        proc = subprocess.Popen(
            cmd, env=cpu_env(env), cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )

        def read_log() -> str:
            log.flush()
            return (Path(tmp) / "log").read_text(errors="replace")

        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.time() + timeout
            while True:
                if proc.poll() is not None:
                    raise AssertionError(
                        f"launch_server exited with {proc.returncode}:\n{read_log()[-6000:]}"
                    )
                try:
                    with urllib.request.urlopen(url + "/health", timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.time() > deadline:
                    raise AssertionError(
                        f"launch_server not healthy after {timeout} s:\n{read_log()[-6000:]}"
                    )
                time.sleep(2)
            yield url, read_log, proc.pid
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def post_json(url: str, payload: dict[str, Any], timeout: int = 600) -> Any:
    """POST ``payload`` as JSON; the decoded JSON answer."""
    import urllib.request

    req = urllib.request.Request(
        url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())
