"""The contract: every sglang class, method and signature the plugin relies on, checked
(``util.contract_check``) so that a sglang that moved or renamed something is reported by name: the
registration's (``registration_contract``, checked by ``register()`` in every process), the workers'
(``workers.WORKER_CONTRACT``, slow to import: ``require_worker_contract()``, once per process when the
workers are first needed); ``dspark-harvest doctor`` checks both (``check_contract()``).
"""

from __future__ import annotations

import functools
import importlib

from ..releases import TESTED
from ..releases import installed_sglang as sglang_version
from ..serving.refusal import WorkerContractError, contract_mismatch
from ..serving.request import REQUEST_ARGS
from ..util.contract_check import Entry, HookStatus, check_class_fields, check_entry, parse_entries
from .hooks import HOOK_CONTRACT
from .resolution import adapter

SUPPORTED_SGLANG = TESTED  # the releases CI tests (0.5.17: the eval pin; 0.5.23: the current one)

PLUGIN_CONTRACT: list[Entry] = parse_entries(
    """
    sglang.srt.speculative.spec_info:
        SpeculativeAlgorithm.register(name, supports_overlap, spec_class)
        SpeculativeAlgorithm.from_string(name)
        SpeculativeAlgorithm.DFLASH
        SpeculativeAlgorithm.DSPARK
        SpeculativeAlgorithm.handle_server_args(server_args)
        SpeculativeAlgorithm.create_worker(server_args)  # builtin.worker_after_create
        # resolution.disaggregation_builtins reads which builtins its dispatch reaches
        SpeculativeAlgorithm.build_disagg_draft_input(batch, last_tokens_tensor, future_map)
        SpeculativeAlgorithm.create_future_map(device, req_to_token_pool, needs_cpu_seq_lens,
            needs_confidence_relay)
        SpeculativeAlgorithm.get_num_tokens_per_req_for_target_verify(num_draft_tokens, is_draft_worker)
        SpeculativeAlgorithm.carries_draft_hidden_states()
        SpeculativeAlgorithm.need_topk()
        SpeculativeAlgorithm.is_dflash_family()
    sglang.srt.speculative.spec_registry:
        CustomSpecAlgo.__init__(name, factory, supports_overlap, validate_server_args)
        CustomSpecAlgo.create_worker(server_args)
    sglang.srt.arg_groups.speculative_hook:
        _handle_dflash(server_args)
        _handle_dspark(server_args)
    sglang.srt.speculative.ragged_verify:
        read_ragged_verify_mode()
    sglang.srt.runtime_context:
        get_context()
    sglang.srt.plugins:
        load_plugins()
    sglang.srt.server_args:
        prepare_server_args(argv)
        ServerArgs
    """
)
"""What the registration and argument code relies on in every supported version."""

SERVER_ARGS_FIELDS = ("speculative_algorithm", "device", *REQUEST_ARGS)
"""ServerArgs fields the plugin reads or declares (``REQUEST_ARGS``: the plan's request)."""


def full_contract() -> list[Entry]:
    """The plugin's entries for the installed sglang (without the workers')."""
    return list(PLUGIN_CONTRACT) + list(adapter().CONTRACT)


def registration_contract() -> list[Entry]:
    """What ``register()`` checks: the plugin's entries and the hooks' (``hooks.HOOK_CONTRACT``)."""
    return full_contract() + list(HOOK_CONTRACT)


def check_contract(*, workers: bool = True) -> list[HookStatus]:
    """Check the registration's entries, the ServerArgs fields and (unless ``workers=False``, what
    ``register()`` checks: no worker module of sglang is imported) the workers' entries."""
    statuses = [check_entry(*entry) for entry in registration_contract()]
    statuses += check_class_fields("sglang.srt.server_args", "ServerArgs", SERVER_ARGS_FIELDS)
    if workers:
        statuses += check_worker_contract()
    return statuses


def check_worker_contract() -> list[HookStatus]:
    """Check the workers' entries (``workers.WORKER_CONTRACT``; imports sglang's worker and model modules)."""
    target = f"{__package__}.workers"
    try:
        entries = importlib.import_module(target).WORKER_CONTRACT
    except Exception as err:  # noqa: BLE001 - any import failure is a contract failure to report
        return [HookStatus(target, "WORKER_CONTRACT", None, False, f"does not import: {err!r}")]
    return [check_entry(*entry) for entry in entries]


def mismatch_message(missing: list[HookStatus], outcome: str) -> str:
    """``refusal.contract_mismatch`` for the installed sglang."""
    return contract_mismatch(sglang_version(), [(s.target, s.problem) for s in missing], outcome)


@functools.cache  # a check that raised is not cached: it runs again
def require_worker_contract() -> None:
    """Check the workers' entries once per process; raise ``WorkerContractError`` when any is missing."""
    missing = [s for s in check_worker_contract() if not s.ok]
    if missing:
        raise WorkerContractError(
            mismatch_message(missing, "cannot serve"), where=", ".join(s.target for s in missing[:6])
        )
