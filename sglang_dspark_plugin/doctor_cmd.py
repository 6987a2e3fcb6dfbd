"""``dspark-harvest doctor [--json]``: check the installed sglang against the plugin's contract.

Exits 0 when sglang is installed, every hook is present, and ``DSPARK_HARVEST`` registers through the
entry point; 1 otherwise. sglang is imported only when the command runs, never when the CLI loads.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .commands import EXIT_OK, add_command, emit

EXIT_PROBLEM = 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``doctor`` on the ``dspark-harvest`` subparsers."""
    return add_command(
        subparsers,
        "doctor",
        help="check the installed sglang: version, every hook the plugin relies on, registration",
        description=(
            "Print the sglang version (or 'not installed'), each class/method/signature the plugin "
            "relies on as OK or MISSING, and whether DSPARK_HARVEST is registered through the "
            "sglang.srt.plugins entry point. Exit status 1 when anything is missing."
        ),
        run=run,
    )


def run(args: argparse.Namespace) -> int:
    """Run the doctor and print its report; returns the exit code."""
    from .sglang_plugin.doctor import doctor_report, format_report

    report = doctor_report()
    emit(sys.stdout, args.json, lambda: report, lambda: format_report(report), sort_keys=True)
    return EXIT_OK if report["ok"] else EXIT_PROBLEM


__all__ = ["add_parser", "run"]
