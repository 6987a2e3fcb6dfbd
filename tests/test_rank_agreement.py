"""Rank agreement over a real two-process gloo group (CPU), and the table the refusal prints."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import traceback

from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.rank_agreement import (
    RankDisagreementError,
    check_rank_agreement,
    differing_keys,
    format_rank_table,
)

TIMEOUT_S = 60


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, local: dict, out: mp.Queue) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        # A sub-group, like sglang's TP cpu_group, rather than only the default group.
        group = dist.new_group(list(range(world)), backend="gloo")
        try:
            table = check_rank_agreement(local, group)
            out.put((rank, "ok", table))
        except RankDisagreementError as exc:
            refusal = {"message": exc.message, "table": exc.table, "differing": exc.differing}
            out.put((rank, "refused", refusal))
        except Exception:  # a crash must surface in the parent, not hang it
            out.put((rank, "crash", traceback.format_exc()))
    finally:
        dist.destroy_process_group()


def _run_two_ranks(locals_: list[dict]) -> dict[int, tuple[str, object]]:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [
        ctx.Process(target=_rank_main, args=(r, len(locals_), port, locals_[r], out))
        for r in range(len(locals_))
    ]
    for p in procs:
        p.start()
    results: dict[int, tuple[str, object]] = {}
    try:
        for _ in procs:
            rank, status, payload = out.get(timeout=TIMEOUT_S)
            results[rank] = (status, payload)
    finally:
        for p in procs:
            p.join(timeout=TIMEOUT_S)
            if p.is_alive():
                p.kill()
    return results


def _local(harvest: str, source: str = "census", env: str | None = None) -> dict:
    """The keys the sglang workers compare (``workers.rank_agreement_values``), for a block-16 drafter."""
    geometry = RoundGeometry(DsparkHarvest.from_name(harvest), 16)
    return {
        "harvest": harvest,
        "source": source,
        "env_value": env,
        "block_size": geometry.block_size,
        "gamma": geometry.gamma,
        "verify_window": geometry.verify_window,
        "draft_path": os.path.join("ckpt", "draft"),
    }


def test_two_ranks_that_agree_both_return_the_full_table():
    results = _run_two_ranks([_local("dspark"), _local("dspark")])
    assert set(results) == {0, 1}
    for rank in (0, 1):
        status, table = results[rank]
        assert status == "ok", table
        assert table == [_local("dspark"), _local("dspark")]


def test_two_ranks_that_disagree_are_both_refused_with_the_table():
    # Rank 1 sits on a node whose environment forces the other arm.
    a = _local("dspark")
    b = _local("dflash", source="env", env="dflash")
    results = _run_two_ranks([a, b])
    assert set(results) == {0, 1}
    for rank in (0, 1):
        status, payload = results[rank]
        assert status == "refused", payload
        assert payload["table"] == [a, b]
        assert payload["differing"] == ["harvest", "source", "env_value", "gamma", "verify_window"]
        message = payload["message"]
        assert "MEMRA_DSPARK_HARVEST" in message
        assert "startup is refused" in message
        # Each rank's row is in the message, so the operator sees which node is off.
        lines = message.splitlines()
        assert any(line.startswith("0 ") and "'dspark'" in line for line in lines)
        assert any(line.startswith("1 ") and "'dflash'" in line and "'env'" in line for line in lines)


def test_a_single_process_without_a_group_has_nothing_to_compare():
    assert check_rank_agreement({"harvest": "dflash"}) == [{"harvest": "dflash"}]


def test_differing_keys_counts_a_missing_key_as_a_difference():
    table = [{"harvest": "dspark", "gamma": 8}, {"harvest": "dspark"}]
    assert differing_keys(table) == ["gamma"]
    assert differing_keys([{"a": 1}, {"a": 1}]) == []


def test_format_rank_table_marks_differing_columns():
    text = format_rank_table([{"harvest": "dspark", "b": 8}, {"harvest": "dflash", "b": 8}], ["harvest"])
    header, row0, row1 = text.splitlines()
    assert header.split() == ["rank", "harvest*", "b"]
    assert row0.split() == ["0", "'dspark'", "8"]
    assert row1.split() == ["1", "'dflash'", "8"]


def test_error_kind_is_machine_readable():
    err = RankDisagreementError("x", table=[{"a": 1}], differing=["a"])
    assert err.to_json()["kind"] == "rank_disagreement"
    assert err.table == [{"a": 1}]
