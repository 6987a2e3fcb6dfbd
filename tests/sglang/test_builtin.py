"""DSPARK_HARVEST served AS the builtin it resolves to, through sglang's real argument pipeline.

The rewrite happens at the start of argument resolution, so every check and feature sglang keys on
the name DFLASH / DSPARK applies to ``DSPARK_HARVEST`` exactly as to that builtin: the same flags give
the same resolved arguments or the same refusal. A plain DFLASH / DSPARK launch keeps sglang's own
worker; a server whose marker is lost still gets the plugin's worker (environment marker) or a refusal.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import sglang
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import GeometryError
from sglang_dspark_plugin.sglang_plugin import builtin, register
from sglang_dspark_plugin.sglang_plugin.workers import HarvestDFlashWorker, HarvestDSparkWorker

IS_0523 = tuple(int(x) for x in sglang.__version__.split(".")[:3]) >= (0, 5, 23)
TARGET = EMBEDDED.target  # resolution reads its config.json only
DRAFT = {"DFLASH": EMBEDDED.root / "drafter-dflash", "DSPARK": EMBEDDED.root / "drafter-dspark"}


@pytest.fixture(autouse=True)
def registered() -> None:
    assert register() is True


def resolve(target: Path, algorithm: str, draft: Path, *extra: str):
    """``launch_server``'s parse and resolution; (record, resolved view)."""
    args = prepare_server_args(
        [
            "--model-path",
            str(target),
            "--device",
            "cuda",
            "--speculative-algorithm",
            algorithm,
            "--speculative-draft-model-path",
            str(draft),
            *extra,
        ]
    )
    if IS_0523:
        from sglang.srt.arg_groups.overrides import resolved_view

        args.resolve_once()
        return args, resolved_view(args)
    return args, args


def outcome(target: Path, algorithm: str, draft: Path, *extra: str):
    """What sglang makes of these arguments: every resolved field, or the refusal."""
    try:
        _, view = resolve(target, algorithm, draft, *extra)
    except Exception as err:  # noqa: BLE001 - the refusal IS the outcome compared
        return ("refused", type(err).__name__, str(err))
    # every server argument (argparse's destinations, the same in both versions); random_seed is drawn
    # per resolution when unset
    return ("resolved", {n: getattr(view, n, "<unset>") for n in _fields() if n != "random_seed"})


@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
def test_plugin_resolves_to_the_builtin_with_a_marker(builtin_name) -> None:
    record, view = resolve(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name])
    assert view.speculative_algorithm == builtin_name
    marker = getattr(record, builtin.MARKER_ATTR)
    assert marker["builtin"] == builtin_name and marker["draft"] == str(DRAFT[builtin_name])
    assert json.loads(__import__("os").environ[builtin.MARKER_ENV]) == marker  # for spawned processes
    cls = SpeculativeAlgorithm[builtin_name].create_worker(record)
    assert cls is (HarvestDFlashWorker if builtin_name == "DFLASH" else HarvestDSparkWorker)
    if IS_0523:
        assert record._raw_input["speculative_algorithm"] == "DSPARK_HARVEST"  # what the user passed


@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
def test_a_plain_builtin_launch_is_untouched(builtin_name) -> None:
    record, view = resolve(TARGET, builtin_name, DRAFT[builtin_name])
    assert view.speculative_algorithm == builtin_name
    assert getattr(record, builtin.MARKER_ATTR, None) is None
    cls = SpeculativeAlgorithm[builtin_name].create_worker(record)
    assert cls is (DFlashWorkerV2 if builtin_name == "DFLASH" else DSparkWorkerV2)  # sglang's own


# Flag sets sglang treats by the algorithm's name (or that reach name-keyed code). The plugin must give
# exactly the builtin's outcome for each. Before the rewrite, 0.5.23 refused block verification and
# DP spec/prefill coordination for DSPARK_HARVEST and 0.5.17 skipped the mamba and linear-replayssm checks.
CASES: list[tuple[str, tuple[str, ...], dict[str, str]]] = [
    ("plain", (), {}),
    ("block verification", ("--speculative-use-block-verification",), {}),
    ("LoRA", ("--enable-lora", "--max-lora-rank", "8", "--lora-target-modules", "q_proj"), {}),
    ("hicache with dcp", ("--enable-hierarchical-cache", "--dcp-size", "2", "--tp-size", "2"), {}),
    ("mamba extra_buffer_lazy", ("--mamba-radix-cache-strategy", "extra_buffer_lazy"), {}),
    ("linear replayssm", ("--enable-linear-replayssm-spec",), {"SGLANG_RAGGED_VERIFY_MODE": "compact"}),
    ("unified memory", ("--enable-unified-memory",), {}),
    ("DP spec/prefill coordination", (), {"SGLANG_ENABLE_DP_SPEC_PREFILL_COORDINATION": "1"}),
    ("layernorm SP", ("--enable-layernorm-sp",), {}),
]


