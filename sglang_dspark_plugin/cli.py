"""``dspark-harvest``: inspect a checkpoint, check it on the reference engine, doctor the sglang install.

Each subcommand lives in its own module, which imports its heavy dependencies only when it runs,
so ``inspect`` never pays for torch and nothing here imports sglang (``doctor`` imports it inside
the sglang glue package).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from .errors import UsageError

EXIT_USAGE = 2


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of printing and exiting (subparsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)", where=self.prog)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = _Parser(
        prog="dspark-harvest",
        description="Serve DFlash-family drafters with the draft-row harvest their training used.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from . import check_cmd, doctor_cmd, inspect_cmd

    for command in (inspect_cmd, check_cmd, doctor_cmd):
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dspark-harvest`` console script; returns the exit code."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        # argparse has not parsed --json yet when it refuses; honour it where it was given
        command = next((a for a in argv if a in ("inspect", "check", "doctor")), "")
        if "--json" in argv:
            print(exc.render(command, as_json=True))
        else:
            print(exc.render(command, as_json=False), file=sys.stderr)
        return EXIT_USAGE
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
