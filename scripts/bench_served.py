#!/usr/bin/env python
"""ms/token of DSPARK_HARVEST against the builtin it mirrors, served by sglang's real engine on CPU.

Pairs, each on the same drafter and prompts, measured side by side in one run:
  dflash arm (census)  vs builtin DFLASH   on the embedded mask-fill drafter
  dspark arm (census)  vs builtin DSPARK   on the embedded shifted drafter with a zero rank-1 Markov head

Each configuration is served ``--repeats`` times, alternating with its partner (A B A B ...), and the
fastest repeat counts, so slow drift of a shared machine hits both sides alike. Only the generation
is timed (engine start-up excluded). On CPU this measures the plugin's host-side overhead per round
(telemetry, the overridden hook), not GPU kernels. Target: ratio <= 1.03.

Run it with the python of an sglang environment (scripts/setup_envs.sh):

    ~/.cache/sglang-dspark-plugin/venvs/sglang-0.5.23/bin/python scripts/bench_served.py
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "scripts"), str(REPO / "tests" / "sglang")]

import served_cases as sc  # noqa: E402
from served import run_engine  # noqa: E402

from sglang_dspark_plugin.embedded import EMBEDDED  # noqa: E402

PAIRS = (
    ("plugin/dflash", "builtin-DFLASH/dflash"),
    ("plugin/dspark-zero-markov", "builtin-DSPARK/dspark-zero-markov"),
)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=sc.MAX_NEW_TOKENS)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED.target), local_files_only=True)
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in EMBEDDED.prompts[: args.prompts]]
    with tempfile.TemporaryDirectory() as tmp:
        drafters = sc.drafter_folders(EMBEDDED.root, Path(tmp))
        best: dict[str, float] = {}
        for _ in range(args.repeats):
            for pair in PAIRS:
                for name in pair:
                    run = sc.RUNS[name]
                    got = run_engine(
                        {
                            "model_path": str(EMBEDDED.target),
                            "speculative_algorithm": run.algorithm,
                            "speculative_draft_model_path": str(drafters[run.drafter]),
                        },
                        [[q] for q in prompts],
                        args.max_new_tokens,
                        env=run.env(),
                    )
                    tokens = sum(len(o) for o in got.outputs)
                    ms = 1000.0 * sum(got.batch_seconds) / tokens
                    best[name] = min(best.get(name, float("inf")), ms)
                    print(f"[bench_served] {name}: {ms:.2f} ms/token", file=sys.stderr, flush=True)
    rows = [
        {
            "plugin": a,
            "builtin": b,
            "plugin_ms_per_token": best[a],
            "builtin_ms_per_token": best[b],
            "ratio": best[a] / best[b],
        }
        for a, b in PAIRS
    ]
    if args.json:
        print(json.dumps({"pairs": rows, "repeats": args.repeats, "prompts": len(prompts)}, indent=2))
        return 0
    print(f"{'plugin run':28} {'builtin run':36} {'plugin':>9} {'builtin':>9} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['plugin']:28} {r['builtin']:36} {r['plugin_ms_per_token']:8.2f}ms "
            f"{r['builtin_ms_per_token']:8.2f}ms {r['ratio']:6.3f}"
        )
    print("target: ratio <= 1.03 (fastest of each configuration's repeats; generation only)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
