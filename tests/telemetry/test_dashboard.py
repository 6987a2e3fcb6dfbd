"""The shipped Grafana dashboard (``dspark-harvest configs dspark_harvest_grafana.json``): every query
parses as PromQL, and every series of the plugin's it selects is one the plugin exports, with the labels
the query uses. Here against the plugin's own registry; ``tests/sglang/test_served_load.py`` checks every
panel (sglang's series too) against a real launch's ``/metrics`` on both sglang versions."""

from __future__ import annotations

import contextlib
import io
import json

from dashboard_queries import DASHBOARD, misses, queries
from prometheus_client import CollectorRegistry, generate_latest

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.telemetry.context import ContextCounts
from sglang_dspark_plugin.telemetry.metrics import PrometheusMetrics


def _exposition() -> str:
    registry = CollectorRegistry()
    metrics = PrometheusMetrics(4, registry=registry)
    metrics.count_contexts(ContextCounts(4, (64, 128)))
    metrics.set_harvest("dspark", "census")
    metrics.set_host_cost({"plugin_fraction": 0.004})
    return generate_latest(registry).decode()


def test_every_panel_queries_what_the_plugin_exports_with_the_labels_it_uses():
    found = queries()
    assert len(found) >= 10 and all(q.selectors for q in found)
    plugin = {m for q in found for m in q.selectors if m.startswith("dspark_harvest_")}
    # accept length, per position, by context, alarms, probe, held state, host cost, harvest info
    for needed in (
        "dspark_harvest_accepted_tokens_total",
        "dspark_harvest_position_accepted_total",
        "dspark_harvest_context_accepted_tokens_total",
        "dspark_harvest_alarms_total",
        "dspark_harvest_probe_matches_total",
        "dspark_harvest_probe_requests_held",
        "dspark_harvest_host_cost_fraction",
        "dspark_harvest_info",
    ):
        assert needed in plugin
    assert any(m.startswith("sglang:") for q in found for m in q.selectors)  # sglang's own, beside
    assert misses(_exposition(), prefix="dspark_harvest_") == []


def test_the_check_finds_a_missing_series_and_a_missing_label(tmp_path):
    board = json.loads(DASHBOARD.read_text())
    board["panels"][0]["targets"][0]["expr"] = "sum(rate(dspark_harvest_accepted_token_total[5m]))"
    board["panels"][1]["targets"][0]["expr"] = "sum by (rank) (rate(dspark_harvest_rounds_total[5m]))"
    board["panels"][2]["targets"][0]["legendFormat"] = "{{bucket}}"
    wrong = tmp_path / "board.json"
    wrong.write_text(json.dumps(board))
    found = misses(_exposition(), prefix="dspark_harvest_", path=wrong)
    assert any("dspark_harvest_accepted_token_total is not exported" in m for m in found)
    assert any("dspark_harvest_rounds_total lacks label(s) ['rank']" in m for m in found)
    assert any("carries the label 'bucket'" in m for m in found)


def test_configs_prints_the_installed_dashboard():
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["configs", "dspark_harvest_grafana.json"]) == 0
    assert out.getvalue().strip() == str(DASHBOARD)
    assert json.loads(DASHBOARD.read_text())["uid"] == "dspark-harvest"
