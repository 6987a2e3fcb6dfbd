"""Where the accept telemetry lives (sglang-free): a process's place in sglang's attention layout, and
whether it keeps the telemetry of its attention group. The glue reads the ranks from sglang
(``sglang_plugin.workers.attention_ranks``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionRanks:
    """A process's place in sglang's attention layout: ``tp_rank = (attn_dp_rank * attn_cp_size +
    attn_cp_rank) * attn_tp_size + attn_tp_rank`` (``layers/dp_attention.py``, both versions)."""

    tp_rank: int
    attn_tp_rank: int
    attn_cp_rank: int
    attn_dp_rank: int
    attn_dp_size: int


def telemetry_placement(ranks: AttentionRanks) -> tuple[bool, int | None]:
    """(whether this rank keeps the accept telemetry, the ``dp=`` tag of its lines).

    Every rank of one attention group (its attention-TP and context-parallel peers) verifies the same
    batch, so the first of them keeps the telemetry; with data-parallel attention each DP group runs
    its own batch, so each group's first rank keeps one, tagged with the group's DP rank. Without it
    that is TP rank 0 alone, untagged.
    """
    watches = ranks.attn_tp_rank == 0 and ranks.attn_cp_rank == 0
    return watches, (ranks.attn_dp_rank if ranks.attn_dp_size > 1 else None)


__all__ = ["AttentionRanks", "telemetry_placement"]
