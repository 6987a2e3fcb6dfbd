"""Reading a checkpoint folder's config.json and its tensor names (safetensors headers, shard index)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..checkpoint.bounds import MAX_CONFIG_MEMBERS, check_layer_id_lists, check_tensor_count
from ..checkpoint.files import (
    MAX_CONFIG_BYTES,
    list_dir,
    printable,
    read_json,
)
from ..checkpoint.shards import read_index, read_safetensors_header
from ..errors import InvalidCheckpointError
from .locate import CONFIG

INDEX = "model.safetensors.index.json"

MARKOV_TABLES = ("markov_head.markov_w1.weight", "markov_head.markov_w2.weight")
"""Every Markov head type has these two tables, both [vocab_size, markov_rank] (sglang models/dspark.py)."""

DEEPSEEK_MARKOV_TABLES = re.compile(r"^mtp\.\d+\.markov_head\.(?:embed|head|markov_w1|markov_w2)\.weight$")
"""DeepSeek-V4's bundled DSpark head: ``mtp.<stage>.markov_head.embed`` / ``.head`` (sglang
``models/deepseek_v4_dspark.py`` loads them as ``markov_w1`` / ``markov_w2``, also spelled so), both
[vocab_size, markov_rank]."""

TableShapes = dict[str, tuple[str, tuple[int, ...]]]
"""Tensor name -> (the file that lists it, its shape)."""


def read_config(folder: Path) -> dict[str, Any]:
    """``folder/config.json`` as a JSON object; missing or not an object is refused."""
    path = folder / CONFIG
    data = read_json(
        path,
        "config",
        MAX_CONFIG_BYTES,
        "fix or re-export the config.",
        MAX_CONFIG_MEMBERS,
        "bounds.MAX_CONFIG_MEMBERS",
    )
    if data is None:
        raise InvalidCheckpointError(
            f"{printable(path)} is missing; a draft checkpoint needs its config.json (a SpecForge export "
            "writes it next to model.safetensors). Pass the folder that holds it.",
            where=printable(path),
        )
    if not isinstance(data, dict):
        raise InvalidCheckpointError(
            f"{printable(path)} holds a JSON {type(data).__name__}, expected an object; fix or re-export "
            "the config.",
            where=printable(path),
        )
    check_layer_id_lists(data, printable(path))  # before a list of millions is read id by id
    return data


def read_tensor_names(folder: Path) -> tuple[dict[str, str], TableShapes]:
    """Tensor name -> the file that lists it: safetensors headers plus the shard index; and the
    ``MARKOV_TABLES`` the headers list, name -> (file, shape).

    The index's shards are validated (names inside the folder) but need not be present: the census
    reads names, and a config-only download still has its index.
    """
    names: dict[str, str] = {}
    tables: TableShapes = {}
    weight_map = read_index(folder / INDEX)
    if weight_map is not None:
        names.update(dict.fromkeys(weight_map, INDEX))
    for entry in list_dir(folder):
        if entry.endswith(".safetensors") and not entry.startswith("."):
            # only the 8 length bytes and the header are read: a shard larger than memory is fine
            header = read_safetensors_header(folder / entry)
            names.update(dict.fromkeys(header, printable(entry)))
            check_tensor_count(len(names), printable(folder / entry))
            tables.update(
                (n, (printable(entry), t.shape))
                for n, t in header.items()
                if n.endswith(MARKOV_TABLES) or DEEPSEEK_MARKOV_TABLES.match(n)
            )
    return names, tables


__all__ = [
    "INDEX",
    "MARKOV_TABLES",
    "DEEPSEEK_MARKOV_TABLES",
    "TableShapes",
    "read_config",
    "read_tensor_names",
]
