"""The context edge of sglang's DFlash-family decode on the CPU harness: a reproduction attempt.

An operator run (sglang 0.5.23, concurrency 8, prompts filling a 512-token context) saw builtin DSPARK's
scheduler die once in ``dflash_info_v2.py:197 prepare_for_decode -> alloc_for_spec_decode ->
assign_req_to_token_pool_cpu`` ("The expanded size of the tensor (2) must match the existing size (3)").
The suspected condition, read from the code (not yet reproduced): each decode round reserves
``committed + 2 * W`` KV slots (W = ``speculative_num_draft_tokens``; 0.5.23
``speculative/dflash_info_v2.py:142`` ``reserve = 2 * block_size`` with
``mem_cache/allocation_sizing.py:73-93``; 0.5.17 ``speculative/dflash_info_v2.py:154``), and writes their
indices into the request's row of ``req_to_token``, which holds ``context_len + 4 + W`` slots at page
size 1 (0.5.23 ``mem_cache/allocation_sizing.py:96-116``, 0.5.17 ``:46-62``: the ``page_size > 1``
branch alone sizes the row for the 2x reserve). A round prepared at a committed length above
``context_len + 4 - W`` would run past its row.

This serves prompts of ``context - farthest`` to ``context - nearest`` tokens one at a time, then all at
once (``--together`` times), with as many new tokens as sglang allows, on sglang's real engine (the
test-side CPU patches of ``tests/sglang/cpu_support``), once per algorithm, and reports whether the
engine served them or where it died. So far (0.5.23, W = 8 and 9; context 64 with prompts of 52 to 64
tokens and context 512 with prompts of 503 to 512, alone and all at once) every run served every
prompt, builtin and plugin alike: the condition above is not the whole story.
Run it with an sglang environment's python:

    ~/.cache/sglang-dspark-plugin/venvs/sglang-0.5.23/bin/python scripts/context_edge.py
    ... scripts/context_edge.py --context-length 512 --nearest 0 --farthest 8 --together 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "sglang")]

from served import run_engine  # noqa: E402

from sglang_dspark_plugin.embedded import EMBEDDED  # noqa: E402

DRAFTER = {"DFLASH": "drafter-dflash", "DSPARK": "drafter-dspark-markov", "DSPARK_HARVEST": "drafter-dspark"}
"""The embedded drafter each algorithm serves (DSPARK_HARVEST: the shifted one, as DSPARK)."""
CRASH_MARKERS = ("must match the existing size", "Traceback", "RuntimeError", "served engine failed")


def prompts(context_length: int, nearest: int, farthest: int) -> list[list[int]]:
    """Token-id prompts of ``context_length - farthest`` ... ``context_length - nearest`` tokens."""
    # no two prompts share a prefix, so the radix cache reuses nothing: each prefill is the whole prompt
    return [
        [5 + (gap + i) % 200 for i in range(context_length - gap)] for gap in range(farthest, nearest - 1, -1)
    ]


def serve(
    algorithm: str,
    context_length: int,
    batch: list[list[int]],
    max_new: int,
    page_size: int = 1,
    together: int = 0,
) -> dict[str, Any]:
    """One engine serving ``batch`` one prompt at a time, then (``together``) that many times all at
    once; what it served, or where it died."""
    engine = {
        "page_size": page_size,
        "model_path": str(EMBEDDED.target),
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": str(EMBEDDED.root / DRAFTER[algorithm]),
        "context_length": context_length,
        "allow_auto_truncate": True,  # max_new_tokens cut to what the context allows, not refused
    }
    try:
        got = run_engine(engine, [[p] for p in batch] + [list(batch)] * together, max_new)
    except AssertionError as err:  # the engine died: the log names the last prompt it took
        text = str(err)
        line = next((ln for ln in text.splitlines()[::-1] if any(m in ln for m in CRASH_MARKERS)), "")
        prefills = re.findall(r"Prefill batch.*?#new-token: (\d+)", text)
        last = int(prefills[-1]) if prefills else None
        return {"crashed": True, "error": line.strip()[:300], "last_prompt_tokens": last, "served": None}
    lengths = [len(p) + len(out) for p, out in zip(batch, got.outputs[: len(batch)], strict=True)]
    return {"crashed": False, "error": None, "served": lengths}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--context-length", type=int, default=64)
    parser.add_argument("--algorithms", default="DSPARK,DSPARK_HARVEST,DFLASH")
    parser.add_argument("--nearest", type=int, default=2, help="the shortest gap to the context length")
    parser.add_argument("--farthest", type=int, default=12, help="the longest gap to the context length")
    parser.add_argument(
        "--page-size", type=int, default=1, help="sglang's --page-size (> 1: its own headroom)"
    )
    parser.add_argument("--together", type=int, default=3, help="then serve all prompts at once, N times")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    batch = prompts(args.context_length, args.nearest, args.farthest)
    results = {}
    for algorithm in args.algorithms.split(","):
        sizes = f"{len(batch[0])}..{len(batch[-1])}"
        print(f"== {algorithm}: prompts of {sizes} tokens, context {args.context_length}")
        outcome = serve(
            algorithm, args.context_length, batch, args.context_length, args.page_size, args.together
        )
        results[algorithm] = outcome
        if outcome["crashed"]:
            where = f"the {outcome['last_prompt_tokens']}-token prompt"
            print(f"   the engine died serving {where}: {outcome['error']}")
        else:
            print(f"   served every prompt; final lengths {outcome['served']}")
    if args.json:
        args.json.write_text(
            json.dumps({"context_length": args.context_length, "results": results}, indent=2)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
