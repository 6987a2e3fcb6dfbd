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


HEAD_KEY_SPELLINGS: tuple[tuple[tuple[str, ...], str], ...] = (
    ((), "dspark_{key}"),
    (("dspark_config",), "{key}"),
    (("dflash_config",), "{key}"),
    (("text_config",), "{key}"),
    ((), "{key}"),
)
"""Where sglang's ``parse_dspark_draft_config`` reads the Markov head's ``markov_rank`` and
``markov_head_type``, in its order: the prefixed key, ``dspark_config`` (0.5.23 merges ``dflash_config``
under it, 0.5.17 does not read ``dflash_config``), ``text_config``, the top level (0.5.23
``speculative/dspark_components/dspark_config.py:206-264``; 0.5.17 ``:175-236``). The census reads these
(and SpecForge's ``dflash_config``) and requires them to agree, so no release reads another value than
the census; the route writes them (``serving.route.write_head``) and the engine reads them."""


def head_spellings(view: ConfigView, key: str) -> list[tuple[str, object]]:
    """``(dotted key, value)`` of every spelling of ``key`` the config holds, in sglang's order."""
    found: list[tuple[str, object]] = []
    for section, pattern in HEAD_KEY_SPELLINGS:
        found += view.lookups(pattern.format(key=key), (section,))
    return found


def declared_head_type(view: ConfigView) -> str | None:
    """The head type the config declares (lower-cased; every spelling must agree, or the config is
    refused: releases read them in different orders); ``None`` when it declares none. Whether sglang
    can build it is the serving plan's question (``HEAD_TYPES``), not the census's."""
    found = {k: str(v).lower() for k, v in head_spellings(view, "markov_head_type") if v is not None}
    agreed = view.agreed(found, "Markov head types", "keep the type the drafter was trained with.")
    return None if agreed is None else str(agreed[1])


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
