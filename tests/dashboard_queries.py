"""What the shipped Grafana dashboard queries, read with a real PromQL parser (``promql_parser``), checked
against a Prometheus exposition: every series a panel selects must be exported, with every label the
query groups by, matches on, or shows in its legend.

Used by ``tests/telemetry/test_dashboard.py`` (the plugin's own registry) and
``tests/sglang/test_served_load.py`` (a real launch's ``/metrics``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import promql_parser

from sglang_dspark_plugin.cli.configs import CONFIGS

DASHBOARD = CONFIGS / "dspark_harvest_grafana.json"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__interval": "1m", "$__range": "1h"}
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass
class Query:
    """One panel target: its text, the series it selects, and the labels it needs."""

    panel: str
    expr: str
    selectors: dict[str, set[str]] = field(default_factory=dict)  # metric -> labels it must carry
    any_of: list[tuple[str, set[str]]] = field(default_factory=list)  # (label, metrics): one carries it


def queries(path: Path = DASHBOARD) -> list[Query]:
    """Every target of every panel, parsed."""
    found = []
    for panel in json.loads(path.read_text())["panels"]:
        for target in panel["targets"]:
            text = target["expr"]
            for name, value in GRAFANA_VARIABLES.items():
                text = text.replace(name, value)
            q = Query(panel["title"], text)
            names = _walk(promql_parser.parse(text), set(), q)
            for label in _LEGEND.findall(target.get("legendFormat", "")):
                q.any_of.append((label, names))
            found.append(q)
    return found


def _walk(node: Any, grouping: set[str], q: Query) -> set[str]:
    """The metric names under ``node``; each selector needs its matchers' labels and ``grouping`` (the
    ``by`` labels of the aggregation around it)."""
    kind = type(node).__name__
    if kind == "VectorSelector":
        labels = {m.name for m in node.matchers.matchers if m.name != "__name__"}
        q.selectors.setdefault(node.name, set()).update(labels | grouping)
        return {node.name}
    if kind == "MatrixSelector":
        return _walk(node.vector_selector, grouping, q)
    if kind == "AggregateExpr":
        modifier = node.modifier
        by = set(modifier.labels) if modifier is not None and str(modifier).startswith("by") else set()
        return _walk(node.expr, by, q)
    if kind == "BinaryExpr":
        names = _walk(node.lhs, grouping, q) | _walk(node.rhs, grouping, q)
        matching = getattr(node.modifier, "matching", None) if node.modifier is not None else None
        for label in getattr(matching, "labels", None) or []:
            q.any_of.append((label, names))
        return names
    if kind == "Call":
        return set().union(*(_walk(a, grouping, q) for a in node.args)) if node.args else set()
    if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        return _walk(node.expr, grouping, q)
    if kind in ("NumberLiteral", "StringLiteral"):
        return set()
    raise AssertionError(f"a PromQL node this check does not read: {kind} in {q.expr}")


def exported(exposition: str) -> dict[str, set[str]]:
    """Sample name -> the label names its samples carry, from a Prometheus text exposition."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(exposition):
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels)
    return found


def misses(exposition: str, prefix: str = "", path: Path = DASHBOARD) -> list[str]:
    """What the dashboard's queries (of metrics named ``prefix...``) need and ``exposition`` lacks."""
    have = exported(exposition)
    wrong = []
    for q in queries(path):
        for metric, labels in q.selectors.items():
            if not metric.startswith(prefix):
                continue
            if metric not in have:
                wrong.append(f"{q.panel}: {metric} is not exported")
            elif labels - have[metric]:
                wrong.append(f"{q.panel}: {metric} lacks label(s) {sorted(labels - have[metric])}")
        for label, names in q.any_of:
            metrics = sorted(m for m in names if m.startswith(prefix))
            if metrics and not any(label in have.get(m, set()) for m in metrics):
                wrong.append(f"{q.panel}: no series of {metrics} carries the label {label!r}")
    return wrong


__all__ = ["DASHBOARD", "Query", "queries", "exported", "misses"]
