"""``serving.rounds.WorkerRounds`` without sglang: where the round work lives, which requests a round
counts, and the queue's order (a round's counts, its snapshot, a request's end)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from checkpoints import write_checkpoint

from sglang_dspark_plugin.serving import LaunchRequest, ServePlan, SglangSupport, make_plan
from sglang_dspark_plugin.serving.placement import AttentionRanks
from sglang_dspark_plugin.serving.rounds import NO_WORK, WorkerRounds, queue_on_thread

LOG = logging.getLogger("test_rounds")


def _plan(tmp_path: Path) -> ServePlan:
    draft = write_checkpoint(tmp_path, "dspark_markov_rank0")
    return make_plan(LaunchRequest(draft=str(draft)), SglangSupport.for_version("0.5.23"))


FIRST = AttentionRanks(0, 0, 0, 0, 1)  # TP rank 0, no data-parallel attention


def _attach(plan: ServePlan, ranks: AttentionRanks = FIRST) -> WorkerRounds | None:
    return WorkerRounds.attach(plan, ranks, "Worker", LOG, metrics=False)


def _req(rid: str, live: bool = True) -> SimpleNamespace:
    """A request as the round work reads it."""
    return SimpleNamespace(
        rid=rid, is_retracted=False, finished=lambda: not live, origin_input_ids=[1] * 9, output_ids=[5, 6]
    )


def _round(rounds: WorkerRounds, counts: list[int], live: list[bool], width: int) -> None:
    """One round as the worker hands it over: the resolved round, its counts on the result."""
    reqs = [_req(f"r{i}", keep) for i, keep in enumerate(live)]
    result = SimpleNamespace(
        next_token_ids=torch.zeros(width * len(reqs), dtype=torch.int64),
        accept_lens=torch.tensor([n + 1 for n in counts]),
        num_correct_drafts_per_req_cpu=counts,
    )
    rounds.round([[8]] * len(reqs), result, SimpleNamespace(reqs=reqs))


def test_the_first_rank_of_each_attention_group_keeps_the_round_work(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    first = _attach(plan)
    assert first is not None and first.work is NO_WORK and first.telemetry.dp_rank is None
    assert _attach(plan, AttentionRanks(1, 1, 0, 0, 1)) is None  # its group's first rank logs the rounds
    dp = _attach(plan, AttentionRanks(2, 0, 0, 1, 2))
    assert dp is not None and dp.telemetry.summary_line().endswith(" dp=1")


def test_a_round_counts_the_live_requests_once_sglang_resolved_it(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    rounds = _attach(plan)
    assert rounds is not None
    width = plan.geometry.verify_window
    rounds.round(
        [[8]], SimpleNamespace(), SimpleNamespace(reqs=[])
    )  # a result with no counts: nothing queued
    assert rounds.queue.queued == 0
    _round(rounds, [2, 1], [True, False], width)  # the finished request is left out, as sglang does
    _round(rounds, [0], [False], width)  # every request had finished: nothing to count
    rounds.queue.run()
    counts = rounds.telemetry.counts
    assert (counts.rounds, counts.request_rounds, counts.accepted_drafts) == (1, 1, 2)
    assert rounds.probe.rounds == 1


def test_counts_of_another_batch_are_counted_whole(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    rounds = _attach(plan)
    assert rounds is not None
    three = SimpleNamespace(num_correct_drafts_per_req_cpu=[1, 1, 1])  # one request in the batch: not its
    rounds.round([[8]], three, SimpleNamespace(reqs=[_req("r0")]))
    rounds.queue.run()
    assert (rounds.telemetry.counts.request_rounds, rounds.probe.rounds) == (3, 0)


def test_a_request_end_is_queued_after_its_rounds(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    rounds = _attach(plan)
    assert rounds is not None
    calls: list[str] = []
    verify, finish = rounds.telemetry.on_verify_complete, rounds.probe.finish
    rounds.telemetry.on_verify_complete = lambda *a, **k: (calls.append("round"), verify(*a, **k))[1]
    rounds.probe.finish = lambda rid: (calls.append(f"end {rid}"), finish(rid))[1]
    _round(rounds, [1], [True], plan.geometry.verify_window)
    _round(rounds, [2], [True], plan.geometry.verify_window)
    assert calls == []  # queued, not run
    rounds.finish("r0")  # the last running request ended: the queue runs, the end after its rounds
    # (the probe may also end r0 itself between the rounds: these stand-in rounds commit no new token,
    # which it reads as a restart)
    assert (
        calls.count("round") == 2
        and calls[-1] == "end r0"
        and "round" not in calls[calls.index("end r0", 2) :]
    )
    assert rounds.queue.queued == 0 and rounds.telemetry.counts.rounds == 2


def test_host_timing_enters_the_plugin_work_around_each_round(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    telemetry = dataclasses.replace(plan.request.telemetry, host_timing=True)
    plan = dataclasses.replace(plan, request=dataclasses.replace(plan.request, telemetry=telemetry))
    rounds = _attach(plan)
    assert rounds is not None and rounds.work is not NO_WORK and rounds.work.cost is not None
    _round(rounds, [1], [True], plan.geometry.verify_window)
    assert rounds.work.cost.total_rounds == 1


def test_the_queue_thread_setting_moves_the_runs_off_the_round_unless_a_mismatch_stops_the_server(
    tmp_path: Path,
) -> None:
    """``MEMRA_DSPARK_QUEUE_THREAD=1``: the runs go to the queue's thread and the host-cost line reads
    its time; under ``MEMRA_DSPARK_ON_MISMATCH=fail`` they stay on the scheduler's thread, so that the
    run that decides stops the server."""
    from sglang_dspark_plugin.probe.live import ProbeSettings

    base = _plan(tmp_path)
    assert base.request.telemetry.queue_thread is None  # the default: auto
    assert not _attach(base).queue.threaded  # auto, no device known: on the scheduler's thread

    def with_(thread: bool, on_mismatch: str) -> WorkerRounds:
        telemetry = dataclasses.replace(base.request.telemetry, queue_thread=thread, host_timing=True)
        request = dataclasses.replace(
            base.request, telemetry=telemetry, probe=ProbeSettings(on_mismatch=on_mismatch)
        )
        rounds = _attach(dataclasses.replace(base, request=request))
        assert rounds is not None
        return rounds

    threaded = with_(True, "warn")
    assert threaded.queue.threaded and threaded.work.cost.off_thread is not None
    _round(threaded, [1], [True], base.geometry.verify_window)
    threaded.finish("r0")  # the batch drained: the run goes to the thread
    threaded.queue.wait()
    assert threaded.telemetry.counts.rounds == 1 and threaded.queue.thread_ns > 0
    threaded.queue.close()
    failing = with_(True, "fail")
    assert not failing.queue.threaded and failing.work.cost.off_thread is None


@pytest.mark.parametrize(
    ("setting", "device", "on_mismatch", "thread", "why"),
    [
        (None, "cuda", "warn", True, "auto: device cuda"),
        (None, "npu", "warn", True, "auto: device npu"),
        (None, "cpu", "warn", False, "auto: device cpu"),
        (None, None, "warn", False, "auto: device unknown"),
        (None, 0, "warn", False, "auto: device unknown"),  # not a string: unknown
        (True, "cpu", "warn", True, "MEMRA_DSPARK_QUEUE_THREAD=1"),
        (False, "cuda", "warn", False, "MEMRA_DSPARK_QUEUE_THREAD=0"),
        (None, "cuda", "fail", False, "ON_MISMATCH=fail"),
        (True, "cuda", "fail", False, "ON_MISMATCH=fail"),
    ],
)
def test_auto_takes_the_thread_on_an_accelerator_only(setting, device, on_mismatch, thread, why) -> None:
    assert queue_on_thread(setting, device, on_mismatch) == (thread, why)


def test_the_worker_on_an_accelerator_runs_its_queue_on_the_thread_and_says_why(
    tmp_path: Path, caplog
) -> None:
    """Auto (the default) with sglang's resolved ``--device cuda``: the runs go to the queue's thread, and
    the startup line says where and why; on ``cpu`` they stay on the scheduler's thread."""
    plan = _plan(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOG.name):
        on_gpu = WorkerRounds.attach(plan, FIRST, "Worker", LOG, metrics=False, device="cuda")
        on_cpu = WorkerRounds.attach(plan, FIRST, "Worker", LOG, metrics=False, device="cpu")
    assert on_gpu is not None and on_gpu.queue.threaded
    assert on_cpu is not None and not on_cpu.queue.threaded
    on_gpu.queue.close()
    assert "telemetry queue on its own thread (auto: device cuda)" in caplog.text
    assert "telemetry queue on the scheduler's thread (auto: device cpu)" in caplog.text
