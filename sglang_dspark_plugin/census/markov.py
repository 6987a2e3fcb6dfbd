"""The draft's Markov head: its rank from the config (checked against the tables by ``fields``) or,
when the config names none, from the ``markov_head.*`` tables; its type from the config or the
tables' parameter names. One reading, kept on ``DflashCfg.markov_head``, so no consumer digs into the
raw config or the tensors again."""

from __future__ import annotations

from ..checkpoint.headers import MARKOV_HEAD_PARAMETERS, MARKOV_W1
from .draft_config import MarkovHead
from .reading import TableShapes
from .view import ConfigView

HEAD_TYPES = ("vanilla", "gated", "rnn")
"""The Markov heads SpecForge trains and sglang builds (``models/dspark.py`` ``build_markov_head``)."""


def declared_head_type(view: ConfigView) -> str | None:
    """The head type the config declares first (top level, ``dspark_config``, ``dflash_config``, then
    sglang's ``dspark_markov_head_type``), lower-cased; ``None`` when it declares none. Whether sglang
    can build it is the serving plan's question (``HEAD_TYPES``), not the census's."""
    found = [
        *view.lookups("markov_head_type", ((), ("dspark_config",), ("dflash_config",))),
        *view.lookups("dspark_markov_head_type", ((),)),
    ]
    return next((str(v).lower() for _, v in found if v is not None), None)


def tensor_head_type(tensors: dict[str, str], w1: str) -> str | None:
    """The head type the parameters beside ``markov_w1`` name; ``None`` when they name no single one."""
    prefix = w1[: -len("markov_w1.weight")]
    parts = {n[len(prefix) :].split(".", 1)[0] for n in tensors if n.startswith(prefix)}
    types = {MARKOV_HEAD_PARAMETERS[p] for p in parts if p in MARKOV_HEAD_PARAMETERS}
    if parts - {"markov_w1", "markov_w2", *MARKOV_HEAD_PARAMETERS} or len(types) > 1:
        return None
    return types.pop() if types else "vanilla"


def read_markov_head(
    view: ConfigView,
    rank: int | None,
    tensors: dict[str, str],
    tables: TableShapes,
    dialect_head_type: str | None = None,
) -> MarkovHead | None:
    """The Markov head, or ``None`` without one (rank 0 declared, or no rank and no tables).

    ``dialect_head_type`` is the head an exporter's format always has (``dialects``), used where the
    config declares no type."""
    w1 = sorted(n for n in tables if n == MARKOV_W1 or n.endswith("." + MARKOV_W1))
    declared = declared_head_type(view) or dialect_head_type
    from_tensors = tensor_head_type(tensors, w1[0]) if w1 else None
    if rank is not None:
        # A rank the config declares needs its type declared beside it: sglang parses config.json
        # itself (and refuses a rank without a type) before any plugin code can answer.
        return MarkovHead(rank, declared, "config") if rank > 0 else None
    if not w1:
        return None
    shape = tables[w1[0]][1]
    if len(shape) != 2 or shape[1] < 1:
        raise view.invalid(
            f"{tables[w1[0]][0]}:{w1[0]}",
            list(shape),
            "a Markov head's markov_w1 is [vocab_size, markov_rank]",
            "re-export the checkpoint.",
        )
    return MarkovHead(int(shape[1]), declared or from_tensors, "tensors")


__all__ = ["HEAD_TYPES", "declared_head_type", "tensor_head_type", "read_markov_head"]
