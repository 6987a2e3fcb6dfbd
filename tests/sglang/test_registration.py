"""Registration against the real sglang: entry point, idempotence, contract refusal, the spec class.

The spec class is compared method by method with sglang's own enum members (DFLASH for the dflash
arm, DSPARK for the dspark arm), discovered by introspection, so a predicate sglang adds or changes
is caught here rather than in a scheduler process.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing as mp
from importlib import metadata
from pathlib import Path

import pytest
import sglang
import torch
from checkpoints import FIXTURES, write_checkpoint
from conftest import PluginLog
from sglang.srt import plugins as sglang_plugins
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative import spec_registry
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

import sglang_dspark_plugin.sglang_plugin
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.sglang_plugin import contract, hooks, is_registered, register, resolution, workers
from sglang_dspark_plugin.sglang_plugin.spec_algo import (
    ARM_DEPENDENT,
    ARM_INDEPENDENT,
    DsparkHarvestSpecAlgo,
    builtin_member,
)

NAME = "DSPARK_HARVEST"
IS_0523 = tuple(int(x) for x in sglang.__version__.split(".")[:3]) >= (0, 5, 23)
# Enum methods that are not predicates mirrored per arm: construction and worker creation.
NOT_MIRRORED = {
    "from_string",
    "register",
    "create_worker",
    "get_platform_worker_cls",
    "handle_server_args",
    "build_disagg_draft_input",
    "get_num_tokens_per_bs_for_target_verify",
    "resolve_max_speculative_num_draft_tokens",
    "create_future_map",
    "get_num_tokens_per_req_for_target_verify",
}


def enum_methods() -> set[str]:
    return {n for n, v in vars(SpeculativeAlgorithm).items() if callable(v) and not n.startswith("_")} | {
        n
        for n, v in vars(SpeculativeAlgorithm).items()
        if isinstance(v, classmethod) and not n.startswith("_")
    }


def unregister() -> None:
    spec_registry._REGISTRY.pop(NAME, None)


def algo_for(harvest: DsparkHarvest) -> DsparkHarvestSpecAlgo:
    algo = DsparkHarvestSpecAlgo(NAME, lambda server_args: object, supports_overlap=True)
    algo._harvest = harvest  # what handle_server_args caches once it has resolved the arm
    return algo


# -- entry point and registration ------------------------------------------------------------------
def test_entry_point_is_declared() -> None:
    eps = {ep.name: ep.value for ep in metadata.entry_points(group="sglang.srt.plugins")}
    assert eps.get("dspark_harvest") == "sglang_dspark_plugin.sglang_plugin:register"


def test_load_plugins_discovers_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    unregister()
    sglang_plugins._plugins_loaded = False
    with pytest.raises(ValueError):
        SpeculativeAlgorithm.from_string(NAME)
    sglang_plugins.load_plugins()
    algo = SpeculativeAlgorithm.from_string(NAME)
    assert isinstance(algo, DsparkHarvestSpecAlgo)
    assert algo.supports_overlap is True


def test_register_is_idempotent(plugin_log: PluginLog) -> None:
    unregister()
    assert register() is True
    first = spec_registry._REGISTRY[NAME]
    assert register() is True  # a second call must not raise "already registered"
    assert spec_registry._REGISTRY[NAME] is first
    assert plugin_log.at(logging.ERROR) == []


@pytest.mark.parametrize(
    "entry, problem",
    [
        (("sglang.srt.speculative.spec_info", "SpeculativeAlgorithm.no_such_hook", None), "missing"),
        (("sglang.srt.arg_groups.speculative_hook", "_handle_dflash", ("server_args", "nope")), "nope"),
        (("sglang.srt.no_such_module", "thing", None), "does not import"),
    ],
)
def test_broken_contract_registers_nothing(
    entry: tuple, problem: str, monkeypatch: pytest.MonkeyPatch, plugin_log: PluginLog
) -> None:
    unregister()
    monkeypatch.setattr(contract, "PLUGIN_CONTRACT", [*contract.PLUGIN_CONTRACT, entry])
    assert register() is False
    assert not is_registered()
    errors = plugin_log.at(logging.ERROR)
    assert len(errors) == 1
    line = errors[0]
    assert "\n" not in line
    assert f"{entry[0]}.{entry[1]}" in line and problem in line
    assert f"sglang {sglang.__version__}" in line and "doctor" in line
    # sglang keeps working for every other algorithm, and load_plugins does not raise either
    assert SpeculativeAlgorithm.from_string("DFLASH") is SpeculativeAlgorithm.DFLASH
    sglang_plugins._plugins_loaded = False
    sglang_plugins.load_plugins()
    assert not is_registered()


def test_broken_worker_contract_refuses_when_the_workers_are_needed(
    monkeypatch: pytest.MonkeyPatch, plugin_log: PluginLog, target_dir: Path, checkpoint_dir: Path
) -> None:
    # Registration checks only what it needs (no sglang worker module is imported there); the
    # workers' entries are checked when a DSPARK_HARVEST server resolves its arguments, and by the
    # worker factory, with the registration's message, before any weight loads.
    unregister()
    broken = ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.no_such_method", None)
    monkeypatch.setattr(workers, "WORKER_CONTRACT", [*workers.WORKER_CONTRACT, broken])
    monkeypatch.setattr(contract, "_WORKERS_CHECKED", False)
    assert register() is True
    assert plugin_log.at(logging.ERROR) == []
    with pytest.raises(contract.WorkerContractError) as info:
        _resolved(target_dir, write_checkpoint(checkpoint_dir, "zlab_dflash"))
    message = info.value.message
    assert isinstance(info.value, ValueError) and info.value.kind == "unsupported"
    assert "\n" not in message and "DFlashWorkerV2.no_such_method (missing)" in message
    assert f"sglang {sglang.__version__}" in message and "doctor" in message
    with pytest.raises(contract.WorkerContractError, match="no_such_method"):
        sglang_dspark_plugin.sglang_plugin._factory(None)


def test_a_failing_hook_registration_registers_nothing(
    monkeypatch: pytest.MonkeyPatch, plugin_log: PluginLog
) -> None:
    unregister()

    def broken() -> None:
        raise AttributeError("HookRegistry has no attribute '_hooks'")

    monkeypatch.setattr(hooks, "register_hooks", broken)
    assert register() is False
    assert not is_registered()  # the log line says NOT registered: sglang must agree
    errors = plugin_log.at(logging.ERROR)
    assert len(errors) == 1 and "NOT registered" in errors[0] and "_hooks" in errors[0]


def test_untested_version_registers_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, plugin_log: PluginLog
) -> None:
    unregister()
    monkeypatch.setattr(contract, "SUPPORTED_SGLANG", ("0.0.1",))
    assert register() is True
    warnings = plugin_log.at(logging.WARNING)
    assert len(warnings) == 1 and sglang.__version__ in warnings[0]


def test_contract_holds_for_this_sglang() -> None:
    statuses = contract.check_contract()
    assert [s.target for s in statuses if not s.ok] == []
    targets = {s.target for s in statuses}
    for module, qualname, _ in contract.PLUGIN_CONTRACT + list(workers.WORKER_CONTRACT):
        assert f"{module}.{qualname}" in targets
    assert ("sglang.srt.arg_groups.overrides._ForeignDefaults" in targets) is IS_0523
    assert sglang.__version__ in contract.SUPPORTED_SGLANG


# -- the spec class --------------------------------------------------------------------------------
def test_spec_class_defines_every_enum_method() -> None:
    missing = sorted(
        enum_methods()
        - {"from_string", "register", "get_platform_worker_cls"}
        - set(dir(DsparkHarvestSpecAlgo))
    )
    assert missing == []
    # the three methods the scheduler calls that CustomSpecAlgo lacks (research 2.3)
    for name in ("carries_draft_hidden_states", "create_future_map", "need_topk"):
        assert not hasattr(CustomSpecAlgo, name), name  # still lacking: else the override may be moot
        assert name in vars(DsparkHarvestSpecAlgo)


def test_predicate_lists_cover_the_enum() -> None:
    predicates = enum_methods() - NOT_MIRRORED
    assert predicates <= set(ARM_INDEPENDENT) | set(ARM_DEPENDENT)


def test_arm_independent_predicates_agree_between_builtins() -> None:
    for name in ARM_INDEPENDENT:
        if hasattr(SpeculativeAlgorithm.DFLASH, name):
            dflash = getattr(SpeculativeAlgorithm.DFLASH, name)()
            assert dflash == getattr(SpeculativeAlgorithm.DSPARK, name)(), name


@pytest.mark.parametrize("harvest", list(DsparkHarvest), ids=lambda h: h.name())
def test_predicates_mirror_the_builtin_member(harvest: DsparkHarvest) -> None:
    algo = algo_for(harvest)
    member = builtin_member(harvest)
    assert member is (
        SpeculativeAlgorithm.DFLASH if harvest is DsparkHarvest.DFLASH else SpeculativeAlgorithm.DSPARK
    )
    compared = 0
    for name in sorted(enum_methods() - NOT_MIRRORED):
        assert getattr(algo, name)() == getattr(member, name)(), name
        compared += 1
    assert compared >= 15
    for n in (3, 8, 17):
        for is_draft in (True, False):
            got = algo.get_num_tokens_per_req_for_target_verify(n, is_draft)
            assert got == member.get_num_tokens_per_req_for_target_verify(n, is_draft)
    assert algo.is_dflash() is (harvest is DsparkHarvest.DFLASH)
    assert algo.is_dspark() is (harvest is DsparkHarvest.DSPARK)


def test_unresolved_arm() -> None:
    algo = DsparkHarvestSpecAlgo(NAME, lambda server_args: object)
    assert algo.is_dflash_family() is True  # arm-independent: answers before resolution
    assert algo.need_topk() is False and algo.carries_draft_hidden_states() is False
    with pytest.raises(RuntimeError, match="not resolved"):
        algo.is_dspark()


@pytest.mark.parametrize(
    "method, parent",
    [
        ("__init__", CustomSpecAlgo.__init__),
        ("handle_server_args", CustomSpecAlgo.handle_server_args),
        ("create_future_map", SpeculativeAlgorithm.create_future_map),
        (
            "get_num_tokens_per_req_for_target_verify",
            SpeculativeAlgorithm.get_num_tokens_per_req_for_target_verify,
        ),
        ("need_topk", SpeculativeAlgorithm.need_topk),
        ("carries_draft_hidden_states", SpeculativeAlgorithm.carries_draft_hidden_states),
    ],
)
def test_signatures_conform(method: str, parent) -> None:
    ours = inspect.signature(getattr(DsparkHarvestSpecAlgo, method)).parameters
    theirs = inspect.signature(parent).parameters
    assert list(ours) == list(theirs)
    for name in ours:
        assert ours[name].kind == theirs[name].kind, name
        assert ours[name].default == theirs[name].default, name


@pytest.mark.parametrize("harvest", list(DsparkHarvest), ids=lambda h: h.name())
def test_create_future_map_on_cpu(harvest: DsparkHarvest) -> None:
    from sglang.srt.managers.overlap_utils import FutureMap

    class ReqToTokenPool:  # the two attributes FutureMap reads
        size = 4
        req_to_token = torch.zeros(4, 8, dtype=torch.int32)

    algo = algo_for(harvest)
    future_map = algo.create_future_map(torch.device("cpu"), ReqToTokenPool())
    assert isinstance(future_map, FutureMap)
    assert future_map.spec_algo is algo


# -- factory and lazy resolution in a scheduler-like process ---------------------------------------
def _resolved(target: Path, draft: Path):
    server_args = prepare_server_args(
        [
            "--model-path",
            str(target),
            "--speculative-algorithm",
            NAME,
            "--speculative-draft-model-path",
            str(draft),
            "--device",
            "cuda",  # the builtin it resolves to refuses cpu, as for a plain launch; no GPU is used
        ]
    )
    if IS_0523:
        server_args.resolve_once()
    return server_args


@pytest.mark.parametrize("env", (None, "dflash", "dspark"), ids=lambda v: f"env={v!r}")
def test_factory_returns_the_arm_worker(env, target_dir: Path, checkpoint_dir: Path, monkeypatch) -> None:
    name = "specforge_dflash"  # both arms can build it (no Markov head; the target's vocabulary)
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    assert register() is True
    server_args = _resolved(target_dir, write_checkpoint(checkpoint_dir, name))
    cls = SpeculativeAlgorithm.from_string(NAME).create_worker(server_args)
    arm = env or FIXTURES[name].expect
    assert cls is workers.worker_class_for(DsparkHarvest.from_name(arm))
    assert issubclass(cls, DFlashWorkerV2 if arm == "dflash" else DSparkWorkerV2)


def _scheduler_process(server_args, queue) -> None:  # runs in a spawned interpreter, like sglang's
    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import publish
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as Algo

    load_plugins()
    publish(server_args, role="scheduler")
    algo = Algo.from_string("DSPARK_HARVEST")
    queue.put(
        {
            "type": type(algo).__name__,
            "is_dflash": algo.is_dflash(),
            "is_dspark": algo.is_dspark(),
            "verify_tokens_draft": algo.get_num_tokens_per_req_for_target_verify(9, True),
            "worker_bases": [c.__name__ for c in algo.create_worker(server_args).__mro__],
        }
    )


def test_spawned_scheduler_resolves_the_arm(target_dir: Path, checkpoint_dir: Path, monkeypatch) -> None:
    """A fresh interpreter (sglang spawns schedulers) resolves the arm from the published args."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", "dspark")  # inherited by the child, as in sglang
    assert register() is True
    server_args = _resolved(target_dir, write_checkpoint(checkpoint_dir, "specforge_dflash"))
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_scheduler_process, args=(server_args, queue))
    proc.start()
    result = queue.get(timeout=300)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert result["type"] == "DsparkHarvestSpecAlgo"
    assert result["is_dspark"] is True and result["is_dflash"] is False
    assert result["verify_tokens_draft"] == 8  # DSPARK's draft worker runs gamma = window - 1 rows
    assert "DSparkWorkerV2" in result["worker_bases"]
    assert resolution.ALGORITHM == NAME


