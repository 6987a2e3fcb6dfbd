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
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from ..commands import EXIT_OK, add_command, emit
from ..errors import printable
from ..releases import TESTED as SUPPORTED_SGLANG
from ..releases import installed_sglang as sglang_version
from ..serving import ALGORITHM
from ..serving.topology import ARMS, topology_line
from ..util.contract_check import HookStatus

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


@dataclass(frozen=True)
class PluginsSetting:
    """``SGLANG_PLUGINS`` as sglang reads it (comma-separated names; unset or empty: load every plugin)."""

    value: str | None
    excludes_plugin: bool

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "excludes_plugin": self.excludes_plugin}


def plugins_setting(entry_point_name: str) -> PluginsSetting:
    """``SGLANG_PLUGINS`` now, and whether it leaves out ``entry_point_name``."""
    value = os.environ.get(PLUGINS_VAR)
    allowed = {name.strip() for name in (value or "").split(",") if name.strip()}
    return PluginsSetting(value, bool(value) and entry_point_name not in allowed)


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


@dataclass
class DoctorReport:
    """What ``doctor`` found, rendered by ``to_json`` (``--json``) and ``text``; filled by
    ``sglang_report`` (sglang's part) and ``doctor`` (the environment, SGLANG_PLUGINS)."""

    sglang: str | None  # the installed version; None: not installed (or unreadable)
    problems: list[str] = field(default_factory=list)
    entry_point: str | None = None
    hooks: list[HookStatus] = field(default_factory=list)  # every contract entry, OK or missing
    registered_class: str | None = None  # None: DSPARK_HARVEST not registered
    topologies: dict[str, str] = field(default_factory=dict)  # arm -> the topology line
    sglang_warnings: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    plugins: PluginsSetting = PluginsSetting(None, False)
    broken: list[str] = field(default_factory=list)  # unreadable distributions

    @property
    def version_supported(self) -> bool:
        return self.sglang in SUPPORTED_SGLANG

    @property
    def ok(self) -> bool:
        """Registered through the entry point, every hook present, nothing broken or excluded (an
        untested version passes when every hook is OK, the rule ``register()`` applies)."""
        hooks_ok = all(h.ok for h in self.hooks)
        registered = self.entry_point is not None and self.registered_class is not None
        return registered and hooks_ok and not self.broken and not self.plugins.excludes_plugin

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang": self.sglang,
            "supported_versions": list(SUPPORTED_SGLANG),
            "version_supported": self.version_supported,
            "entry_point": self.entry_point,
            "hooks": [h.to_json() for h in self.hooks],
            "registered": self.registered_class is not None,
            "registered_class": self.registered_class,
            "problems": self.problems,
            "topologies": self.topologies,
            "ok": self.ok,
            "sglang_warnings": self.sglang_warnings,
            "environment": self.environment,
            "sglang_plugins": self.plugins.to_json(),
        }

    def sglang_lines(self) -> list[str]:
        """The sglang part of the report as text."""
        tested = " (tested)" if self.version_supported else " (NOT a tested version)"
        tested = "" if self.sglang is None else tested
        versions = ", ".join(SUPPORTED_SGLANG)
        lines = [
            f"sglang: {self.sglang or 'not installed'}{tested}; tested versions: {versions}",
            f"entry point {ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}: {self.entry_point or 'MISSING'}",
        ]
        lines += [
            f"  {'OK     ' if h.ok else 'MISSING'} {h.target}" + ("" if h.ok else f"  ({h.problem})")
            for h in self.hooks
        ]
        registered = "NO" if self.registered_class is None else f"yes ({self.registered_class})"
        lines.append(f"{ALGORITHM} registered through the entry point: {registered}")
        lines += list(self.topologies.values())
        lines += [f"problem: {problem}" for problem in self.problems]
        lines.append("doctor: OK" if self.ok else "doctor: FAILED")
        return lines

    def text(self) -> str:
        """The environment lines, then the sglang report's lines, every line escaped."""
        lines = [f"{name}: {value}" for name, value in self.environment.items()]
        value = self.plugins.value
        lines.append(f"{PLUGINS_VAR}: {'unset (every plugin loads)' if value is None else value}")
        lines += [f"sglang warning: {warning}" for warning in self.sglang_warnings]
        lines += self.sglang_lines()
        return "\n".join(printable(line) for line in lines)


