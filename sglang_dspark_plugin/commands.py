"""What the ``dspark-harvest`` subcommands share: registering one, printing its report or its refusal,
and laying out a text table."""

from __future__ import annotations

import argparse
import json
import textwrap
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from .errors import DsparkHarvestError

EXIT_OK = 0
EXIT_REFUSED = 2


JSON_HELP = "print one JSON object instead of text"
HELP_WIDTH = 100


def add_command(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str,
    run: Callable[..., int],
    json_flag: bool = True,
    epilog: str | None = None,
) -> argparse.ArgumentParser:
    """Register the subcommand ``name``, which ``run`` runs, with a ``--json`` flag unless told not to;
    its other arguments are the caller's to add. ``epilog`` (examples, exit codes) is printed as written."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help,
        description=textwrap.fill(description, HELP_WIDTH),  # filled here: the epilog is printed raw
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    if json_flag:
        parser.add_argument("--json", action="store_true", help=JSON_HELP)
    parser.set_defaults(func=run)
    return parser


def refuse(exc: DsparkHarvestError, command: str, as_json: bool, out: TextIO) -> int:
    """Print a refusal (its JSON form under ``--json``); returns the exit code of a refusal."""
    print(exc.render(command, as_json=as_json), file=out)
    return EXIT_REFUSED


def emit(
    out: TextIO,
    as_json: bool,
    json_form: Callable[[], Any],
    text_form: Callable[[], str],
    *,
    sort_keys: bool = False,
) -> None:
    """Print a report: one indented JSON object under ``--json``, else its text."""
    if as_json:
        print(json.dumps(json_form(), indent=2, default=str, sort_keys=sort_keys), file=out)
    else:
        print(text_form(), file=out)


def table_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """``header`` and ``rows`` as left-aligned columns, two spaces apart, no trailing blanks."""
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


__all__ = ["EXIT_OK", "EXIT_REFUSED", "JSON_HELP", "add_command", "refuse", "emit", "table_lines"]
