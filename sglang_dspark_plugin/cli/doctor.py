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
import importlib.util
import logging
import os
import platform
import sys
import warnings as warnings_module
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from ..commands import EXIT_OK, add_command, emit
from ..errors import printable
from ..serving import ALGORITHM
from ..serving.releases import TESTED as SUPPORTED_SGLANG
from ..serving.releases import installed_sglang as sglang_version
from ..serving.topology import ARMS, topology_line

EXIT_PROBLEM = 1


# -- what the doctor reports besides sglang: the environment, SGLANG_PLUGINS, unreadable distributions.
# Read from package metadata and the environment only (torch is imported for its CUDA facts); every
# value may come from a broken install, so each is read defensively and escaped before it is printed.

PLUGINS_VAR = "SGLANG_PLUGINS"  # sglang's whitelist of general plugins, by entry-point name
PACKAGES = ("transformers", "huggingface_hub", "safetensors")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
    except Exception as exc:  # noqa: BLE001 - a broken METADATA is the finding, whatever its error
        return f"unreadable metadata ({type(exc).__name__}: {printable(exc, 200)})"


def _torch() -> str:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a torch that cannot import is the finding
        return f"cannot import ({type(exc).__name__}: {printable(exc, 200)})"
    cuda = torch.version.cuda
    if cuda is None:
        return f"{torch.__version__} (CPU build)"
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"{torch.__version__} (CUDA {cuda}, {visible} GPU(s) visible)"


def environment_facts() -> dict[str, str]:
    """The lines ``transformers env`` prints: Python, platform, torch and its CUDA, the HF packages."""
    facts = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "torch": _torch(),
    }
    facts.update({name: _version(name) for name in PACKAGES})
    return facts


def plugins_setting(entry_point_name: str) -> dict[str, Any]:
    """``SGLANG_PLUGINS`` as sglang reads it (comma-separated names; unset or empty: load every plugin)."""
    value = os.environ.get(PLUGINS_VAR)
    allowed = {name.strip() for name in (value or "").split(",") if name.strip()}
    return {"value": value, "excludes_plugin": bool(value) and entry_point_name not in allowed}


def unreadable_distributions() -> list[str]:
    """Installed distributions whose METADATA or entry_points.txt cannot be read (sglang's plugin
    discovery reads every distribution's entry points)."""
    found = []
    for dist in metadata.distributions():
        try:
            _ = dist.metadata["Name"], dist.version, list(dist.entry_points)
        except Exception as exc:  # noqa: BLE001 - any error here is a broken distribution
            where = getattr(dist, "_path", None) or "a distribution"
            found.append(f"{where}: {type(exc).__name__}: {exc}")
    return found


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


ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "dspark_harvest"


def _entry_point() -> str | None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == ENTRY_POINT_NAME:
            return ep.value
    return None


def _base_report(version: str | None, problems: list[str]) -> dict[str, Any]:
    return {
        "sglang": version,
        "supported_versions": list(SUPPORTED_SGLANG),
        "version_supported": version in SUPPORTED_SGLANG,
        "entry_point": None,
        "hooks": [],
        "registered": False,
        "registered_class": None,
        "problems": problems,
        "topologies": {},
        "ok": False,
    }


def sglang_report() -> dict[str, Any]:
    """The installed sglang against the plugin: its version, every contract entry (the plugin's and the
    workers') OK or missing, and whether ``DSPARK_HARVEST`` registers the way sglang registers it
    (``load_plugins()``, then ``from_string``); ``ok`` is False when anything is missing."""
    version = sglang_version()
    report = _base_report(version, [])
    problems: list[str] = report["problems"]
    report["entry_point"] = _entry_point()
    if report["entry_point"] is None:
        problems.append(
            f"entry point {ENTRY_POINT_NAME!r} missing from group {ENTRY_POINT_GROUP!r}: reinstall the "
            "package (pip install -e . or pip install sglang-dspark-plugin)"
        )
    if version is None or importlib.util.find_spec("sglang") is None:
        report["sglang"] = None
        problems.append(
            "sglang is not installed: from a checkout of this package, pip install '.[sglang-0523]' "
            "(or '.[sglang-0517]')"
        )
        return report
    if not report["version_supported"]:
        problems.append(
            f"sglang {version} is not a tested version ({', '.join(SUPPORTED_SGLANG)}); the plugin "
            "registers if every hook below is OK"
        )
    report["topologies"] = {arm: topology_line(version, arm) for arm in ARMS}
    from ..sglang_plugin import contract, registered_class

    try:
        statuses = contract.check_contract()
    except Exception as err:  # noqa: BLE001 - report, do not crash the doctor
        problems.append(f"the contract check itself failed: {err!r}")
        statuses = []
    report["hooks"] = [s.to_json() for s in statuses]
    missing = [s for s in statuses if not s.ok]
    problems += [f"hook {s.target}: {s.problem}" for s in missing]
    try:
        report["registered_class"] = registered_class()
        report["registered"] = True
    except Exception as err:  # noqa: BLE001 - "not registered" is the finding, whatever the cause
        problems.append(f"{ALGORITHM} is not registered after load_plugins(): {err}")
    # An untested version passes when every hook is OK, the same rule as register().
    report["ok"] = bool(report["entry_point"] and report["registered"] and not missing)
    return report


