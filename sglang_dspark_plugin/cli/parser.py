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

from ..errors import UsageError
from .output import EXIT_BROKEN_PIPE, EXIT_OUTPUT_ERROR, OutputError, guarded_output, report_output_error

EXIT_USAGE = 2
COMMANDS = ("inspect", "check", "declare", "report", "doctor", "configs")

EPILOG = f"""examples:
  dspark-harvest inspect path/to/draft          which convention a checkpoint declares (reads no weights)
  dspark-harvest inspect org/draft --json       a hub id from the local Hugging Face cache, as JSON
  dspark-harvest check                          both harvests on the embedded tiny models, no download
  dspark-harvest check --target T --draft D     measure your drafter before deploying it
  dspark-harvest declare D --out D2             a copy of D declaring its harvest in the keys engines read
  dspark-harvest report server.log              a server log's rounds, alarms and probe verdicts, a verdict
  dspark-harvest doctor                         is the installed sglang one the plugin can serve with?
  dspark-harvest configs dspark_harvest.yaml    the installed path of a shipped sglang --config file

exit codes: 0 success; 2 refused (usage or a checkpoint; the message says what to fix); check adds
1 not exact, 3 the served harvest contradicts the measurement, 4 inconclusive (see check --help);
report: 3 a measured misalignment, 5 a collapse with another cause (see report --help);
doctor exits 1 when something is missing; {EXIT_BROKEN_PIPE} the reader of the output went away (a closed
pipe); {EXIT_OUTPUT_ERROR} the output could not be written (a full disk).
"""


class _ArgumentError(UsageError):
    """argparse's refusal, with the usage line of the parser that refused."""

    def __init__(self, message: str, *, where: str, usage: str) -> None:
        super().__init__(message, where=where)
        self.usage = usage


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UsageError`` instead of printing and exiting (subparsers inherit it)."""

    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(
            f"{message} (see {self.prog} --help)", where=self.prog, usage=self.format_usage()
        )


def build_parser() -> argparse.ArgumentParser:
    from ..version import __version__

    parser = _Parser(
        prog="dspark-harvest",
        description="Serve DFlash-family drafters with the draft-row harvest their training used.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="{" + ",".join(COMMANDS) + "}")

    from . import check, configs, declare, doctor, inspect, report

    for command in (inspect, check, declare, report, doctor, configs):
        command.add_parser(sub)
    return parser


def _refuse_usage(exc: UsageError, argv: list[str]) -> int:
    # argparse has not parsed --json yet when it refuses; honour it where it was given
    command = next((a for a in argv if a in COMMANDS), "")
    if "--json" in argv:
        print(exc.render(command, as_json=True))
    else:
        if isinstance(exc, _ArgumentError):
            print(exc.usage, end="", file=sys.stderr)
        print(exc.render(command, as_json=False), file=sys.stderr)
    return EXIT_USAGE


def _main(argv: list[str]) -> int:
    parser = build_parser()
    if not argv:  # a bare command: what it does and how to call it, not only what is missing
        print(parser.format_help(), end="", file=sys.stderr)
        return EXIT_USAGE
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _refuse_usage(exc, argv)
    return int(args.func(args) or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dspark-harvest`` console script; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with guarded_output() as (stdout, stderr):
        try:
            try:
                code = _main(argv)
            except SystemExit as done:  # --help, --version: argparse printed and exits
                code = done.code if isinstance(done.code, int) else 0
            sys.stdout.flush()
            return code
        except OutputError as exc:
            return report_output_error(exc, stdout, stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
