"""DSPARK_HARVEST served AS the builtin it resolves to, through sglang's real argument pipeline.

The rewrite happens at the start of argument resolution, so every check and feature sglang keys on
the name DFLASH / DSPARK applies to ``DSPARK_HARVEST`` exactly as to that builtin: the same flags give
the same resolved arguments or the same refusal. A plain DFLASH / DSPARK launch keeps sglang's own
worker. The plan rides on the server args, never on the process environment: a later plain launch in
the same process resolves exactly as in a fresh one.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import sglang
from features import RESOLVE_ONCE
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import GeometryError
from sglang_dspark_plugin.serving import ServePlan, ServeRefusal
from sglang_dspark_plugin.serving.request import DSPARK_BLOCK_FLAG, flag_field
from sglang_dspark_plugin.serving.topology import ARMS, MEASURED, SERVED, TOPOLOGIES, cell
from sglang_dspark_plugin.sglang_plugin import builtin, register
from sglang_dspark_plugin.sglang_plugin.resolution import PLAN_ATTR, plan_of
from sglang_dspark_plugin.sglang_plugin.workers import HarvestDFlashWorker, HarvestDSparkWorker

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
    if RESOLVE_ONCE:
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


def _ours(environ) -> dict[str, str]:
    """The process environment's MEMRA_DSPARK_* variables (sglang sets SGLANG_* ones of its own)."""
    return {k: v for k, v in environ.items() if k.startswith("MEMRA_DSPARK_")}


@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
def test_plugin_resolves_to_the_builtin_with_a_plan_on_the_server_args(builtin_name) -> None:
    before = _ours(os.environ)
    record, view = resolve(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name])
    assert view.speculative_algorithm == builtin_name
    plan = getattr(record, PLAN_ATTR)
    assert isinstance(plan, ServePlan)
    assert plan.builtin == builtin_name and plan.draft == str(DRAFT[builtin_name])
    assert _ours(os.environ) == before  # nothing the plugin sets outlives the launch
    for carried in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record)):  # spawn, draft deepcopy
        assert plan_of(carried) == plan
    cls = SpeculativeAlgorithm[builtin_name].create_worker(record)
    assert cls is (HarvestDFlashWorker if builtin_name == "DFLASH" else HarvestDSparkWorker)
    if RESOLVE_ONCE:
        assert record._raw_input["speculative_algorithm"] == "DSPARK_HARVEST"  # what the user passed


@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
def test_a_plain_builtin_launch_is_untouched(builtin_name) -> None:
    record, view = resolve(TARGET, builtin_name, DRAFT[builtin_name])
    assert view.speculative_algorithm == builtin_name
    assert plan_of(record) is None
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
    got = outcome(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name], *flags)
    assert got[0] == want[0], (case, got, want)
    if got[0] == "refused":
        assert got[1:] == want[1:], case
        return
    differs = {k: (got[1][k], want[1][k]) for k in want[1] if got[1][k] != want[1][k]}
    assert not differs, (case, differs)


