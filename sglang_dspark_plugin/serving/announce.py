"""What a launch says of its plan (sglang-free): one line (``describe``), then, in the launcher and in
each scheduler that keeps the telemetry (``announce``), the topology line, the resolution's warnings and
the plan's advice, and the manifest, logged, and written where the launch asked for one.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from ..harvest import ENV_VAR
from .manifest import write_manifest
from .refusal import ALGORITHM
from .topology import topology_line

if TYPE_CHECKING:
    from .plan import ServePlan


def describe(plan: ServePlan) -> str:
    """One line: the harvest, where it came from, the builtin and the round geometry."""
    g, r = plan.geometry, plan.resolution
    if r.source == "env":
        src = f"env {ENV_VAR}={r.env_value!r}"
    elif r.source == "census":
        cast_votes = [f"{e.signal}={e.value!r}" for e in r.evidence if e.vote is not None]
        src = "census: " + ", ".join(cast_votes) if cast_votes else "census"
    else:
        src = "default (no training-strategy signal in the checkpoint; the historical mask-fill arm)"
    note = "" if plan.block_size_source == "config.json" else f" (from {plan.block_size_source})"
    if plan.narrowed:
        note += f", narrowed from the trained {plan.trained_block_size}"
    bundled = "" if plan.bundled is None else f" ({plan.bundled.describe()})"
    return (
        f"{ALGORITHM}: harvest={g.harvest.name()} ({plan.layout.describe()} semantics) from {src}; "
        f"block_size={g.block_size}{note}, drafts per round={g.gamma} "
        f"(rows {g.harvested_rows[0]}..{g.harvested_rows[-1]}), verify window={g.verify_window}; "
        f"checkpoint {plan.cfg.path}{bundled}"
    )


def announce(plan: ServePlan, logger: logging.Logger, *, write: bool = True) -> None:
    """Log the plan, its topology line, its warnings and advice, and its manifest; with ``write``,
    write the manifest where the launch asked for one (the launcher does; its scheduler processes
    only log)."""
    logger.info("%s", describe(plan))
    logger.info("%s %s", ALGORITHM, topology_line(plan.support.version, plan.layout.name))
    for warning in (*plan.resolution.warnings, *plan.advice):
        logger.warning("%s: %s", ALGORITHM, warning)
    logger.info("%s geometry manifest: %s", ALGORITHM, json.dumps(plan.manifest, sort_keys=True, default=str))
    path = plan.request.manifest_path
    if write and path:
        written = write_manifest(path, plan.manifest, protected=(plan.cfg.path, plan.request.target))
        logger.info("%s geometry manifest written to %s", ALGORITHM, written)


__all__ = ["announce", "describe"]
