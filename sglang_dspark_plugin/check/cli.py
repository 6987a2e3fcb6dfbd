"""``dspark-harvest check``: measure a drafter under both harvests on the reference engine.

With no arguments it runs the embedded tiny target with every embedded drafter (``EMBEDDED.drafters``:
one per training strategy without a Markov head, and a SpecForge-shaped DSpark drafter with one, each
at its own block size) under each harvest, plus plain autoregressive decoding, on the embedded fixed
prompts: the postmortem in miniature (the matched harvest accepts more, every run stays exact). With
``--target PATH --draft PATH`` it does the same for any local checkpoints and recommends a harvest.

Timing is side by side: after a warm-up, every prompt is decoded by every arm in turn, so a change in
machine load hits all arms alike. Exit code 0 on success, 1 if a run was not exact (an engine bug),
2 on a refusal (a typed error naming what to fix).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ..commands import EXIT_OK, EXIT_REFUSED, add_command, emit, refuse
from ..errors import DsparkHarvestError
from .arguments import DEFAULT_MAX_NEW_TOKENS, DTYPES, check_arguments
from .conclusions import build_report
from .measure import load_drafter_for, measure
from .plot import plot
from .report import CheckReport, Settings
from .target import encode_prompts, load_target, memory_guard
from .text import format_report

if TYPE_CHECKING:
    from ..draft_config import DflashCfg

EXIT_NOT_EXACT = 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``check`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "check",
        help="measure a drafter under both harvests: accept length, probe, exactness, speed",
        description=(
            "Decode fixed prompts with the target alone and with the drafter under each harvest "
            "(dflash: rows 1..b-1, dspark: rows 0..b-1) at temperature 0, and report accept length, "
            "per-position acceptance, the offset probe, exactness against the target's own greedy "
            "output, tokens/s and speedup. No arguments: the embedded tiny target and drafters."
        ),
        run=run,
        json_flag=False,  # --json takes its place among the options below
    )
    parser.add_argument("--target", metavar="PATH", help="target: a local Hugging Face causal-LM folder")
    parser.add_argument(
        "--draft", metavar="PATH", help="drafter: a local z-lab / SpecForge checkpoint folder"
    )
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="compute dtype (default: float32)")
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
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--plot", metavar="FILE.png", help="draw per-position acceptance with matplotlib")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1 for the embedded tiny models, where more threads only add "
        "synchronisation, torch's own default with --target)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    return parser


def _censuses(drafts: list[Path]) -> list[DflashCfg]:
    """Each drafter's census, every one refused before a model loads if the engine cannot draft with it."""
    from ..census import census
    from ..engine.fit import check_engine_can_draft

    cfgs = [census(str(path)) for path in drafts]
    for cfg in cfgs:
        check_engine_can_draft(cfg)
    return cfgs


def _check_max_new_tokens(target: str, max_new_tokens: int) -> None:
    """``--max-new-tokens`` against the context the target's config.json declares, before any load (a
    folder that cannot be read is left to the target's loader to refuse)."""
    from ..checkpoint_files import MAX_CONFIG_BYTES, read_json
    from ..engine.context import check_context, target_context

    try:
        config = read_json(Path(target).expanduser() / "config.json", "target config", MAX_CONFIG_BYTES, "")
    except (DsparkHarvestError, RuntimeError):
        return
    check_context(target_context(config), [], max_new_tokens)


def check(args: argparse.Namespace) -> CheckReport:
    """Run the check described by ``args``; returns the report (raises the typed errors)."""
    import torch

    from ..engine.context import check_context, target_context

    checked = check_arguments(args)
    if checked.threads is not None:
        torch.set_num_threads(checked.threads)
    dtype = getattr(torch, args.dtype)

    from ..embedded import EMBEDDED

    if args.target is None:
        target_path, drafts = str(EMBEDDED.target), list(EMBEDDED.drafters.values())
    else:
        target_path, drafts = args.target, [Path(args.draft)]
    cfgs = _censuses(drafts)  # the census first: a refused drafter should not cost a model load
    _check_max_new_tokens(target_path, args.max_new_tokens)  # nor --max-new-tokens past the context
    target, tokenizer = load_target(target_path, checked.device, dtype)
    drafters = [
        load_drafter_for(Path(p).name, cfg, target, tokenizer, checked.device, dtype)
        for p, cfg in zip(drafts, cfgs, strict=True)
    ]
    prompts = encode_prompts(tokenizer, (args.prompt or list(EMBEDDED.prompts))[: args.num_prompts])
    context, block = target_context(target.config.to_dict()), max(c.block_size or 0 for c in cfgs)
    check_context(context, [len(p) for p in prompts], args.max_new_tokens, block)  # before any prefill
    with memory_guard("measuring"):
        runs, ar_tps, wall = measure(
            target, drafters, prompts, args.max_new_tokens, progress=not args.no_progress
        )
    settings = Settings(
        target=target_path,
        embedded=args.target is None,
        device=str(checked.device),
        dtype=args.dtype,
        prompts=len(prompts),
        max_new_tokens=args.max_new_tokens,
        threads=torch.get_num_threads(),
        wall_s=wall,
    )
    return build_report(drafters, runs, ar_tps, settings, checked.env_value)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``check``; returns the exit code (0; 1 if a run was not exact; 2 on a refusal)."""
    out = sys.stdout if out is None else out
    try:
        report = check(args)
        if args.plot:
            plot(report, args.plot)
    except DsparkHarvestError as exc:
        return refuse(exc, "check", args.json, out)
    emit(out, args.json, report.to_json, lambda: format_report(report))
    if args.plot and not args.json:
        print(f"\nplot written to {args.plot}", file=out)
    return EXIT_OK if report.exact else EXIT_NOT_EXACT


__all__ = ["EXIT_OK", "EXIT_NOT_EXACT", "EXIT_REFUSED", "add_parser", "check", "run"]
