"""The plugin's host time per round (``telemetry.hostcost``): the window's figures, the line it logs, and
the sync debug mode set around the plugin's work and restored after it, even when that work raises."""

from __future__ import annotations

import logging

import pytest

from sglang_dspark_plugin.telemetry import ACCEPT_LOGGER, HostCost, PluginWork


class Clock:
    """A nanosecond clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def test_the_window_reports_plugin_time_over_the_median_round(caplog):
    clock = Clock()
    cost = HostCost(every=3, clock=clock)
    work = PluginWork(cost)
    for plugin_ns, gap_ns in ((2_000, 100_000), (4_000, 100_000), (6_000, 5_000_000)):
        with work:
            clock.now += plugin_ns
        clock.now += gap_ns
        with caplog.at_level(logging.INFO, logger=ACCEPT_LOGGER):
            work.end_round()
    figures = cost.last
    assert figures is not None and figures["rounds"] == 3
    assert figures["plugin_us_per_round"] == pytest.approx(4.0)  # (2 + 4 + 6) us / 3 rounds
    # intervals: 104 us and 5006 us between the three round ends; the median of two is their mean
    assert figures["round_us_median"] == pytest.approx((104 + 5006) / 2)
    assert figures["plugin_fraction"] == pytest.approx(4.0 / ((104 + 5006) / 2))
    line = next(r.getMessage() for r in caplog.records if "dspark host cost" in r.getMessage())
    assert line.startswith("dspark host cost rounds=3 plugin_us_per_round=4.00 round_us_median=2555.0")
    assert cost.rounds == 0 and cost.plugin_ns == 0  # a new window


def test_the_queues_thread_time_is_logged_beside_per_round(caplog):
    """``MEMRA_DSPARK_QUEUE_THREAD``: the thread's CPU time is not in ``plugin_us_per_round`` (the
    scheduler's thread); each window logs it per round beside, from the thread's running total."""
    thread_ns = [0]
    cost = HostCost(every=2, clock=Clock(), off_thread=lambda: thread_ns[0])
    with caplog.at_level(logging.INFO, logger=ACCEPT_LOGGER):
        for total in (10_000, 30_000, 30_000, 34_000):  # the thread's total after each round
            cost.add(1_000)
            thread_ns[0] = total
            cost.end_round()
    lines = [r.getMessage() for r in caplog.records if "dspark host cost" in r.getMessage()]
    assert [line.split("plugin_fraction=")[1].split(" ", 1)[1] for line in lines] == [
        "queue_thread_us_per_round=15.00",  # 30 us over the first 2 rounds
        "queue_thread_us_per_round=2.00",  # 4 us more over the next 2
    ]
    assert cost.last is not None and cost.last["plugin_us_per_round"] == 1.0
    plain = HostCost(every=10, clock=Clock())
    plain.add(1_000)
    plain.end_round()
    assert set(plain.figures() or ()) == {
        "rounds",
        "plugin_us_per_round",
        "round_us_median",
        "plugin_fraction",
    }


def test_a_window_with_one_round_has_no_interval_yet():
    cost = HostCost(every=1, clock=Clock())
    cost.add(1_000)
    cost.end_round()
    assert cost.last is not None and cost.last["plugin_us_per_round"] == 1.0
    assert cost.last["round_us_median"] != cost.last["round_us_median"]  # nan: not measured


def test_sync_mode_is_error_inside_and_restored_after_even_on_error():
    modes = ["warn"]
    work = PluginWork(None, (lambda: modes[-1], modes.append))
    with work:
        assert modes[-1] == "error"
    assert modes == ["warn", "error", "warn"]
    with pytest.raises(RuntimeError), work:
        raise RuntimeError("a synchronising call")
    assert modes[-1] == "warn"