def doctor(entry_point_name: str = ENTRY_POINT_NAME) -> dict[str, Any]:
    """The doctor's whole report: sglang's, with the environment and SGLANG_PLUGINS."""
    errors: list[str] = []
    warnings: list[str] = []
    try:
        with _sglang_logs(errors, warnings):
            report = sglang_report()
    except Exception as exc:  # noqa: BLE001 - a broken sglang install is the finding, not a crash
        report = _base_report(
            None, [f"the installed packages cannot be read ({type(exc).__name__}: {exc}); reinstall sglang"]
        )
    report["problems"] += errors
    report["sglang_warnings"] = warnings
    broken = unreadable_distributions()
    report["problems"] += [f"unreadable distribution {d}: reinstall or remove it" for d in broken]
    report["environment"] = environment_facts()
    report["sglang_plugins"] = plugins = plugins_setting(entry_point_name)
    if plugins["excludes_plugin"]:
        report["problems"].append(
            f"{PLUGINS_VAR}={plugins['value']!r} excludes {entry_point_name!r}: sglang will not load this "
            f"plugin; add {entry_point_name} to it or unset it"
        )
    report["ok"] = bool(report["ok"] and not broken and not plugins["excludes_plugin"])
    return report


def sglang_lines(report: dict[str, Any]) -> list[str]:
    """The sglang part of the report as text."""
    version = report["sglang"] or "not installed"
    tested = " (tested)" if report["version_supported"] else " (NOT a tested version)"
    tested = "" if report["sglang"] is None else tested
    lines = [f"sglang: {version}{tested}; tested versions: {', '.join(report['supported_versions'])}"]
    lines.append(f"entry point {ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}: {report['entry_point'] or 'MISSING'}")
    for hook in report["hooks"]:
        status = "OK     " if hook["ok"] else "MISSING"
        detail = "" if hook["ok"] else f"  ({hook['problem']})"
        lines.append(f"  {status} {hook['hook']}{detail}")
    registered = f"yes ({report['registered_class']})" if report["registered"] else "NO"
    lines.append(f"{ALGORITHM} registered through the entry point: {registered}")
    lines += list(report.get("topologies", {}).values())
    lines += [f"problem: {problem}" for problem in report["problems"]]
    lines.append("doctor: OK" if report["ok"] else "doctor: FAILED")
    return lines


def format_text(report: dict[str, Any]) -> str:
    """The environment lines, then the sglang report's lines, every line escaped."""
    lines = [f"{name}: {value}" for name, value in report["environment"].items()]
    plugins = report["sglang_plugins"]
    lines.append(
        f"{PLUGINS_VAR}: {'unset (every plugin loads)' if plugins['value'] is None else plugins['value']}"
    )
    lines += [f"sglang warning: {warning}" for warning in report["sglang_warnings"]]
    lines += sglang_lines(report)
    return "\n".join(printable(line) for line in lines)


def run(args: argparse.Namespace) -> int:
    """Run the doctor and print its report; returns the exit code."""
    report = doctor()
    emit(sys.stdout, args.json, lambda: report, lambda: format_text(report), sort_keys=True)
    return EXIT_OK if report["ok"] else EXIT_PROBLEM


__all__ = ["add_parser", "doctor", "sglang_report", "format_text", "run", "ENTRY_POINT_NAME"]