def _parser():
    import argparse

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return parser


def _fields() -> list[str]:
    return sorted({a.dest for a in _parser()._actions if a.dest not in ("help", "config")})


def _known(flags: tuple[str, ...]) -> bool:
    known = {opt for action in _parser()._actions for opt in action.option_strings}
    return all(f in known for f in flags if f.startswith("--"))


@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
@pytest.mark.parametrize(("case", "flags", "env"), CASES, ids=[c[0] for c in CASES])
def test_every_name_keyed_check_applies_as_to_the_builtin(
    case, flags, env, builtin_name, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if not _known(flags):  # a flag this sglang version does not have: sglang's parser refuses both alike
        with pytest.raises(SystemExit):
            resolve(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name], *flags)
        return
    want = outcome(TARGET, builtin_name, DRAFT[builtin_name], *flags)
    monkeypatch.delenv(builtin.MARKER_ENV, raising=False)
    got = outcome(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name], *flags)
    assert got[0] == want[0], (case, got, want)
    if got[0] == "refused":
        assert got[1:] == want[1:], case
        return
    differs = {k: (got[1][k], want[1][k]) for k in want[1] if got[1][k] != want[1][k]}
    assert not differs, (case, differs)


def test_a_lost_marker_falls_back_to_the_environment_or_sglangs_worker(monkeypatch) -> None:
    marker = {"harvest": "dspark", "builtin": "DSPARK", "draft": "/d", "checkpoint": "/d", "verify_window": 9}
    monkeypatch.setenv(builtin.MARKER_ENV, json.dumps(marker))
    lost = SimpleNamespace(speculative_draft_model_path="/d", speculative_algorithm="DSPARK")
    assert builtin.marker_of(lost) == marker
    assert (
        builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, lost) is HarvestDSparkWorker
    )
    other = SimpleNamespace(speculative_draft_model_path="/other", speculative_algorithm="DSPARK")
    assert builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, other) is None


def test_a_marker_that_contradicts_the_builtin_refuses(monkeypatch) -> None:
    marker = {"harvest": "dflash", "builtin": "DFLASH", "draft": "/d", "checkpoint": "/d", "verify_window": 8}
    monkeypatch.setenv(builtin.MARKER_ENV, json.dumps(marker))
    args = SimpleNamespace(speculative_draft_model_path="/d", speculative_algorithm="DSPARK")
    with pytest.raises(GeometryError, match="DSPARK worker"):
        builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, args)


def test_the_worker_refuses_a_builtin_that_contradicts_the_census(monkeypatch) -> None:
    """A dflash drafter served while sglang runs DSPARK (e.g. a process with another env) never serves."""
    from sglang_dspark_plugin.sglang_plugin import workers

    monkeypatch.setattr(workers, "_tp_cpu_group", lambda: (None, 0))
    args = SimpleNamespace(
        speculative_algorithm="DSPARK",
        speculative_draft_model_path=str(DRAFT["DFLASH"]),
        model_path=str(TARGET),
        speculative_dflash_block_size=None,
        speculative_dspark_block_size=None,
        enable_metrics=False,
    )
    worker = HarvestDFlashWorker.__new__(HarvestDFlashWorker)
    with pytest.raises(GeometryError, match="runs this server as DSPARK"):
        worker._dspark_harvest_init(args)


def test_the_fallback_route_serves_with_a_warning(monkeypatch, plugin_log) -> None:
    """Where the early rewrite cannot fire, the registered DSPARK_HARVEST algorithm still resolves."""
    import logging

    monkeypatch.setattr(builtin, "rewrite_to_builtin", lambda server_args: None)
    record, view = resolve(TARGET, "DSPARK_HARVEST", DRAFT["DFLASH"])
    assert view.speculative_algorithm == "DSPARK_HARVEST"
    assert view.speculative_num_draft_tokens == 8
    assert any("early rewrite to sglang's builtin did not run" in m for m in plugin_log.at(logging.WARNING))
