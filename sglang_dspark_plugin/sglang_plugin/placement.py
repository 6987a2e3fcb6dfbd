"""Where the accept telemetry lives: this process's place in sglang's attention layout, and whether it
keeps the telemetry of its attention group."""

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


def attention_ranks(tp_rank: int) -> AttentionRanks:
    """This process's attention ranks, as sglang published them (``runtime_context.get_parallel()``).

    Without a published topology for this TP rank (data-parallel attention never initialised, as in a
    CPU test) the TP group is one attention group: ``AttentionRanks(tp_rank, tp_rank, 0, 0, 1)``.
    """
    try:
        from sglang.srt.runtime_context import get_parallel

        p = get_parallel()
        ranks = AttentionRanks(
            int(p.tp_rank), int(p.attn_tp_rank), int(p.attn_cp_rank), int(p.attn_dp_rank), int(p.attn_dp_size)
        )
    except Exception:  # noqa: BLE001 - not initialised (or another layout): the TP rank alone
        return AttentionRanks(tp_rank, tp_rank, 0, 0, 1)
    return ranks if ranks.tp_rank == tp_rank else AttentionRanks(tp_rank, tp_rank, 0, 0, 1)


def telemetry_placement(ranks: AttentionRanks) -> tuple[bool, int | None]:
    """(whether this rank keeps the accept telemetry, the ``dp=`` tag of its lines).

    Every rank of one attention group (its attention-TP and context-parallel peers) verifies the same
    batch, so the first of them keeps the telemetry; with data-parallel attention each DP group runs
    its own batch, so each group's first rank keeps one, tagged with the group's DP rank. Without it
    that is TP rank 0 alone, untagged.
    """
    watches = ranks.attn_tp_rank == 0 and ranks.attn_cp_rank == 0
    return watches, (ranks.attn_dp_rank if ranks.attn_dp_size > 1 else None)


__all__ = ["AttentionRanks", "attention_ranks", "telemetry_placement"]
