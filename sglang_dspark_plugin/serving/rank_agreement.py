"""Every tensor-parallel rank must serve the same harvest: compare, and refuse startup when they differ.

A rank that resolves another convention (a different ``MEMRA_DSPARK_HARVEST`` on another node, another
draft path) would harvest different rows than its peers; the round would be split across conventions.
So each rank all-gathers its resolved values once, at worker start, and every rank raises the same
error, with the whole table, when any value differs. sglang-free: plain ``torch.distributed``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from ..errors import DsparkHarvestError
from ..harvest import ENV_VAR

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg
    from ..geometry import RoundGeometry
    from ..harvest import Resolution
    from .plan import ServePlan


class RankDisagreementError(DsparkHarvestError):
    """Ranks of one tensor-parallel group resolved different harvest settings."""

    kind = "rank_disagreement"
    multiline = True  # the rank table, one line per rank (its cells are repr()s)

    def __init__(self, message: str, *, table: Sequence[Mapping[str, Any]], differing: Sequence[str]):
        super().__init__(message, where="tensor-parallel group")
        self.table = [dict(row) for row in table]
        self.differing = list(differing)


def _keys(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of any rank, in first-seen order."""
    keys: list[str] = []
    for row in table:
        keys.extend(k for k in row if k not in keys)
    return keys


def format_rank_table(table: Sequence[Mapping[str, Any]], differing: Sequence[str] = ()) -> str:
    """One line per rank, one column per key; differing columns are marked with ``*``."""
    keys = _keys(table)
    header = ["rank"] + [f"{k}*" if k in differing else k for k in keys]
    rows = [[str(r)] + [repr(row.get(k)) for k in keys] for r, row in enumerate(table)]
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [header, *rows]]
    return "\n".join(line.rstrip() for line in lines)


def differing_keys(table: Sequence[Mapping[str, Any]]) -> list[str]:
    """The keys whose value is not the same on every rank (a key missing on a rank differs)."""
    missing = object()
    return [k for k in _keys(table) if len({repr(row.get(k, missing)) for row in table}) > 1]


def agreement_values(
    draft: str, cfg: DflashCfg, resolution: Resolution, geometry: RoundGeometry
) -> dict[str, Any]:
    """What every rank must agree on: the harvest, its source, the geometry, and the draft.

    The draft is compared as the user named it (``--speculative-draft-model-path``, the same string
    on every node) and by a fingerprint of its content (config, tensor names, dtypes and shapes, read
    from the safetensors headers), never by the folder it resolved to: two nodes whose Hugging Face
    caches sit at different paths hold the same checkpoint in different folders.
    """
    from ..checkpoint.headers import content_fingerprint, tensor_headers

    return {
        "harvest": resolution.harvest.name(),
        "source": resolution.source,
        "env_value": resolution.env_value,
        "block_size": geometry.block_size,
        "gamma": geometry.gamma,
        "verify_window": geometry.verify_window,
        "draft": str(draft),
        "draft_content": content_fingerprint(cfg.raw, tensor_headers(cfg.path)),
    }


def check_rank_agreement(local: Mapping[str, Any], group: Any = None) -> list[dict[str, Any]]:
    """All-gather ``local`` over ``group`` and return every rank's values when they all agree.

    ``group`` is a CPU-capable process group (sglang's gloo ``cpu_group`` of the TP group); ``None``
    means the default group. Without an initialised process group (a single process) there is
    nothing to compare and the local values are returned. Raises ``RankDisagreementError`` on every
    rank, with the table, when any value differs.
    """
    row = dict(local)
    if not (dist.is_available() and dist.is_initialized()):
        return [row]
    world = dist.get_world_size(group)
    if world <= 1:
        return [row]
    table: list[Any] = [None] * world
    dist.all_gather_object(table, row, group=group)
    differing = differing_keys(table)
    if differing:
        raise RankDisagreementError(
            "tensor-parallel ranks resolved different harvest settings "
            f"(differing: {', '.join(differing)}); startup is refused rather than serving a split "
            "round:\n"
            f"{format_rank_table(table, differing)}\n"
            f"Fix: give every node the same {ENV_VAR} (or leave it unset everywhere so the census "
            "decides), the same --speculative-draft-model-path and the same checkpoint behind it "
            "(draft_content fingerprints its config and tensor shapes).",
            table=table,
            differing=differing,
        )
    return table


def plan_agreement_values(plan: ServePlan) -> dict[str, Any]:
    """``agreement_values`` of a serving plan: what every TP rank of its server must agree on."""
    return agreement_values(plan.draft, plan.cfg, plan.resolution, plan.geometry)


__all__ = [
    "plan_agreement_values",
    "RankDisagreementError",
    "agreement_values",
    "check_rank_agreement",
    "differing_keys",
    "format_rank_table",
]