def test_every_override_keeps_its_parent_signature() -> None:
    """Each method the spec class defines has the parameter names of sglang's version of it."""
    checked = []
    for name, value in vars(DsparkHarvestSpecAlgo).items():
        if not callable(value) or name.startswith("__") and name != "__init__":
            continue
        parent = getattr(CustomSpecAlgo, name, None) or vars(SpeculativeAlgorithm).get(name)
        if parent is None:
            continue  # e.g. supports_mixed_chunk / is_uno on 0.5.17: defined by neither parent there
        ours = list(inspect.signature(value).parameters)
        theirs = list(inspect.signature(parent).parameters)
        assert ours == theirs, name
        checked.append(name)
    assert {"handle_server_args", "create_future_map", "is_dflash", "need_topk"} <= set(checked)
    assert ("resolve_max_speculative_num_draft_tokens" in checked) is IS_0523


@pytest.mark.parametrize("harvest", list(DsparkHarvest), ids=lambda h: h.name())
def test_resolved_predicates_are_the_builtins_own_methods(harvest: DsparkHarvest) -> None:
    """Once the arm is known (fallback route), each mirrored predicate is the builtin member's own bound
    method: the same call sglang makes for DFLASH/DSPARK, at the same cost."""
    algo = DsparkHarvestSpecAlgo(NAME, lambda server_args: object, supports_overlap=True)
    algo._resolve_arm(harvest)
    member = builtin_member(harvest)
    bound = [name for name in (*ARM_INDEPENDENT, *ARM_DEPENDENT) if hasattr(member, name)]
    assert len(bound) >= 15
    for name in bound:
        assert getattr(algo, name) == getattr(member, name), name
    assert algo.harvest is harvest
