"""``dspark-harvest declare DRAFT --out DIR``: a copy of a draft whose config.json states the census's
decision in the keys other engines read (``census.declaration``); the source is never modified."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..commands import EXIT_OK, add_command, emit, refuse, table_lines
from ..errors import DsparkHarvestError, printable

EPILOG = """examples:
  dspark-harvest declare path/to/draft --out path/to/draft-declared
  dspark-harvest declare org/draft --out declared --copy --json

exit codes: 0 written; 2 refused (contradictory evidence, no signal at all, no block size, an --out
that exists); nothing is written on a refusal.
"""


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``declare`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "declare",
        help="write a copy of a draft whose config.json declares its harvest for every engine",
        description=(
            "Run the census on DRAFT and write a new folder whose config.json states the decision as "
            "sample_from_anchor (top level and dflash_config) and the block size where the source leaves "
            "it out; every other file is a symbolic link to the source's (--copy: a copy). Refused where "
            "the census refuses, and for a draft with no signal at all. MEMRA_DSPARK_HARVEST is not read."
        ),
        run=run,
        epilog=EPILOG,
    )
    parser.add_argument("path", metavar="DRAFT", help="draft folder, or a hub id in the local HF cache")
    parser.add_argument("--out", metavar="DIR", required=True, help="the new folder (must not exist)")
    parser.add_argument("--copy", action="store_true", help="copy the other files instead of linking them")
    parser.add_argument(
        "--block-size", type=int, metavar="N", help="the trained width, for a source that gives none"
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Declare, then print what was written and what each engine serves before and after."""
    from ..census import census
    from ..census.declaration import declare

    try:
        declaration = declare(census(args.path), args.out, block_size=args.block_size, copy_files=args.copy)
    except DsparkHarvestError as exc:
        return refuse(exc, "declare", args.json, sys.stdout if args.json else sys.stderr)
    report = with_engines(declaration)
    emit(sys.stdout, args.json, lambda: report, lambda: text(report))
    return EXIT_OK


def with_engines(declaration: Any) -> dict[str, Any]:
    """The declaration's report with the engine table: what each release's plain builtins serve from
    the source and from the copy (``releases.plain``), against what the draft was trained for."""
    from ..harvest import DsparkHarvest
    from ..releases.plain import Trained, engine_table

    report = declaration.to_json()
    harvest = DsparkHarvest.from_name(declaration.harvest)
    assert harvest is not None  # declare writes the census's decision: one of the two names
    trained = Trained(harvest, report["block_size"])
    report["trained"] = {
        "layout": trained.layout,
        "drafts": trained.drafts,
        "verify_window": trained.drafts + 1,
    }
    report["engines"] = engine_table(declaration.config, trained, declaration.source_config)
    return report


def text(report: dict[str, Any]) -> str:
    """The text form of a declaration's ``--json`` report."""
    written = ", ".join(f"{key}={str(value).lower()}" for key, value in report["written"].items())
    plural = "" if report["files"] == 1 else "s"
    trained = report["trained"]
    lines = [
        f"declared: {printable(report['out'])}",
        f"from:     {printable(report['source'])} "
        f"({report['files']} other file{plural}, {report['files_are']})",
        f"harvest:  {report['harvest']} ({report['layout']}; trained block {report['block_size']}: "
        f"{trained['drafts']} drafts, window {trained['verify_window']})",
        f"wrote:    {written or 'nothing new (the source already declared it all)'}",
        "",
        "what plain sglang serves from the copy (the source's reading where it differs), and what makes it "
        "serve what was trained:",
    ]
    rows = [
        [
            row["engine"],
            row["serves"]
            if row["before"] in (None, row["serves"])
            else f"{row['serves']} (source: {row['before']})",
            _mark(row),
        ]
        for row in report["engines"]
    ]
    lines += ["  " + line for line in table_lines(["engine", "serves", "to serve what was trained"], rows)]
    return "\n".join(lines)


def _mark(row: dict[str, Any]) -> str:
    if not row["versions"]:  # an open PR's row: its layout only
        return f"{'right' if row['right'] else 'WRONG' if row['starts'] else 'REFUSED'} ({row['fix']})"
    if row["right"]:
        return "right"
    return f"{'WRONG' if row['starts'] else 'REFUSED'} -> {row['fix']}"


__all__ = ["add_parser", "run", "text"]
