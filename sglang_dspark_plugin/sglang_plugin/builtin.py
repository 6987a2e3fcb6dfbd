"""Serve ``DSPARK_HARVEST`` AS the builtin it resolves to: DFLASH (mask-fill) or DSPARK (shifted).

sglang keys many checks and features on the algorithm's name. So the harvest is resolved at the START
of argument resolution and ``--speculative-algorithm DSPARK_HARVEST`` is rewritten to ``DFLASH`` or
``DSPARK``; from there sglang's own handler, checks and features run in their normal order, exactly as
for the builtin. What stays the plugin's:

* the rewrite itself, with the plugin's own refusals first (conflicting evidence, width flags that
  contradict the checkpoint, target layers sglang cannot capture, drafters the arm cannot build,
  prefill-decode disaggregation), and the startup line and manifest that link the builtin name back to
  ``DSPARK_HARVEST``;
* a private marker on the server args (``MARKER_ATTR``, it survives pickling and deepcopy) and in the
  environment (``MARKER_ENV``, exported before sglang spawns its schedulers), which makes
  ``SpeculativeAlgorithm.create_worker`` return the plugin's worker subclass (its telemetry, rank
  agreement, no-Markov route). A plain DFLASH/DSPARK launch has no marker and keeps sglang's worker.

Where the early hook runs: sglang 0.5.23, the resolution-hook API (``register_resolution_hook``) on the
``handle_model_source_paths`` step, plus a check on ``handle_other_validations`` (after
``handle_speculative_decoding``) that the geometry survived; sglang 0.5.17, a ``HookRegistry`` AROUND
hook on ``ServerArgs.__post_init__`` (``load_plugins()`` runs before any ``ServerArgs`` is built by the
launcher and the Engine). Where neither fires (a script that builds ``ServerArgs`` before
``load_plugins()``), the registered ``DSPARK_HARVEST`` algorithm still serves, with a warning.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

from ..errors import GeometryError
from ..harvest import DsparkHarvest
from .layout import layout_of
from .resolution import (
    ALGORITHM,
    Served,
    announce,
    declare_args,
    read_arg,
    unwrap_record,
)

logger = logging.getLogger("sglang_dspark_plugin.sglang_plugin")

MARKER_ATTR = "_dspark_harvest_served"
"""Private attribute on sglang's server args: what the plugin resolved ``DSPARK_HARVEST`` to."""

MARKER_ENV = "MEMRA_DSPARK_SERVED"
"""The same marker as JSON in the environment, for processes whose server args lost the attribute."""

SOURCE = f"{ALGORITHM} (resolved as builtin)"

RESOLUTION_STEP = "handle_model_source_paths"
CHECK_STEP = "handle_other_validations"
POST_INIT_TARGET = "sglang.srt.server_args.ServerArgs.__post_init__"
CREATE_WORKER_TARGET = "sglang.srt.speculative.spec_info.SpeculativeAlgorithm.create_worker"


def wants_plugin(server_args: Any) -> bool:
    """Whether these server args ask for ``DSPARK_HARVEST`` (before the rewrite)."""
    return str(read_arg(server_args, "speculative_algorithm") or "").upper() == ALGORITHM


def rewrite_to_builtin(server_args: Any) -> Served | None:
    """Resolve ``DSPARK_HARVEST`` and declare the builtin it serves as; ``None`` for any other algorithm."""
    from .spec_algo import override_steps_and_topk, served_or_refused

    record = unwrap_record(server_args)
    if not wants_plugin(record):
        return None
    s = served_or_refused(record)
    g = s.geometry
    layout = layout_of(s)
    builtin = layout.builtin
    override_steps_and_topk(record, builtin)
    # The builtin reads the block size from the checkpoint itself (a block-size flag that contradicts
    # it was refused above) and derives steps and topk; the plugin only names the builtin and the verify
    # window its harvest needs, so everything else resolves exactly as for a plain DFLASH/DSPARK launch.
    # A mask-fill DSpark drafter: sglang's DSPARK takes gamma from the config's block_size (a b-row block
    # read as b drafts plus a query row); its gamma is b-1, the rows the drafter was trained for.
    gamma_flag = {"speculative_dspark_block_size": g.gamma} if layout.mask_fill_dspark else {}
    declare_args(
        record,
        SOURCE,
        speculative_algorithm=builtin,
        speculative_num_draft_tokens=g.verify_window,
        **gamma_flag,
    )
    marker = {
        "harvest": g.harvest.name(),
        "builtin": builtin,
        "draft": str(read_arg(record, "speculative_draft_model_path")),
        "checkpoint": s.cfg.path,
        "verify_window": g.verify_window,
        "block_size": g.block_size,
        "sample_from_anchor": layout.sample_from_anchor,
    }
    setattr(record, MARKER_ATTR, marker)  # 0.5.23 seals fields but allows private names
    os.environ[MARKER_ENV] = json.dumps(marker, sort_keys=True)
    announce(s)
    logger.info(
        "%s: served as sglang's builtin %s (sglang reports the algorithm as %s from here on)",
        ALGORITHM,
        layout.describe(),
        builtin,
    )
    return s


