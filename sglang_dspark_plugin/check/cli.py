"""``dspark-harvest check``: measure drafters under both harvests on the reference engine.

With no arguments it runs the embedded tiny target with every embedded drafter (``EMBEDDED.drafters``)
under each harvest, plus plain autoregressive decoding, on the embedded fixed prompts: the postmortem in
miniature. With ``--target T --draft D [--draft D2 ...]`` it does the same for any checkpoints (local
folders, or hub ids in the local Hugging Face cache), and gives each drafter a verdict with a stated
confidence; the exit code is the overall verdict's (``verdicts.py``), so a pipeline can act on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..commands import EXIT_OK, EXIT_REFUSED, add_command, emit, refuse
from ..errors import DsparkHarvestError
from ..util.figure import REPLACE_FLAG
from .arguments import (
    DEFAULT_MAX_NEW_TOKENS,
    DEVICE_HELP,
    DTYPE_CHOICES,
    check_arguments,
    compute_dtype,
    resolve_target,
)
from .conclusions import build_report
from .confidence import CONFIDENCE, MIN_PROMPTS
from .exactness import judge
from .measure import load_drafter_for, measure
from .plot import plot
from .report import CheckReport, Settings, report_schema
from .target import encode_prompts, load_target_model, memory_guard
from .text import format_report
from .verdicts import EXIT_NOT_EXACT, exit_codes_text

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg

EPILOG = f"""examples:
  dspark-harvest check                                   the embedded tiny models, no download
  dspark-harvest check --target TARGET --draft DRAFT     a checkpoint of your own (folder or cached hub id)
  dspark-harvest check --target T --draft A --draft B    several drafters of one target, each measured
  dspark-harvest check --target T --draft D --json | jq .verdict
  dspark-harvest check --schema                          the JSON Schema of --json

verdict: per drafter, the paired difference of accept lengths over the prompts (dspark - dflash) with a
{CONFIDENCE:.0%} bootstrap interval; it decides only when the interval excludes 0 and at least {MIN_PROMPTS}
prompts were decoded, else the verdict is inconclusive.

