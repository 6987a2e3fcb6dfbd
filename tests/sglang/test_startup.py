"""What registering the plugin costs every sglang process, and what is checked when.

``register()`` runs in every sglang process; it checks the registration's entries and imports none of
sglang's worker or model modules. The hooks on targets in those modules are applied when (and if) the
process imports them. The workers' entries are checked when the workers are needed, and by
``dspark-harvest doctor`` (the full check); scripts/bench_register.py measures the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from sglang_dspark_plugin.sglang_plugin import contract, hooks, workers

HEAVY = (
    "sglang.srt.speculative.dspark_components.dspark_config",
    "sglang.srt.managers.scheduler_components.batch_result_processor",
    "sglang.srt.speculative.dflash_worker_v2",
    "sglang.srt.speculative.dspark_components.dspark_worker_v2",
    "sglang.srt.models.dspark",
    "sglang_dspark_plugin.sglang_plugin.workers",
)

FRESH_PROCESS = f"""
import json, sys
from sglang.srt.plugins import load_plugins  # what launch_server has imported by then
from sglang.srt.server_args import prepare_server_args

heavy = {HEAVY!r}
before = sorted(m for m in heavy if m in sys.modules)
load_plugins()
from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

registered = type(SpeculativeAlgorithm.from_string("DSPARK_HARVEST")).__name__
after = sorted(m for m in heavy if m in sys.modules)
# A scheduler imports these later: the hooks are applied then, and bound wherever they are imported.
from sglang.srt.speculative.dspark_components import dspark_config
from sglang.srt.models import dspark as dspark_models
from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang_dspark_plugin.sglang_plugin import hooks

parse = dspark_config.parse_dspark_draft_config
ours = (hooks.PARSE_HOOK_TARGET, hooks.RESULT_HOOK_TARGET)
print(json.dumps({{
    "registered": registered,
    "heavy_before": before,
    "heavy_after_load_plugins": after,
    "parse_hooked": getattr(parse, "__wrapped__", None) is not None,
    "parse_bound_in_models": dspark_models.parse_dspark_draft_config is parse,
    "result_hooked": hasattr(SchedulerBatchResultProcessor._resolve_spec_v2_tokens, "__wrapped__"),
    "patched": sorted(t for t in HookRegistry._patched if t in ours),
    "parse_hooks": len(HookRegistry._hooks[hooks.PARSE_HOOK_TARGET]),
    "finders_left": [type(f).__name__ for f in sys.meta_path if type(f).__name__ == "PatchOnImport"],
}}))
"""


def test_registration_imports_no_worker_module_and_hooks_them_on_import() -> None:
    env = dict(os.environ, SGLANG_PLUGINS="dspark_harvest")
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["registered"] == "DsparkHarvestSpecAlgo"
    assert out["heavy_before"] == [] and out["heavy_after_load_plugins"] == []
    assert out["parse_hooked"] and out["parse_bound_in_models"] and out["result_hooked"]
    assert out["patched"] == sorted([hooks.PARSE_HOOK_TARGET, hooks.RESULT_HOOK_TARGET])
    assert out["parse_hooks"] == 1 and out["finders_left"] == []


def test_the_registration_contract_leaves_the_workers_entries_to_later() -> None:
    registration = {s.target for s in contract.check_contract(workers=False)}
    full = {s.target for s in contract.check_contract()}
    worker_targets = {f"{m}.{q}" for m, q, _ in workers.WORKER_CONTRACT}
    assert not registration & worker_targets
    assert {f"{m}.{q}" for m, q, _ in hooks.HOOK_CONTRACT} <= registration
    assert registration | worker_targets <= full  # doctor's check: everything
    assert {f"{m}.{q}" for m, q, _ in hooks.TARGET_CONTRACT} <= worker_targets
    # Nothing in the registration's entries lives in a module that takes seconds to import.
    assert not {m for m, _, _ in contract.registration_contract()} & set(HEAVY)
