"""``dspark-harvest doctor``: is the installed sglang one the plugin can serve with?

Reports the sglang version (or that it is not installed), every contract hook OK or missing (the
plugin's and the workers'), and whether ``DSPARK_HARVEST`` is registered through the entry point the
way sglang registers it: ``sglang.srt.plugins.load_plugins()`` then ``from_string``. sglang is imported
inside ``doctor_report`` only, so this module imports without it.
"""

from __future__ import annotations

import importlib.util
from importlib import metadata
from typing import Any

from ..serving.topology import ARMS, topology_line
from .contract import SUPPORTED_SGLANG, check_contract, sglang_version
from .resolution import ALGORITHM

ENTRY_POINT_GROUP = "sglang.srt.plugins"
ENTRY_POINT_NAME = "dspark_harvest"


def _entry_point() -> str | None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == ENTRY_POINT_NAME:
            return ep.value
    return None


def doctor_report() -> dict[str, Any]:
    """The doctor's findings as a JSON-able dict; ``ok`` is False when anything is missing."""
    version = sglang_version()
    report: dict[str, Any] = {
        "sglang": version,
        "supported_versions": list(SUPPORTED_SGLANG),
        "version_supported": version in SUPPORTED_SGLANG,
        "entry_point": _entry_point(),
        "hooks": [],
        "registered": False,
        "registered_class": None,
        "problems": [],
        "topologies": {},
    }
    problems: list[str] = report["problems"]
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
        report["ok"] = False
        return report
    if not report["version_supported"]:
        problems.append(
            f"sglang {version} is not a tested version ({', '.join(SUPPORTED_SGLANG)}); the plugin "
            "registers if every hook below is OK"
        )

    report["topologies"] = {arm: topology_line(version, arm) for arm in ARMS}
    try:
        statuses = check_contract()
    except Exception as err:  # noqa: BLE001 - report, do not crash the doctor
        problems.append(f"the contract check itself failed: {err!r}")
        statuses = []
    report["hooks"] = [s.to_json() for s in statuses]
    missing = [s for s in statuses if not s.ok]
    for s in missing:
        problems.append(f"hook {s.target}: {s.problem}")

    try:
        from sglang.srt.plugins import load_plugins
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

        load_plugins()
        algo = SpeculativeAlgorithm.from_string(ALGORITHM)
        report["registered"] = True
        report["registered_class"] = f"{type(algo).__module__}.{type(algo).__qualname__}"
    except Exception as err:  # noqa: BLE001 - "not registered" is the finding, whatever the cause
        problems.append(f"{ALGORITHM} is not registered after load_plugins(): {err}")

    # An untested version passes when every hook is OK, the same rule as register().
    report["ok"] = bool(report["entry_point"] and report["registered"] and not missing)
    return report


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of ``doctor_report()``."""
    lines = []
    version = report["sglang"] or "not installed"
    tested = (
        ""
        if report["sglang"] is None
        else (" (tested)" if report["version_supported"] else " (NOT a tested version)")
    )
    lines.append(f"sglang: {version}{tested}; tested versions: {', '.join(report['supported_versions'])}")
    lines.append(f"entry point {ENTRY_POINT_GROUP}:{ENTRY_POINT_NAME}: {report['entry_point'] or 'MISSING'}")
    for hook in report["hooks"]:
        status = "OK     " if hook["ok"] else "MISSING"
        detail = "" if hook["ok"] else f"  ({hook['problem']})"
        lines.append(f"  {status} {hook['hook']}{detail}")
    registered = f"yes ({report['registered_class']})" if report["registered"] else "NO"
    lines.append(f"{ALGORITHM} registered through the entry point: {registered}")
    lines += list(report.get("topologies", {}).values())
    for problem in report["problems"]:
        lines.append(f"problem: {problem}")
    lines.append("doctor: OK" if report["ok"] else "doctor: FAILED")
    return "\n".join(lines)


__all__ = ["doctor_report", "format_report", "ENTRY_POINT_GROUP", "ENTRY_POINT_NAME"]