def sglang_report() -> DoctorReport:
    """The installed sglang against the plugin: its version, every contract entry (the plugin's and the
    workers') OK or missing, and whether ``DSPARK_HARVEST`` registers the way sglang registers it
    (``load_plugins()``, then ``from_string``)."""
    version = sglang_version()
    report = DoctorReport(version, entry_point=_entry_point())
    problems = report.problems
    if report.entry_point is None:
        problems.append(
            f"entry point {ENTRY_POINT_NAME!r} missing from group {ENTRY_POINT_GROUP!r}: reinstall the "
            "package (pip install -e . or pip install sglang-dspark-plugin)"
        )
    if version is None or importlib.util.find_spec("sglang") is None:
        report.sglang = None
        problems.append(
            "sglang is not installed: from a checkout of this package, pip install '.[sglang-0523]' "
            "(or '.[sglang-0517]')"
        )
        return report
    if not report.version_supported:
        problems.append(
            f"sglang {version} is not a tested version ({', '.join(SUPPORTED_SGLANG)}); the plugin "
            "registers if every hook below is OK"
        )
    report.topologies = {arm: topology_line(version, arm) for arm in ARMS}
    from ..sglang_plugin import contract, registered_class

    try:
        report.hooks = contract.check_contract()
    except Exception as err:  # noqa: BLE001 - report, do not crash the doctor: a failed entry
        why = f"the contract check itself failed: {err!r}"
        report.hooks = [HookStatus("sglang_dspark_plugin.sglang_plugin", "contract", None, False, why)]
    problems += [f"hook {s.target}: {s.problem}" for s in report.hooks if not s.ok]
    try:
        report.registered_class = registered_class()
    except Exception as err:  # noqa: BLE001 - "not registered" is the finding, whatever the cause
        problems.append(f"{ALGORITHM} is not registered after load_plugins(): {err}")
    return report


def doctor(entry_point_name: str = ENTRY_POINT_NAME) -> DoctorReport:
    """The doctor's whole report: sglang's, with the environment and SGLANG_PLUGINS."""
    errors: list[str] = []
    warnings: list[str] = []
    try:
        with _sglang_logs(errors, warnings):
            report = sglang_report()
    except Exception as exc:  # noqa: BLE001 - a broken sglang install is the finding, not a crash
        why = f"the installed packages cannot be read ({type(exc).__name__}: {exc}); reinstall sglang"
        report = DoctorReport(None, [why])
    report.problems += errors
    report.sglang_warnings = warnings
    report.broken = unreadable_distributions()
    report.problems += [f"unreadable distribution {d}: reinstall or remove it" for d in report.broken]
    report.environment = environment_facts()
    report.plugins = plugins = plugins_setting(entry_point_name)
    if plugins.excludes_plugin:
        report.problems.append(
            f"{PLUGINS_VAR}={plugins.value!r} excludes {entry_point_name!r}: sglang will not load this "
            f"plugin; add {entry_point_name} to it or unset it"
        )
    return report


def run(args: argparse.Namespace) -> int:
    """Run the doctor and print its report; returns the exit code."""
    report = doctor()
    emit(sys.stdout, args.json, report.to_json, report.text, sort_keys=True)
    return EXIT_OK if report.ok else EXIT_PROBLEM


__all__ = [
    "DoctorReport",
    "PluginsSetting",
    "add_parser",
    "doctor",
    "sglang_report",
    "run",
    "ENTRY_POINT_NAME",
]
