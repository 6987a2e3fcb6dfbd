"""Registration against the real sglang: entry point, idempotence, contract refusal, the spec class.

The registered ``DSPARK_HARVEST`` is no serving route: a launch is served as the builtin its plan
names, and the plan reaches a spawned scheduler on the server args alone.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing as mp
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import pytest
import sglang
from checkpoints import FIXTURES, write_checkpoint
from conftest import PluginLog
from features import FOREIGN_DEFAULTS, RESOLUTION_HOOKS, RESOLVE_ONCE
from sglang.srt import plugins as sglang_plugins
from sglang.srt.server_args import prepare_server_args
from sglang.srt.speculative import spec_registry
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

import sglang_dspark_plugin.sglang_plugin
from sglang_dspark_plugin.serving import ServeRefusal
from sglang_dspark_plugin.sglang_plugin import contract, hooks, is_registered, register, resolution, workers
from sglang_dspark_plugin.sglang_plugin.spec_algo import DsparkHarvestSpecAlgo

NAME = "DSPARK_HARVEST"


def unregister() -> None:
    spec_registry._REGISTRY.pop(NAME, None)


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
    contract.require_worker_contract.cache_clear()  # checked again, with the broken entry
    assert register() is True
    assert plugin_log.at(logging.ERROR) == []
    with pytest.raises(contract.WorkerContractError) as info:
        _resolved(target_dir, write_checkpoint(checkpoint_dir, "zlab_dflash"))
    message = info.value.message
    assert isinstance(info.value, ValueError) and info.value.kind == "unsupported"
    assert "\n" not in message and "DFlashWorkerV2.no_such_method (missing)" in message
    assert f"sglang {sglang.__version__}" in message and "doctor" in message
    with pytest.raises(ServeRefusal, match="load_plugins"):  # the factory never serves a launch
        sglang_dspark_plugin.sglang_plugin._factory(SimpleNamespace())


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


def test_a_release_newer_than_the_last_measured_one_is_named_in_one_warning(
    monkeypatch: pytest.MonkeyPatch, plugin_log: PluginLog
) -> None:
    unregister()
    monkeypatch.setattr(contract, "sglang_version", lambda: "0.5.30")
    assert register() is True
    warnings = plugin_log.at(logging.WARNING)
    assert len(warnings) == 1 and "sglang 0.5.30" in warnings[0]
    assert "newer than the last release measured (0.5.23)" in warnings[0]


def test_contract_holds_for_this_sglang() -> None:
    statuses = contract.check_contract()
    assert [s.target for s in statuses if not s.ok] == []
    targets = {s.target for s in statuses}
    for module, qualname, _ in contract.PLUGIN_CONTRACT + list(workers.WORKER_CONTRACT):
        assert f"{module}.{qualname}" in targets
    assert ("sglang.srt.arg_groups.overrides._ForeignDefaults" in targets) is FOREIGN_DEFAULTS
    assert {"0.5.17", "0.5.23"} <= set(contract.SUPPORTED_SGLANG)  # the releases CI tests


def test_this_release_registers_with_the_untested_warning_unless_it_is_tested(
    plugin_log: PluginLog,
) -> None:
    unregister()
    assert register() is True
    warnings = [w for w in plugin_log.at(logging.WARNING) if "not a tested version" in w]
    tested = sglang.__version__ in contract.SUPPORTED_SGLANG
    assert len(warnings) == (0 if tested else 1)
    assert all(f"sglang {sglang.__version__} is not a tested version" in w for w in warnings)


# -- the spec class --------------------------------------------------------------------------------
def test_the_spec_class_conforms_and_only_refuses() -> None:
    spec_registry._assert_custom_spec_algo_conforms(DsparkHarvestSpecAlgo)  # sglang's own check
    own = {n for n in vars(DsparkHarvestSpecAlgo) if not n.startswith("__")}
    assert own == {"handle_server_args"}  # every predicate is CustomSpecAlgo's: no mirrored second route
    ours = inspect.signature(DsparkHarvestSpecAlgo.handle_server_args).parameters
    assert list(ours) == list(inspect.signature(CustomSpecAlgo.handle_server_args).parameters)
    algo = DsparkHarvestSpecAlgo(NAME, lambda server_args: object, supports_overlap=True)
    with pytest.raises(ServeRefusal, match="no serving plan"):
        algo.handle_server_args(SimpleNamespace(speculative_algorithm=NAME))


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
    if RESOLVE_ONCE:
        server_args.resolve_once()
    return server_args


@pytest.mark.parametrize("env", (None, "dflash", "dspark"), ids=lambda v: f"env={v!r}")
def test_the_builtins_factory_returns_the_arm_worker(
    env, target_dir: Path, checkpoint_dir: Path, monkeypatch
) -> None:
    name = "specforge_dflash"  # both arms can build it (no Markov head; the target's vocabulary)
    if env is not None:
        monkeypatch.setenv("MEMRA_DSPARK_HARVEST", env)
    assert register() is True
    server_args = _resolved(target_dir, write_checkpoint(checkpoint_dir, name))
    served_as = resolution.read_arg(server_args, "speculative_algorithm")
    cls = SpeculativeAlgorithm.from_string(served_as).create_worker(server_args)
    arm = env or FIXTURES[name].expect
    assert served_as == ("DFLASH" if arm == "dflash" else "DSPARK")
    assert cls is (workers.HarvestDFlashWorker if arm == "dflash" else workers.HarvestDSparkWorker)
    assert issubclass(cls, DFlashWorkerV2 if arm == "dflash" else DSparkWorkerV2)


def _scheduler_process(server_args, queue) -> None:  # runs in a spawned interpreter, like sglang's
    import os

    from sglang.srt.plugins import load_plugins
    from sglang.srt.runtime_context import publish
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as Algo

    from sglang_dspark_plugin.sglang_plugin.resolution import plan_of, read_arg

    load_plugins()
    publish(server_args, role="scheduler")
    algo = Algo.from_string(read_arg(server_args, "speculative_algorithm"))
    plan = plan_of(server_args)
    queue.put(
        {
            "type": type(algo).__name__,
            "is_dspark": algo.is_dspark(),
            "harvest_env": os.environ.get("MEMRA_DSPARK_HARVEST"),
            "plan": None if plan is None else [plan.harvest.name(), plan.geometry.verify_window],
            "worker_bases": [c.__name__ for c in algo.create_worker(server_args).__mro__],
        }
    )


def test_a_spawned_scheduler_gets_the_plan_from_the_server_args_alone(
    target_dir: Path, checkpoint_dir: Path, monkeypatch
) -> None:
    """A fresh interpreter (sglang spawns schedulers) serves the launcher's plan; it re-derives nothing,
    so the environment it inherits does not matter."""
    monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
    monkeypatch.setenv("MEMRA_DSPARK_HARVEST", "dspark")  # the launch's setting
    assert register() is True
    server_args = _resolved(target_dir, write_checkpoint(checkpoint_dir, "specforge_dflash"))
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST")  # not inherited: the plan alone carries the decision
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_scheduler_process, args=(server_args, queue))
    proc.start()
    result = queue.get(timeout=300)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    assert result["type"] == "SpeculativeAlgorithm" and result["is_dspark"] is True  # the builtin itself
    assert result["harvest_env"] is None
    assert result["plan"] == ["dspark", 5]  # block 4, shifted: 4 drafts, window 5
    assert result["worker_bases"][:2] == ["HarvestDSparkWorker", "_HarvestWorkerMixin"]
    assert "DSparkWorkerV2" in result["worker_bases"]
    assert resolution.ALGORITHM == NAME


# -- the version adapters --------------------------------------------------------------------------
def test_both_adapters_define_the_same_interface() -> None:
    from sglang_dspark_plugin.sglang_plugin import adapter_0517, adapter_0523

    names = set(adapter_0523.__all__)
    assert names == set(adapter_0517.__all__)
    interface = {"unwrap_record", "read_arg", "declare_args", "user_value", "register_rewrite", "CONTRACT"}
    assert interface <= names
    for name in names:
        a, b = getattr(adapter_0523, name), getattr(adapter_0517, name)
        if callable(a):
            assert inspect.signature(a) == inspect.signature(b), name


def test_the_adapter_is_the_one_this_sglang_needs() -> None:
    from sglang.srt import arg_groups

    chosen = resolution.adapter()
    has_hooks = (Path(arg_groups.__file__).parent / "resolution_hooks.py").is_file()
    assert chosen.__name__.endswith("adapter_0523" if has_hooks else "adapter_0517")
    assert has_hooks is RESOLUTION_HOOKS  # from 0.5.20 on
    assert all(contract.check_entry(*entry).ok for entry in chosen.CONTRACT)


def test_registering_the_rewrite_twice_registers_it_once() -> None:
    from sglang_dspark_plugin.sglang_plugin import builtin

    def registered() -> int:
        if RESOLUTION_HOOKS:
            from sglang.srt.arg_groups import resolution_hooks

            return sum(len(v) for v in resolution_hooks._HOOKS.values())
        from sglang.srt.plugins.hook_registry import HookRegistry

        return sum(len(v) for v in HookRegistry._hooks.values())

    first = builtin.register_early_hooks()
    count = registered()
    route = (
        "resolution_hooks"
        if RESOLUTION_HOOKS
        else ("post_init+resolve_once" if RESOLVE_ONCE else "post_init")
    )
    assert builtin.register_early_hooks() == first == route
    assert registered() == count
