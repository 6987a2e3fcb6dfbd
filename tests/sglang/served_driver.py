"""Run one sglang ``Engine`` on CPU, generate, shut down, and write the results as JSON (tests only).

Started by ``served.py`` as a subprocess, with ``cpu_support/`` first on ``PYTHONPATH`` so that the CPU
patches reach this process and every scheduler process sglang spawns. Usage::

    python served_driver.py SPEC.json OUT.json

SPEC holds ``engine`` (keyword arguments of ``sglang.Engine``), ``batches`` (a list of batches, each a
list of prompts as token ids; a batch of several prompts is one concurrent ``generate`` call) and
``max_new_tokens``; with ``await_request_lines`` the driver waits, before it shuts the engine down, until
the log (its own stdout, a file the schedulers share) holds the plugin's per-request line for every
request it served: with ``MEMRA_DSPARK_QUEUE_THREAD`` those lines land after the answers, and the
shutdown kills the schedulers. OUT holds, per batch, every request's ``output_ids`` and ``meta_info``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

AWAIT_S = 120.0
"""How long the driver waits for the per-request lines; past it, the test's own checks fail."""


def await_request_lines(rids: list[str]) -> None:
    """Until the log holds ``dspark accept request rid=RID`` for each of ``rids`` (or ``AWAIT_S``)."""
    deadline = time.monotonic() + AWAIT_S
    while True:
        with open("/proc/self/fd/1", errors="replace") as log:  # the log file the harness reads
            text = log.read()
        missing = [rid for rid in rids if f"dspark accept request rid={rid} " not in text]
        if not missing:
            return
        if time.monotonic() > deadline:
            print(f"[driver] no per-request line after {AWAIT_S} s for {missing[:4]}", file=sys.stderr)
            return
        time.sleep(0.02)


def main(spec_path: str, out_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    import dspark_cpu_patches
    import sglang as sgl

    if not dspark_cpu_patches._INSTALLED:
        raise RuntimeError("the CPU patches were not installed by sitecustomize (check PYTHONPATH)")
    t0 = time.time()
    engine = sgl.Engine(**spec["engine"])
    started = time.time() - t0
    results = []
    try:
        params = {"temperature": 0.0, "max_new_tokens": spec["max_new_tokens"], "ignore_eos": True}
        for batch in spec["batches"]:
            t = time.time()
            if len(batch) == 1:
                outs = [engine.generate(input_ids=batch[0], sampling_params=params)]
            else:
                outs = engine.generate(input_ids=batch, sampling_params=[params] * len(batch))
            results.append(
                {
                    "seconds": time.time() - t,
                    "requests": [{"output_ids": o["output_ids"], "meta_info": o["meta_info"]} for o in outs],
                }
            )
        if spec.get("await_request_lines"):
            await_request_lines([r["meta_info"]["id"] for b in results for r in b["requests"]])
    finally:
        engine.shutdown()
    Path(out_path).write_text(
        json.dumps({"start_seconds": started, "batches": results, "patched": dspark_cpu_patches.applied()})
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
