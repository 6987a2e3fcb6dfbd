"""The contract: every sglang class, method and signature the plugin relies on, and a check of it.

An entry is ``(module, qualname, params)``: the object ``module.qualname`` must exist and, when
``params`` is a tuple, its signature must have every one of those parameter names (``None`` = only
existence). Two parts, checked when each is needed, so that a sglang that moved or renamed something
is reported by name instead of failing inside a scheduler process:

* the registration's entries (``registration_contract``: argument handling, the spec class, the
  hooks), in modules sglang has imported before ``load_plugins()``: ``register()`` checks them in every
  process and registers nothing on a mismatch;
* the workers' entries (``workers.WORKER_CONTRACT``), in sglang's worker and model modules, which take
  seconds to import: ``require_worker_contract()`` checks them once per process when the workers are
  first needed (argument resolution of a ``DSPARK_HARVEST`` server, the worker factory) and refuses
  with the same message.

``dspark-harvest doctor`` checks both (``check_contract()``).
"""

from __future__ import annotations

import importlib

from ..errors import DsparkHarvestError
from ..serving import ALGORITHM
from ..serving.releases import TESTED
from ..serving.releases import installed_sglang as sglang_version
from ..serving.request import REQUEST_ARGS
from ..util.contract_check import HookStatus, check_entry, check_fields
from .hooks import HOOK_CONTRACT
from .resolution import adapter

SUPPORTED_SGLANG = TESTED
"""Versions the plugin is tested against (0.5.17: the eval pin; 0.5.23: the current release)."""

Entry = tuple[str, str, "tuple[str, ...] | None"]

_SPEC_INFO = "sglang.srt.speculative.spec_info"
_REGISTRY = "sglang.srt.speculative.spec_registry"
_HOOK = "sglang.srt.arg_groups.speculative_hook"

PLUGIN_CONTRACT: list[Entry] = [
    (_SPEC_INFO, "SpeculativeAlgorithm.register", ("name", "supports_overlap", "spec_class")),
    (_SPEC_INFO, "SpeculativeAlgorithm.from_string", ("name",)),
    (_SPEC_INFO, "SpeculativeAlgorithm.DFLASH", None),
    (_SPEC_INFO, "SpeculativeAlgorithm.DSPARK", None),
    (_SPEC_INFO, "SpeculativeAlgorithm.handle_server_args", ("server_args",)),
    (_SPEC_INFO, "SpeculativeAlgorithm.create_worker", ("server_args",)),  # builtin.worker_after_create
    # resolution.disaggregation_builtins reads which builtins its dispatch reaches
    (
        _SPEC_INFO,
        "SpeculativeAlgorithm.build_disagg_draft_input",
        ("batch", "last_tokens_tensor", "future_map"),
    ),
    (
        _SPEC_INFO,
        "SpeculativeAlgorithm.create_future_map",
        ("device", "req_to_token_pool", "needs_cpu_seq_lens", "needs_confidence_relay"),
    ),
    (
        _SPEC_INFO,
        "SpeculativeAlgorithm.get_num_tokens_per_req_for_target_verify",
        ("num_draft_tokens", "is_draft_worker"),
    ),
    (_SPEC_INFO, "SpeculativeAlgorithm.carries_draft_hidden_states", ()),
    (_SPEC_INFO, "SpeculativeAlgorithm.need_topk", ()),
    (_SPEC_INFO, "SpeculativeAlgorithm.is_dflash_family", ()),
    (_REGISTRY, "CustomSpecAlgo.__init__", ("name", "factory", "supports_overlap", "validate_server_args")),
    (_REGISTRY, "CustomSpecAlgo.create_worker", ("server_args",)),
    (_HOOK, "_handle_dflash", ("server_args",)),
    (_HOOK, "_handle_dspark", ("server_args",)),
    ("sglang.srt.speculative.ragged_verify", "read_ragged_verify_mode", ()),
    ("sglang.srt.runtime_context", "get_context", ()),
    ("sglang.srt.plugins", "load_plugins", ()),
    ("sglang.srt.server_args", "prepare_server_args", ("argv",)),
    ("sglang.srt.server_args", "ServerArgs", None),
]
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
    """Check the registration's entries, the ServerArgs fields and the workers' entries.

    ``workers=False`` leaves out the workers' entries (what ``register()`` checks: no worker module of
    sglang is imported).
    """
    statuses = [check_entry(*entry) for entry in registration_contract()]
    statuses += check_fields("sglang.srt.server_args", "ServerArgs", SERVER_ARGS_FIELDS)
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


FIX = (
    "install a supported sglang (from a checkout of this package: pip install '.[sglang-0523]' or "
    "'.[sglang-0517]') and run `dspark-harvest doctor`"
)


def mismatch_message(missing: list[HookStatus], outcome: str) -> str:
    """One line: what the installed sglang lacks, what that means for the plugin, and the fix."""
    shown = "; ".join(f"{s.target} ({s.problem})" for s in missing[:6])
    more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
    return (
        f"sglang-dspark-plugin: {ALGORITHM} {outcome}: sglang {sglang_version()} lacks what the plugin "
        f"relies on: {shown}{more}; other speculative algorithms are unaffected; {FIX}."
    )


class WorkerContractError(DsparkHarvestError, ValueError):
    """The installed sglang lacks a class, method or parameter the workers rely on.

    A ``ValueError`` like sglang's own argument errors, so the launcher ends with the message.
    """

    kind = "unsupported"


_WORKERS_CHECKED = False


def require_worker_contract() -> None:
    """Check the workers' entries once per process; raise ``WorkerContractError`` when any is missing."""
    global _WORKERS_CHECKED
    if _WORKERS_CHECKED:
        return
    missing = [s for s in check_worker_contract() if not s.ok]
    if missing:
        raise WorkerContractError(
            mismatch_message(missing, "cannot serve"), where=", ".join(s.target for s in missing[:6])
        )
    _WORKERS_CHECKED = True
