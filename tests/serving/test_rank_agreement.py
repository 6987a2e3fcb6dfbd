"""Rank agreement over a real two-process gloo group (CPU), and the table the refusal prints."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import traceback
from pathlib import Path

from checkpoints import FIXTURES, Fixture, write_checkpoint

from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving.rank_agreement import (
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
    if "hf_hub_cache" in local:  # this rank's node: its own cache folder, the values computed here
        try:
            local = _served_values(**local)
        except Exception:  # noqa: BLE001 - a crash must surface in the parent, not hang it
            out.put((rank, "crash", traceback.format_exc()))
            return
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        # A sub-group, like sglang's TP cpu_group, rather than only the default group.
        group = dist.new_group(list(range(world)), backend="gloo")
        try:
            table = check_rank_agreement(local, group)
            out.put((rank, "ok", table))
        except RankDisagreementError as exc:
            refusal = {"message": exc.message, "table": exc.table, "differing": exc.differing}
            out.put((rank, "refused", refusal))
        except Exception:  # noqa: BLE001 - a crash must surface in the parent, not hang it
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
    """The keys the sglang workers compare (``rank_agreement.agreement_values``), for a block-16 drafter."""
    geometry = RoundGeometry(DsparkHarvest.from_name(harvest), 16)
    return {
        "harvest": harvest,
        "source": source,
        "env_value": env,
        "block_size": geometry.block_size,
        "gamma": geometry.gamma,
        "verify_window": geometry.verify_window,
        "draft": "org/draft",
        "draft_content": "sha256:0123456789abcdef",
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


REVISION = "0123456789abcdef0123456789abcdef01234567"


def _hub_cache(root: Path, fixture: Fixture) -> Path:
    """A Hugging Face hub cache holding ``org/drafter`` = ``fixture`` (the layout snapshot_download reads)."""
    repo = root / "models--org--drafter"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(REVISION)
    snapshot = repo / "snapshots" / REVISION
    snapshot.parent.mkdir(parents=True)
    written = write_checkpoint(root / "src", fixture)
    written.rename(snapshot)
    return root


def _served_values(hf_hub_cache: str, draft: str, cwd: str) -> dict:
    """What a node's worker compares: census of the hub id through this node's cache, then the values."""
    os.environ["HF_HUB_CACHE"] = hf_hub_cache
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.chdir(cwd)  # "org/drafter" is not a local folder here
    from sglang_dspark_plugin.census import census
    from sglang_dspark_plugin.serving.rank_agreement import agreement_values

    cfg = census(draft)
    resolution = DsparkHarvest.explain(cfg, environ={})
    assert Path(cfg.path).is_relative_to(hf_hub_cache)  # this node's own folder
    return agreement_values(draft, cfg, resolution, RoundGeometry(resolution.harvest, cfg.block_size))


def test_nodes_whose_caches_sit_at_different_paths_agree_and_a_changed_shape_is_refused(tmp_path):
    fixture = FIXTURES["specforge_dspark"]
    caches = [_hub_cache(tmp_path / f"node{r}", fixture) for r in (0, 1)]

    def ranks(cache_1: Path) -> dict[int, tuple[str, object]]:
        nodes = [caches[0], cache_1]
        return _run_two_ranks(
            [{"hf_hub_cache": str(c), "draft": "org/drafter", "cwd": str(tmp_path)} for c in nodes]
        )

    # Two folders (each node's own cache), one checkpoint: both ranks agree.
    results = ranks(caches[1])
    for rank in (0, 1):
        status, table = results[rank]
        assert status == "ok", table
        assert table[0] == table[1] and table[0]["draft"] == "org/drafter"
        assert table[0]["draft_content"].startswith("sha256:") and table[0]["harvest"] == "dspark"

    # A copy with one tensor of another shape (a wider MLP): same names, same config.
    changed = Fixture(
        fixture.name,
        fixture.config,
        {**fixture.tensors, "layers.0.mlp.down_proj.weight": (32, 128)},
        fixture.expect,
    )
    results = ranks(_hub_cache(tmp_path / "node1-changed", changed))
    for rank in (0, 1):
        status, payload = results[rank]
        assert status == "refused", payload
        assert "draft_content" in payload["differing"] and "draft" not in payload["differing"]
        assert "same checkpoint behind it" in payload["message"]


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