def builds_disagg_draft_input(name: str, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether sglang's own dispatch (``SpeculativeAlgorithm.build_disagg_draft_input``) reaches the
    builtin's prefill->decode draft-input builder: called with that builder replaced by a marker, so
    the answer is sglang's behaviour, not the plugin's reading of it. 0.5.18 and 0.5.19 ship
    ``dflash_disaggregation.py`` and never call it."""
    module_name = f"sglang.srt.speculative.{name.lower()}_disaggregation"
    if importlib.util.find_spec(module_name) is None:
        return False
    reached = object()
    module = importlib.import_module(module_name)
    builders = [n for n in vars(module) if n.startswith("build_") and n.endswith("disagg_draft_input")]
    for builder in builders:  # 0.5.18's is build_dflash_family_disagg_draft_input
        monkeypatch.setattr(module, builder, lambda *a, **k: reached)
    dispatch = SpeculativeAlgorithm[name].build_disagg_draft_input
    return dispatch(**dict.fromkeys(inspect.signature(dispatch).parameters)) is reached


@pytest.mark.parametrize("mode", ("prefill", "decode"))
@pytest.mark.parametrize("builtin_name", ("DFLASH", "DSPARK"))
def test_disaggregation_is_served_wherever_the_builtin_serves_it(builtin_name, mode, monkeypatch) -> None:
    """Where this sglang builds the builtin's prefill->decode draft state, DSPARK_HARVEST resolves
    exactly as the builtin does; where it does not (DFLASH before 0.5.20), the plugin refuses with that
    reason instead of failing on the first transferred request."""
    from sglang_dspark_plugin.sglang_plugin.resolution import sglang_support

    flags = ("--disaggregation-mode", mode)
    served = builds_disagg_draft_input(builtin_name, monkeypatch)
    assert (builtin_name in sglang_support().disaggregation) is served
    if served:
        want = outcome(TARGET, builtin_name, DRAFT[builtin_name], *flags)
        got = outcome(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name], *flags)
        assert got[0] == want[0], (got, want)
        if got[0] == "resolved":
            assert {k: v for k, v in got[1].items() if got[1][k] != want[1][k]} == {}
        else:
            assert got[1:] == want[1:]
        return
    with pytest.raises(ServeRefusal) as info:
        resolve(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name], *flags)
    assert info.value.kind == "unsupported" and "build_disagg_draft_input" in info.value.message


def _plan(builtin_name: str) -> ServePlan:
    record, _ = resolve(TARGET, "DSPARK_HARVEST", DRAFT[builtin_name])
    return getattr(record, PLAN_ATTR)


def test_server_args_that_lost_the_plan_refuse_where_the_user_asked_for_the_plugin() -> None:
    lost = SimpleNamespace(speculative_draft_model_path="/d", speculative_algorithm="DSPARK_HARVEST")
    with pytest.raises(ServeRefusal, match="no serving plan"):
        builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, lost)
    if RESOLVE_ONCE:  # sglang keeps what the user passed: a rebuilt record still says DSPARK_HARVEST
        rebuilt = SimpleNamespace(
            speculative_draft_model_path="/d",
            speculative_algorithm="DSPARK",
            _raw_input={"speculative_algorithm": "DSPARK_HARVEST"},
        )
        with pytest.raises(ServeRefusal, match="no serving plan"):
            builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, rebuilt)
    plain = SimpleNamespace(speculative_draft_model_path="/d", speculative_algorithm="DSPARK")
    assert builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, plain) is None


def test_a_plan_that_contradicts_the_builtin_refuses() -> None:
    args = SimpleNamespace(speculative_algorithm="DSPARK", **{PLAN_ATTR: _plan("DFLASH")})
    with pytest.raises(GeometryError, match="DSPARK worker"):
        builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, args)


def test_a_platform_worker_sglang_chose_is_kept(plugin_log) -> None:
    """sglang returns an out-of-tree platform's worker first: the plugin never replaces it."""

    class PlatformWorker:
        pass

    args = SimpleNamespace(speculative_algorithm="DSPARK", **{PLAN_ATTR: _plan("DSPARK")})
    assert builtin.worker_after_create(PlatformWorker, SpeculativeAlgorithm.DSPARK, args) is None
    assert (
        builtin.worker_after_create(DSparkWorkerV2, SpeculativeAlgorithm.DSPARK, args) is HarvestDSparkWorker
    )


def test_where_the_early_rewrite_cannot_fire_the_registered_algorithm_refuses(monkeypatch) -> None:
    """One route: no second serving mechanism; the refusal says how to launch."""
    monkeypatch.setattr(builtin, "wants_plugin", lambda server_args: False)  # the rewrite stays inert
    with pytest.raises(ValueError, match="load_plugins"):
        resolve(TARGET, "DSPARK_HARVEST", DRAFT["DFLASH"])


# ------------------------------------------------------------------ one process, several launches

SEQUENCE = [
    ("DFLASH", "drafter-dflash", ()),
    ("DSPARK", "drafter-dspark", ()),
    ("DSPARK", "drafter-dspark-markov", ()),
    ("DSPARK", "drafter-dspark-markov", ("--speculative-dspark-block-size", "4")),
]
"""Plain launches after a ``DSPARK_HARVEST`` one, on the same drafts (the audit's leak)."""

_SEQUENCE_SCRIPT = r"""
import json, sys
from sglang.srt import plugins
plugins.load_plugins()
sys.path.insert(0, sys.argv[1])
import test_builtin as t
print("RESULT " + json.dumps(t.launch_summary(*json.loads(sys.argv[2])), sort_keys=True, default=str))
"""


def launch_summary(algorithm: str, drafter: str, flags: list[str]) -> dict:
    """Every resolved field (or the refusal) and the worker class sglang's factory returns."""
    draft = EMBEDDED.root / drafter
    result = outcome(TARGET, algorithm, draft, *flags)
    summary: dict = {"outcome": result[0], "fields": result[1] if result[0] == "resolved" else result[1:]}
    if result[0] == "resolved":
        record, view = resolve(TARGET, algorithm, draft, *flags)
        summary["plan"] = plan_of(record) is not None
        cls = SpeculativeAlgorithm[str(view.speculative_algorithm)].create_worker(record)
        summary["worker"] = f"{cls.__module__}.{cls.__qualname__}"
    return summary


def test_a_plugin_launch_leaves_no_state_for_later_plain_launches_in_the_process() -> None:
    register()
    for drafter in sorted({d for _, d, _ in SEQUENCE}):  # the plugin's launches first, on the same drafts
        record, _ = resolve(TARGET, "DSPARK_HARVEST", EMBEDDED.root / drafter)
        assert plan_of(record) is not None
    here = [launch_summary(a, d, list(f)) for a, d, f in SEQUENCE]
    for (algorithm, drafter, flags), got in zip(SEQUENCE, here, strict=True):
        fresh = subprocess.run(
            [
                sys.executable,
                "-c",
                _SEQUENCE_SCRIPT,
                str(Path(__file__).parent),
                json.dumps([algorithm, drafter, list(flags)]),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env={k: v for k, v in os.environ.items() if not k.startswith("MEMRA_DSPARK_")},
        )
        lines = [line for line in fresh.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, fresh.stderr[-3000:]
        want = json.loads(lines[-1][len("RESULT ") :])
        assert json.loads(json.dumps(got, sort_keys=True, default=str)) == want, (algorithm, flags)
        assert got["outcome"] == "resolved" and got["plan"] is False
        assert got["worker"].split(".")[-1] in ("DFlashWorkerV2", "DSparkWorkerV2")  # sglang's own


# ------------------------------------------------------------------ topologies (serving/topology.py)

ARM_DRAFTS = {
    "dflash": "drafter-dflash",
    "dspark": "drafter-dspark",
    "mask-fill DSpark": "drafter-dspark-maskfill",
}


def _plugin_owned(refusal: tuple) -> bool:
    """A refusal the plugin makes itself (its plan), not one of sglang's own checks."""
    return refusal[0] == "refused" and refusal[2].startswith("DSPARK_HARVEST")


def _matching_flags(arm: str, draft: Path) -> tuple[str, ...]:
    """The builtin's flags that serve what the plugin serves (mask-fill DSpark: DSPARK's gamma b-1)."""
    if arm != "mask-fill DSpark":
        return ()
    try:
        record, _ = resolve(TARGET, "DSPARK_HARVEST", draft)
    except ServeRefusal:
        return ()  # a release without the mask-fill layout: the plugin refuses every topology
    return (
        "--speculative-dspark-block-size",
        str(getattr(record, PLAN_ATTR).declared_args[flag_field(DSPARK_BLOCK_FLAG)]),
    )


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("topology", TOPOLOGIES, ids=[t.name for t in TOPOLOGIES])
def test_each_topology_is_served_where_the_table_says_and_as_the_builtin(arm, topology) -> None:
    """The topology table (doctor, the startup line, docs/sglang.md) is what this sglang does: the
    plugin resolves each topology exactly as the builtin with the matching flags, except where the
    plugin refuses what the builtin would serve wrongly; and the table says which."""
    draft = EMBEDDED.root / ARM_DRAFTS[arm]
    builtin_name = "DFLASH" if arm == "dflash" else "DSPARK"
    got = outcome(TARGET, "DSPARK_HARVEST", draft, *topology.flags)
    want = outcome(TARGET, builtin_name, draft, *topology.flags, *_matching_flags(arm, draft))
    if got[0] == "resolved":
        assert want[0] == "resolved", want
        assert {k: (v, want[1][k]) for k, v in got[1].items() if v != want[1][k]} == {}
    elif not _plugin_owned(got):
        assert got[1:] == want[1:]  # sglang's own refusal, word for word
    expected = MEASURED.get(sglang.__version__, {}).get(arm, {}).get(topology.name)
    if expected is None:  # a release outside the table: the startup line and doctor say so
        assert "not measured" in cell(sglang.__version__, arm, topology.name)
        return
    assert (got[0] == "resolved") == (expected == SERVED), (got, expected)
    if got[0] == "refused" and not _plugin_owned(got):
        assert want[0] == "refused"  # the table's refusal is the builtin's