exit codes (the worst verdict over the drafters; also "verdict" and "exit_code" in --json):
{exit_codes_text()}
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``check`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "check",
        help="measure a drafter under both harvests: verdict with confidence, accept length, probe, speed",
        description=(
            "Decode fixed prompts with the target alone and with each drafter under each harvest "
            "(dflash: rows 1..b-1, dspark: rows 0..b-1) at temperature 0, and report accept length, "
            "per-position acceptance, the offset probe, exactness against the target's own greedy "
            "output, tokens/s, speedup, and a verdict: serve as is, the served harvest contradicts "
            "the measurement (with the override), or inconclusive. No arguments: the embedded tiny "
            "target and drafters."
        ),
        run=run,
        json_flag=False,  # --json takes its place among the options below
        epilog=EPILOG,
    )
    parser.add_argument(
        "--target",
        metavar="PATH",
        help="target: a Hugging Face causal-LM folder, or a hub id in the local cache",
    )
    parser.add_argument(
        "--draft",
        metavar="PATH",
        action="append",
        help="drafter: a z-lab / SpecForge checkpoint folder or cached hub id (repeatable: each is measured)",
    )
    parser.add_argument("--device", default="auto", help=DEVICE_HELP)
    parser.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        default="auto",
        help="compute dtype (default auto: the target checkpoint's dtype on CUDA, float32 on CPU and for "
        "the embedded models; in bfloat16 and float16 a near-tie flip is reported, only a clear departure "
        "fails)",
    )
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help=f"tokens generated per prompt (default: {DEFAULT_MAX_NEW_TOKENS})",
    )
    parser.add_argument(
        "--num-prompts", type=int, default=None, help="use only the first N fixed prompts (default: all)"
    )
    parser.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="a prompt to decode (repeatable; default: the embedded fixed prompts)",
    )
    _add_outputs(parser)
    _add_progress(parser)
    return parser


def _add_outputs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--schema", action="store_true", help="print the JSON Schema of --json and exit")
    parser.add_argument("--plot", metavar="FILE.png", help="draw per-position acceptance with matplotlib")
    parser.add_argument(
        REPLACE_FLAG,
        action="store_true",
        help="let --plot replace an existing file that is not such an image",
    )


def _add_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1 for the embedded tiny models, where more threads only add "
        "synchronisation, torch's own default with --target)",
    )
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument(
        "--progress", action="store_true", help="progress on stderr (default: only when stderr is a terminal)"
    )
    progress.add_argument("--no-progress", action="store_true", help="no progress on stderr")


def _censuses(drafts: list[Path]) -> list[DflashCfg]:
    """Each drafter's census, every one refused before a model loads if the engine cannot draft with it."""
    from ..census import census
    from ..engine.fit import check_engine_can_draft

    cfgs = [census(str(path)) for path in drafts]
    for cfg in cfgs:
        check_engine_can_draft(cfg)
    return cfgs


def _show_progress(args: argparse.Namespace) -> bool:
    if args.progress or args.no_progress:
        return bool(args.progress)
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())  # a pipe or a log file gets no carriage-return updates


def _check_max_new_tokens(target: str, max_new_tokens: int) -> None:
    """``--max-new-tokens`` against the context the target's config.json declares, before any load (a
    folder that cannot be read is left to the target's loader to refuse)."""
    from ..checkpoint.files import MAX_CONFIG_BYTES, read_json
    from ..engine.context import check_context, target_context

    try:
        config = read_json(Path(target).expanduser() / "config.json", "target config", MAX_CONFIG_BYTES, "")
    except (DsparkHarvestError, RuntimeError):
        return
    check_context(target_context(config), [], max_new_tokens)


def check(args: argparse.Namespace) -> CheckReport:
    """Run the check described by ``args``; returns the report (raises the typed errors)."""
    import torch

    from ..embedded import EMBEDDED
    from ..engine.context import check_context, target_context

    checked = check_arguments(args)
    if checked.threads is not None:
        torch.set_num_threads(checked.threads)
    embedded = args.target is None
    if embedded:
        target_path, drafts = str(EMBEDDED.target), list(EMBEDDED.drafters.values())
    else:
        target_path, drafts = str(resolve_target(args.target)), checked.drafts
    cfgs = _censuses(drafts)  # the census first: a refused drafter should not cost a model load
    _check_max_new_tokens(target_path, args.max_new_tokens)  # nor --max-new-tokens past the context
    dtype_name = compute_dtype(args.dtype, checked.device, None if embedded else Path(target_path))
    dtype = getattr(torch, dtype_name)
    progress = _show_progress(args)
    target, tokenizer = load_target_model(target_path, checked.device, dtype, progress=progress)
    drafters = [
        load_drafter_for(Path(p).name, cfg, target, tokenizer, checked.device, dtype)
        for p, cfg in zip(drafts, cfgs, strict=True)
    ]
    vocab = target.get_input_embeddings().num_embeddings
    prompts = encode_prompts(tokenizer, (args.prompt or list(EMBEDDED.prompts))[: args.num_prompts], vocab)
    context, block = target_context(target.config.to_dict()), max(c.block_size or 0 for c in cfgs)
    check_context(context, [len(p) for p in prompts], args.max_new_tokens, block)  # before any prefill
    with memory_guard("measuring"):
        runs, ar_tps, wall = measure(target, drafters, prompts, args.max_new_tokens, progress=progress)
    with memory_guard("recomputing in float32 where an output left the target's greedy choice"):
        judge(target, [output for run_ in runs for output in run_.checked])
    settings = Settings(
        target=target_path,
        embedded=embedded,
        device=str(checked.device),
        dtype=dtype_name,
        prompts=len(prompts),
        max_new_tokens=args.max_new_tokens,
        threads=torch.get_num_threads(),
        wall_s=wall,
    )
    return build_report(drafters, runs, ar_tps, settings, checked.env_value)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``check``; returns the exit code of its overall verdict (``--help`` lists them)."""
    out = sys.stdout if out is None else out
    if args.schema:
        print(json.dumps(report_schema(), indent=2), file=out)
        return EXIT_OK
    try:
        report = check(args)
        if args.plot:
            plot(report, args.plot, args.replace_plot)
    except DsparkHarvestError as exc:
        return refuse(exc, "check", args.json, out)
    emit(out, args.json, report.to_json, lambda: format_report(report))
    if args.plot and not args.json:
        print(f"\nplot written to {args.plot}", file=out)
    return report.exit_code


__all__ = ["EXIT_OK", "EXIT_NOT_EXACT", "EXIT_REFUSED", "EPILOG", "add_parser", "check", "run"]
