"""The Python API with arguments of the wrong type: a typed refusal naming the parameter, never an
AttributeError from deep inside, and never an allocation sized by a wrong argument."""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

from sglang_dspark_plugin import DflashCfg, DsparkHarvest, RoundGeometry
from sglang_dspark_plugin.errors import ArgumentTypeError, DsparkHarvestError, GeometryError, HarvestEnvError
from sglang_dspark_plugin.geometry import MAX_GAMMA
from sglang_dspark_plugin.harvest import Resolution
from sglang_dspark_plugin.telemetry import AcceptTelemetry, PrometheusMetrics

DSPARK = DsparkHarvest.DSPARK


def _refused(fn: Any, kind: type[Exception], names: str) -> DsparkHarvestError:
    tracemalloc.start()
    try:
        with pytest.raises(kind) as info:
            fn()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    error = info.value
    assert isinstance(error, DsparkHarvestError) and names in error.message
    assert peak < 2**20, f"{peak} bytes traced before the refusal"
    return error


@pytest.mark.parametrize("harvest", ["dspark", "dflash", 1, None])
def test_round_geometry_with_a_harvest_that_is_not_a_member(harvest):
    error = _refused(lambda: RoundGeometry(harvest, 8), HarvestEnvError, "DsparkHarvest")
    assert error.where == "RoundGeometry(harvest=...)"


@pytest.mark.parametrize("cfg", [{}, {"block_size": 8}, None, "ckpt"])
def test_resolve_with_something_that_is_not_a_census(cfg):
    for call in (DsparkHarvest.resolve, DsparkHarvest.explain, lambda c: Resolution.of(c, None)):
        error = _refused(lambda call=call: call(cfg), ArgumentTypeError, "DflashCfg")
        assert isinstance(error, TypeError) and error.kind == "type"


def test_explain_and_resolve_value_refuse_wrong_types_by_name():
    cfg = DflashCfg(path="ckpt", block_size=8)
    _refused(lambda: DsparkHarvest.explain(cfg, environ=["x"]), ArgumentTypeError, "environ")
    _refused(lambda: DsparkHarvest.resolve_value(None, "no"), ArgumentTypeError, "strategy_dspark")
    assert DsparkHarvest.explain(cfg, environ={}).harvest is DsparkHarvest.DFLASH  # a plain dict is fine


@pytest.mark.parametrize("gamma", [10**9, 10**30, MAX_GAMMA + 1])
def test_telemetry_and_metrics_refuse_a_gamma_beyond_the_widest_block_without_allocating(gamma):
    _refused(lambda: AcceptTelemetry(gamma, DSPARK, "census"), GeometryError, f"1..{MAX_GAMMA}")
    _refused(lambda: PrometheusMetrics(gamma), GeometryError, f"1..{MAX_GAMMA}")
    assert AcceptTelemetry(MAX_GAMMA, DSPARK, "census").gamma == MAX_GAMMA


@pytest.mark.parametrize(
    "kwargs, parameter",
    [
        ({"source": 7}, "source"),
        ({"evidence": "abc"}, "evidence"),
        ({"evidence": [{"signal": "x"}]}, "evidence"),
        ({"settings": {"summary_every": 0}}, "settings"),
        ({"clock": 3.0}, "clock"),
        ({"logger": "dspark"}, "logger"),
        ({"dp_rank": "1"}, "dp_rank"),
        ({"dp_rank": -1}, "dp_rank"),
    ],
)
def test_telemetry_refuses_each_wrongly_typed_argument_by_name(kwargs, parameter):
    arguments = {"gamma": 4, "harvest": DSPARK, "source": "census", **kwargs}
    error = _refused(lambda: AcceptTelemetry(**arguments), ArgumentTypeError, parameter)
    assert error.where == f"AcceptTelemetry({parameter}=...)"
