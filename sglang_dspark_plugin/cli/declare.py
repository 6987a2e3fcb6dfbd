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
        report = declare(census(args.path), args.out, block_size=args.block_size, copy_files=args.copy)
    except DsparkHarvestError as exc:
        return refuse(exc, "declare", args.json, sys.stdout if args.json else sys.stderr)
    emit(sys.stdout, args.json, report.to_json, lambda: text(report.to_json()))
    return EXIT_OK


def text(report: dict[str, Any]) -> str:
    """The text form of a declaration's ``--json`` report."""
    written = ", ".join(f"{key}={str(value).lower()}" for key, value in report["written"].items())
    plural = "" if report["files"] == 1 else "s"
    lines = [
        f"declared: {printable(report['out'])}",
        f"from:     {printable(report['source'])} "
        f"({report['files']} other file{plural}, {report['files_are']})",
        f"harvest:  {report['harvest']} ({report['layout']})",
        f"wrote:    {written or 'nothing new (the source already declared it all)'}",
        "",
        "what each engine that loads this architecture serves (before -> after the declaration):",
    ]
    rows = [
        [row["engine"], f"{row['before']} -> {row['serves']}", _mark(row, report["layout"]), row["reads"]]
        for row in report["engines"]
    ]
    lines += ["  " + line for line in table_lines(["engine", "serves", "after", "reads"], rows)]
    return "\n".join(lines)


def _mark(row: dict[str, Any], layout: str) -> str:
    if row["right"]:
        return "right"
    return "refuses" if row["serves"] == "refused" else f"WRONG (trained {layout})"


__all__ = ["add_parser", "run", "text"]
