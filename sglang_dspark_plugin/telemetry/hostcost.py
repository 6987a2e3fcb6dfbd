"""The plugin's own host time per verify round, measured where it runs (``MEMRA_DSPARK_HOST_TIMING``).

``PluginWork`` is the context manager the worker and its round hook enter around the plugin's own
per-round work (the round hook's bookkeeping, the accept telemetry, the live probe); sglang's work is
never inside it. It adds the time spent inside to a ``HostCost``, and, with ``MEMRA_DSPARK_SYNC_DEBUG``
on a CUDA device, runs that work under ``torch.cuda.set_sync_debug_mode("error")`` (the mode is given
as two functions, so this module needs no torch), so a device synchronisation the plugin adds raises
instead of passing unseen.

``HostCost`` keeps the plugin's time and the wall time between consecutive rounds over a window of
rounds, and logs one line per window::

    dspark host cost rounds=100 plugin_us_per_round=7.21 round_us_median=18034.2 plugin_fraction=0.00040

``plugin_fraction`` is the plugin's mean time per round over the median round-to-round time (the median
leaves out the idle gaps between requests). Where the queue's runs have a thread of their own
(``MEMRA_DSPARK_QUEUE_THREAD``) the line ends with that thread's CPU time per round, which
``plugin_us_per_round`` (the scheduler's thread) leaves out: ``queue_thread_us_per_round=31.40``.
What it cannot see: sglang's own dispatch of the plugin's hook (a few hundred nanoseconds a round),
which the end-to-end benchmark (``scripts/bench_served.py``) counts with the rest.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from ..util.logsafe import safe_logger
from .settings import ACCEPT_LOGGER

SyncMode = tuple[Callable[[], Any], Callable[[Any], None]]
"""``(get, set)``: ``torch.cuda.get_sync_debug_mode`` and ``torch.cuda.set_sync_debug_mode``."""


class HostCost:
    """The plugin's host time per round and the round-to-round time, logged once per ``every`` rounds."""

    def __init__(
        self,
        every: int,
        logger: logging.Logger | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        dp_tag: str = "",
        on_window: Callable[[dict[str, float]], None] | None = None,
        off_thread: Callable[[], int] | None = None,
    ) -> None:
        self.every = max(1, int(every))
        self.off_thread = off_thread  # the queue thread's CPU ns so far (``DeferredRounds.thread_ns``)
        self._off_thread_at = 0  # its value when the current window began
        self.on_window = on_window  # given each logged window's figures (the Prometheus gauge)
        self.logger = logger if logger is not None else safe_logger(ACCEPT_LOGGER)
        self.clock, self.dp_tag = clock, dp_tag
        self.plugin_ns = 0  # in the current window
        self.rounds = 0  # in the current window
        self.intervals: list[int] = []  # round-to-round wall time, ns, in the current window
        self.total_rounds = 0
        self.last: dict[str, float] | None = None  # the last window's figures
        self._previous_round: int | None = None

    def add(self, ns: int) -> None:
        """Time the plugin spent on the current round, in nanoseconds."""
        self.plugin_ns += ns

    def end_round(self) -> None:
        """One verify round done: count it, and log the window when it is full."""
        now = self.clock()
        if self._previous_round is not None:
            self.intervals.append(now - self._previous_round)
        self._previous_round = now
        self.rounds += 1
        self.total_rounds += 1
        if self.rounds >= self.every:
            self.flush()

    def figures(self) -> dict[str, float] | None:
        """``plugin_us_per_round``, ``round_us_median`` and ``plugin_fraction`` of the current window."""
        if not self.rounds:
            return None
        plugin_us = self.plugin_ns / self.rounds / 1e3
        round_us = statistics.median(self.intervals) / 1e3 if self.intervals else float("nan")
        fraction = plugin_us / round_us if round_us > 0 else float("nan")
        figures = {
            "rounds": float(self.rounds),
            "plugin_us_per_round": plugin_us,
            "round_us_median": round_us,
            "plugin_fraction": fraction,
        }
        if self.off_thread is not None:
            figures["queue_thread_us_per_round"] = (
                (self.off_thread() - self._off_thread_at) / self.rounds / 1e3
            )
        return figures

    def flush(self) -> None:
        """Log the current window (if it has rounds) and start a new one."""
        figures = self.figures()
        if figures is None:
            return
        self.last = figures
        off = figures.get("queue_thread_us_per_round")
        self.logger.info(
            "dspark host cost rounds=%d plugin_us_per_round=%.2f round_us_median=%.1f "
            "plugin_fraction=%.5f%s%s",
            int(figures["rounds"]),
            figures["plugin_us_per_round"],
            figures["round_us_median"],
            figures["plugin_fraction"],
            "" if off is None else f" queue_thread_us_per_round={off:.2f}",
            self.dp_tag,
        )
        if self.off_thread is not None:
            self._off_thread_at = self.off_thread()
        if self.on_window is not None:
            self.on_window(figures)
        self.plugin_ns, self.rounds, self.intervals = 0, 0, []


class PluginWork:
    """``with work:`` around the plugin's own per-round work: timed into ``cost`` and, given
    ``sync_mode``, run under the sync debug mode ``"error"`` (the previous mode restored after)."""

    __slots__ = ("cost", "sync_mode", "_started", "_previous")

    def __init__(self, cost: HostCost | None = None, sync_mode: SyncMode | None = None) -> None:
        self.cost, self.sync_mode = cost, sync_mode
        self._started = 0
        self._previous: Any = None

    def __enter__(self) -> PluginWork:
        if self.sync_mode is not None:
            get, set_mode = self.sync_mode
            self._previous = get()
            set_mode("error")
        if self.cost is not None:
            self._started = self.cost.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.cost is not None:
            self.cost.add(self.cost.clock() - self._started)
        if self.sync_mode is not None:
            self.sync_mode[1](self._previous)

    def end_round(self) -> None:
        if self.cost is not None:
            self.cost.end_round()


def plugin_work(
    settings: Any,
    dp_tag: str = "",
    logger: logging.Logger | None = None,
    on_window: Callable[[dict[str, float]], None] | None = None,
    off_thread: Callable[[], int] | None = None,
) -> PluginWork | None:
    """What a worker enters around its per-round work (``TelemetrySettings``): ``None`` on a normal
        server, or a ``PluginWork`` that times it (``MEMRA_DSPARK_HOST_TIMING``, one line per
        ``host_cost_every`` rounds, each window also handed to ``on_window``; ``off_thread``: the queue
    thread's CPU time so far, logged per round beside) and, on a CUDA device, runs
        it under the sync debug mode "error" (``MEMRA_DSPARK_SYNC_DEBUG``; without a CUDA device ``logger``
        says so and nothing is checked)."""
    sync_mode = None
    if settings.sync_debug:
        import torch

        if torch.cuda.is_available():
            sync_mode = (torch.cuda.get_sync_debug_mode, torch.cuda.set_sync_debug_mode)
        elif logger is not None:
            logger.info("DSPARK_HARVEST: MEMRA_DSPARK_SYNC_DEBUG is on but there is no CUDA device: no check")
    cost = (
        HostCost(settings.host_cost_every, dp_tag=dp_tag, on_window=on_window, off_thread=off_thread)
        if settings.host_timing
        else None
    )
    return None if cost is None and sync_mode is None else PluginWork(cost, sync_mode)


__all__ = ["HostCost", "PluginWork", "SyncMode", "plugin_work"]
