"""``dspark-harvest``: inspect a checkpoint, check it on the reference engine, doctor the sglang install.

Each subcommand lives in its own module and is imported only when used, so ``inspect`` never pays
for torch and nothing here imports sglang (``doctor`` imports it inside the sglang glue package).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="dspark-harvest",
        description="Serve DFlash-family drafters with the draft-row harvest their training used.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    from . import inspect_cmd

    inspect_cmd.add_parser(sub)
    try:
        from . import check_cmd
    except ImportError:  # pragma: no cover - the reference engine lands separately
        check_cmd = None
    if check_cmd is not None:
        check_cmd.add_parser(sub)
    try:
        from . import doctor_cmd
    except ImportError:  # pragma: no cover - the sglang glue lands separately
        doctor_cmd = None
    if doctor_cmd is not None:
        doctor_cmd.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``dspark-harvest`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
