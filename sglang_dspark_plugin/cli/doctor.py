"""``dspark-harvest doctor [--json]``: check the installed sglang against the plugin's contract.

Exits 0 when sglang is installed, every hook is present, ``DSPARK_HARVEST`` registers through the
entry point and ``SGLANG_PLUGINS`` does not exclude it; 1 otherwise. It also prints the environment
(Python, platform, torch and its CUDA, transformers, huggingface_hub). sglang is imported only inside
the sglang glue package, when the command runs; a broken sglang install (unreadable metadata, a
malformed entry_points.txt, an import error) is a finding, never a traceback, and every string it
holds is escaped before it is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import warnings as warnings_module
from collections.abc import Iterator
from typing import Any

from ..errors import printable
from .commands import EXIT_OK, add_command, emit
from .doctor_env import PLUGINS_VAR, environment, plugins_setting, unreadable_distributions

EXIT_PROBLEM = 1


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``doctor`` on the ``dspark-harvest`` subparsers."""
    return add_command(
        subparsers,
        "doctor",
        help="check the installed sglang: version, every hook the plugin relies on, registration",
        description=(
            "Print the environment (Python, platform, torch and its CUDA, transformers, "
            "huggingface_hub), the sglang version (or 'not installed'), each class/method/signature "
            "the plugin relies on as OK or MISSING, whether DSPARK_HARVEST is registered through the "
            f"sglang.srt.plugins entry point, and whether {PLUGINS_VAR} excludes it. Exit status 1 "
            "when anything is missing."
        ),
        run=run,
    )


@contextlib.contextmanager
def _sglang_logs(errors: list[str], warnings: list[str]) -> Iterator[None]:
    """sglang's warnings and errors during the check, collected to be printed escaped (a plugin sglang
    fails to load logs an error with its traceback, whose text may hold anything)."""

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.ERROR:
                errors.append(f"sglang logged an error: {record.getMessage()}")
            elif record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logger = logging.getLogger("sglang")
    handler, propagate = Collect(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        with warnings_module.catch_warnings(record=True) as caught:  # sglang's import-time warnings too
            yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate
    warnings += [f"{w.category.__name__}: {w.message}" for w in caught]


def _unreadable_report(exc: Exception) -> dict[str, Any]:
    """The report when sglang's install cannot even be read."""
    from ..sglang_plugin.contract import SUPPORTED_SGLANG

    return {
        "sglang": None,
        "supported_versions": list(SUPPORTED_SGLANG),
        "version_supported": False,
        "entry_point": None,
        "hooks": [],
        "registered": False,
        "registered_class": None,
        "problems": [
            f"the installed packages cannot be read ({type(exc).__name__}: {exc}); reinstall sglang"
        ],
        "ok": False,
    }


def doctor(entry_point_name: str) -> dict[str, Any]:
    """The doctor's whole report: the sglang glue's, with the environment and SGLANG_PLUGINS."""
    from ..sglang_plugin.doctor import doctor_report

    errors: list[str] = []
    warnings: list[str] = []
    try:
        with _sglang_logs(errors, warnings):
            report = doctor_report()
    except Exception as exc:  # noqa: BLE001 - a broken sglang install is the finding, not a crash
        report = _unreadable_report(exc)
    report["problems"] += errors
    report["sglang_warnings"] = warnings
    broken = unreadable_distributions()
    report["problems"] += [f"unreadable distribution {d}: reinstall or remove it" for d in broken]
    report["environment"] = environment()
    report["sglang_plugins"] = plugins = plugins_setting(entry_point_name)
    if plugins["excludes_plugin"]:
        report["problems"].append(
            f"{PLUGINS_VAR}={plugins['value']!r} excludes {entry_point_name!r}: sglang will not load this "
            f"plugin; add {entry_point_name} to it or unset it"
        )
    report["ok"] = bool(report["ok"] and not broken and not plugins["excludes_plugin"])
    return report


def format_text(report: dict[str, Any]) -> str:
    """The environment lines, then the sglang glue's own text, every line escaped."""
    from ..sglang_plugin.doctor import format_report

    lines = [f"{name}: {value}" for name, value in report["environment"].items()]
    plugins = report["sglang_plugins"]
    lines.append(
        f"{PLUGINS_VAR}: {'unset (every plugin loads)' if plugins['value'] is None else plugins['value']}"
    )
    lines += [f"sglang warning: {warning}" for warning in report["sglang_warnings"]]
    lines += format_report(report).splitlines()
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    """Run the doctor and print its report; returns the exit code."""
    from ..sglang_plugin.doctor import ENTRY_POINT_NAME

    report = doctor(ENTRY_POINT_NAME)
    emit(sys.stdout, args.json, lambda: report, lambda: format_text(report), sort_keys=True)
    return EXIT_OK if report["ok"] else EXIT_PROBLEM


__all__ = ["add_parser", "doctor", "format_text", "run"]