def marker_of(server_args: Any) -> dict[str, Any] | None:
    """The plugin's marker for these server args: the attribute, else the environment's for this draft."""
    record = unwrap_record(server_args)
    marker = getattr(record, MARKER_ATTR, None)
    if isinstance(marker, dict):
        return marker
    raw = os.environ.get(MARKER_ENV)
    if not raw:
        return None
    try:
        marker = json.loads(raw)
    except ValueError:
        return None
    draft = str(read_arg(record, "speculative_draft_model_path"))
    if not isinstance(marker, dict) or draft not in (marker.get("draft"), marker.get("checkpoint")):
        return None
    return marker


def check_rewritten(server_args: Any) -> None:
    """After sglang's own speculative handling: the builtin kept the plugin's geometry."""
    marker = marker_of(server_args)
    if marker is None:
        return
    record = unwrap_record(server_args)
    got = {
        "speculative_algorithm": str(read_arg(record, "speculative_algorithm") or "").upper(),
        "speculative_num_draft_tokens": read_arg(record, "speculative_num_draft_tokens"),
    }
    want = {
        "speculative_algorithm": marker["builtin"],
        "speculative_num_draft_tokens": marker["verify_window"],
    }
    changed = {k: (got[k], v) for k, v in want.items() if got[k] != v}
    if changed:
        raise GeometryError(
            f"{ALGORITHM}: sglang's {marker['builtin']} handling changed what the {marker['harvest']} "
            f"harvest of {marker['checkpoint']} needs: "
            + ", ".join(f"{k} = {a!r}, needs {b!r}" for k, (a, b) in changed.items())
            + "; this sglang version is not supported (run `dspark-harvest doctor`).",
            where=", ".join(changed),
        )


# ---------------------------------------------------------------- the hooks sglang calls


def resolution_step(server_args: Any, previous: Any) -> None:
    """0.5.23 ``handle_model_source_paths``: sglang's step (draft paths resolved), then the rewrite."""
    previous(server_args)
    rewrite_to_builtin(server_args)


def check_step(server_args: Any, previous: Any) -> None:
    """0.5.23 ``handle_other_validations`` (after ``handle_speculative_decoding``): geometry intact."""
    previous(server_args)
    check_rewritten(server_args)


def post_init_around(original: Any, self: Any, *args: Any, **kwargs: Any) -> Any:
    """0.5.17 ``ServerArgs.__post_init__``: the rewrite first, then sglang's whole resolution."""
    rewrite_to_builtin(self)
    result = original(self, *args, **kwargs)
    check_rewritten(self)
    return result


def worker_after_create(result: Any, algorithm: Any, server_args: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER ``SpeculativeAlgorithm.create_worker``: the plugin's worker where the marker says so."""
    marker = marker_of(server_args)
    if marker is None:
        return None  # a plain DFLASH/DSPARK launch: sglang's own worker
    name = getattr(algorithm, "name", None)
    if name not in ("DFLASH", "DSPARK"):
        return None  # not a builtin the plugin resolves to (e.g. the registered custom algorithm)
    from . import contract

    contract.require_worker_contract()  # the workers' entries, deferred from registration
    from .workers import worker_class_for

    harvest = DsparkHarvest.from_name(marker["harvest"])
    if harvest is None or marker["builtin"] != name:
        raise GeometryError(
            f"{ALGORITHM}: sglang is building a {name} worker but the plugin resolved the draft to the "
            f"{marker['harvest']} harvest ({marker['builtin']}); refusing rather than serving the wrong "
            "convention. Restart the server with one MEMRA_DSPARK_HARVEST for every process.",
            where="speculative_algorithm",
        )
    return worker_class_for(harvest, name)


def register_early_hooks() -> str:
    """Register the rewrite hooks for this sglang version (idempotent); returns which route is used."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    if not any(h is worker_after_create for _, h, _ in HookRegistry._hooks.get(CREATE_WORKER_TARGET, [])):
        HookRegistry.register(CREATE_WORKER_TARGET, worker_after_create, HookType.AFTER)
    try:
        from sglang.srt.arg_groups import resolution_hooks
    except ImportError:  # 0.5.17: no resolution-hook API
        if not any(h is post_init_around for _, h, _ in HookRegistry._hooks.get(POST_INIT_TARGET, [])):
            HookRegistry.register(POST_INIT_TARGET, post_init_around, HookType.AROUND)
        return "post_init"
    for step, fn in ((RESOLUTION_STEP, resolution_step), (CHECK_STEP, check_step)):
        if fn not in resolution_hooks._HOOKS.get(step, []):
            resolution_hooks.register_resolution_hook(step)(fn)
    return "resolution_hooks"


__all__ = [
    "MARKER_ATTR",
    "MARKER_ENV",
    "rewrite_to_builtin",
    "marker_of",
    "check_rewritten",
    "register_early_hooks",
    "worker_after_create",
]
