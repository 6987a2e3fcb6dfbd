"""The context edge of sglang's DFlash-family decode on the CPU harness: a deterministic reproduction.

An operator run (sglang 0.5.23, concurrency 8, prompts filling a 512-token context) saw builtin DSPARK's
scheduler die once in ``dflash_info_v2.py:197 prepare_for_decode -> alloc_for_spec_decode ->
assign_req_to_token_pool_cpu`` ("The expanded size of the tensor (2) must match the existing size (3)").

The condition, from sglang's code (W = ``speculative_num_draft_tokens``, the verify window; page size 1):

* each decode round reserves KV slots up to ``committed + 2 * W`` and writes their indices into the
  request's row of ``req_to_token`` (0.5.23 ``speculative/dflash_info_v2.py:147`` ``reserve = 2 *
  block_size``, ``mem_cache/allocation_sizing.py:79-83``; 0.5.17 ``speculative/dflash_info_v2.py:154``);
* a row holds ``context_len + 4 + W`` slots (0.5.23 ``mem_cache/allocation_sizing.py:105``, 0.5.17
  ``:53``; only ``page_size > 1`` sizes it for the 2x reserve: 0.5.23 ``:108-112``, 0.5.17 ``:54``);
* a request decodes while its output is shorter than ``max_new_tokens``, which sglang caps at
  ``max_req_len - input_len - 1`` with ``max_req_len = context_len - 1`` (0.5.23
  ``managers/scheduler.py:2714``, ``managers/tp_worker.py:422``; 0.5.17 ``:2136``, ``:408``), so its
  last round is prepared at a committed length of at most ``context_len - 4``;
* that round reserves up to ``context_len - 4 + 2 * W``: past the row when ``W > 8``.

A request reaches that last length when its rounds land on it; a drafter whose every draft is rejected
(one token a round) lands on every length. ``--zero-acceptance`` serves such drafters (the embedded
ones with fresh random weights) one prompt of ``--prompt-tokens`` tokens, as many new tokens as sglang
allows, once per algorithm: DSPARK and ``DSPARK_HARVEST`` with W = 9 (the shifted drafter, block 8),
DFLASH with W = 8 (the mask-fill drafter, block 8: the row holds exactly the reserve). Without it, the
embedded trained drafters serve prompts of ``context - farthest`` to ``context - nearest`` tokens one at a
time, then all at once (``--together`` times): whether a request lands on the last length depends on its
acceptance.

Run it with an sglang environment's python:

    ~/.cache/sglang-dspark-plugin/venvs/sglang-0.5.23/bin/python scripts/context_edge.py --zero-acceptance
    ... scripts/context_edge.py --context-length 512 --nearest 0 --farthest 8 --together 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "sglang")]

import served_cases as sc  # noqa: E402
from served import run_engine  # noqa: E402

from sglang_dspark_plugin.embedded import EMBEDDED  # noqa: E402

DRAFTER = {"DFLASH": "drafter-dflash", "DSPARK": "drafter-dspark-markov", "DSPARK_HARVEST": "drafter-dspark"}
"""The embedded drafter each algorithm serves (DSPARK_HARVEST: the shifted one, as DSPARK)."""
VERIFY_WINDOW = {"DFLASH": 8, "DSPARK": 8, "DSPARK_HARVEST": 9}
"""W of each algorithm with its embedded drafter (DFLASH: the block size; the shifted harvest: block + 1)."""
CRASH_MARKERS = ("must match the existing size", "Traceback", "RuntimeError", "served engine failed")


def prompts(context_length: int, nearest: int, farthest: int) -> list[list[int]]:
    """Token-id prompts of ``context_length - farthest`` ... ``context_length - nearest`` tokens."""
    # no two prompts share a prefix, so the radix cache reuses nothing: each prefill is the whole prompt
    return [
        [5 + (gap + i) % 200 for i in range(context_length - gap)] for gap in range(farthest, nearest - 1, -1)
    ]


def zero_acceptance_drafters(workdir: Path, block_size: int | None = None) -> dict[str, Path]:
    """Each algorithm's drafter with fresh random weights: every draft rejected, one token a round.
    ``block_size``: the drafters' block size instead of the embedded ones' (random weights fit any)."""

    def variant(name: str) -> Path:
        source = EMBEDDED.root / f"drafter-{name}"
        if block_size is not None:
            copy = workdir / f"{name}-block-{block_size}"
            copy.mkdir(parents=True)
            config = json.loads((source / "config.json").read_text())
            config["block_size"] = block_size
            (copy / "config.json").write_text(json.dumps(config, indent=2) + "\n")
            (copy / "model.safetensors").symlink_to(source / "model.safetensors")
            source = copy
        return sc.random_weights_variant(source, workdir / f"{name}-random")

    shifted = variant("dspark")
    return {
        "DFLASH": variant("dflash"),
        "DSPARK": sc.zero_markov_variant(shifted, workdir / "dspark-random-zero-markov"),
        "DSPARK_HARVEST": shifted,
    }


def serve(
    algorithm: str,
    drafter: Path,
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
        "speculative_draft_model_path": str(drafter),
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
        error = next((ln for ln in text.splitlines()[::-1] if "Error" in ln), line).strip()[:300]
        tail = "\n".join(text.splitlines()[-40:])
        return {"crashed": True, "error": error, "last_prompt_tokens": last, "served": None, "log_tail": tail}
    lengths = [len(p) + len(out) for p, out in zip(batch, got.outputs[: len(batch)], strict=True)]
    return {"crashed": False, "error": None, "served": lengths}


def expectation(context_length: int, window: int, page_size: int) -> str:
    """What the condition predicts for one request decoding one token a round to its last length."""
    row, last = context_length + 4 + window, context_length - 4 + 2 * window
    if page_size > 1:
        return f"W={window}: page size {page_size} sizes the row for the 2x reserve"
    verdict = f"past the row by {last - row}" if last > row else "within the row"
    return f"W={window}: row {row} slots, the last round reserves up to {last}: {verdict}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--context-length", type=int, default=64)
    parser.add_argument("--algorithms", default="DSPARK,DSPARK_HARVEST,DFLASH")
    parser.add_argument("--zero-acceptance", action="store_true", help="drafters whose drafts never match")
    parser.add_argument("--prompt-tokens", type=int, help="--zero-acceptance: the prompt (default context/2)")
    parser.add_argument("--block-size", type=int, help="--zero-acceptance: the drafters' block (default 8)")
    parser.add_argument("--nearest", type=int, default=2, help="the shortest gap to the context length")
    parser.add_argument("--farthest", type=int, default=12, help="the longest gap to the context length")
    parser.add_argument(
        "--page-size", type=int, default=1, help="sglang's --page-size (> 1: its own headroom)"
    )
    parser.add_argument("--together", type=int, default=3, help="then serve all prompts at once, N times")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args(argv)
    ctx = args.context_length
    with tempfile.TemporaryDirectory() as tmp:
        if args.zero_acceptance:
            drafters = zero_acceptance_drafters(Path(tmp), args.block_size)
            b = args.block_size or 8
            windows = {"DFLASH": b, "DSPARK": b + 1, "DSPARK_HARVEST": b + 1}
            gap = ctx - (args.prompt_tokens or ctx // 2)
            batch, together = prompts(ctx, gap, gap), 0
        else:
            drafters = {name: EMBEDDED.root / folder for name, folder in DRAFTER.items()}
            windows, batch, together = VERIFY_WINDOW, prompts(ctx, args.nearest, args.farthest), args.together
        results = {}
        for algorithm in args.algorithms.split(","):
            sizes = f"{len(batch[0])}..{len(batch[-1])}"
            print(f"== {algorithm}: prompts of {sizes} tokens, context {ctx}")
            print(f"   expected: {expectation(ctx, windows[algorithm], args.page_size)}")
            outcome = serve(algorithm, drafters[algorithm], ctx, batch, ctx, args.page_size, together)
            outcome["verify_window"] = windows[algorithm]
            results[algorithm] = outcome
            if outcome["crashed"]:
                where = f"the {outcome['last_prompt_tokens']}-token prompt"
                print(f"   the engine died serving {where}: {outcome['error']}")
            else:
                print(f"   served every prompt; final lengths {outcome['served']}")
    if args.json:
        args.json.write_text(json.dumps({"context_length": ctx, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
