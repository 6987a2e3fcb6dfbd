"""``dspark-harvest configs [NAME]``: where the shipped sglang ``--config`` files (and the Grafana
dashboard, ``dspark_harvest_grafana.json``) are installed.

The files live inside the package (``sglang_dspark_plugin/configs``; a checkout's ``configs/`` points
there), so an installed package has them too::

    python -m sglang.launch_server --config "$(dspark-harvest configs dspark_harvest.yaml)" ...
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..commands import EXIT_OK, add_command, emit, refuse
from ..errors import UsageError, printable

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def shipped() -> dict[str, Path]:
    """Every shipped file, by file name: the sglang --config YAMLs and the Grafana dashboard."""
    return {path.name: path for path in sorted([*CONFIGS.glob("*.yaml"), *CONFIGS.glob("*.json")])}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``configs`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "configs",
        help="print the installed path of the shipped sglang --config files and Grafana dashboard",
        description=(
            "Print the full path of each sglang --config YAML file shipped with the package, or of the "
            'one named, for use as: python -m sglang.launch_server --config "$(dspark-harvest configs '
            'dspark_harvest.yaml)" --model-path TARGET --speculative-draft-model-path DRAFT'
        ),
        run=run,
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="one file name, e.g. dspark_harvest.yaml")
    return parser


def run(args: argparse.Namespace) -> int:
    """Print the path(s); a name that is not shipped is refused with the names that are."""
    files = shipped()
    if args.name is not None and args.name not in files:
        error = UsageError(
            f"no shipped config named {printable(repr(args.name), 80)}; shipped: {', '.join(files)}.",
            where="configs NAME",
        )
        return refuse(error, "configs", args.json, sys.stdout)
    chosen = files if args.name is None else {args.name: files[args.name]}
    emit(
        sys.stdout,
        args.json,
        lambda: {name: str(path) for name, path in chosen.items()},
        lambda: "\n".join(str(path) for path in chosen.values()),
    )
    return EXIT_OK


__all__ = ["CONFIGS", "shipped", "add_parser", "run"]
