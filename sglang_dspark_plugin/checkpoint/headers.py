"""What a checkpoint's safetensors headers say, beyond the census: shapes, a content fingerprint, the
Markov head (sglang-free; no tensor data is read).

* ``content_fingerprint``: a digest of the config and every tensor's name, dtype and shape, so that two
  nodes can tell that their copies of a drafter are the same checkpoint wherever their caches sit.
* ``markov_head``: the Markov head the tensors hold (rank from ``markov_w1`` [vocab, rank], head type
  from the head's own parameters), for a config that does not declare one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidCheckpointError
from .bounds import check_tensor_count
from .files import list_dir, printable
from .shards import TensorInfo, read_safetensors_header

FINGERPRINT_IGNORED_KEYS = ("_name_or_path",)
"""Config keys that name where a copy was saved rather than what it holds."""

MARKOV_W1 = "markov_head.markov_w1.weight"
"""sglang's ``VanillaMarkov.markov_w1`` (an embedding, [vocab, rank]); every head type has it."""

MARKOV_HEAD_PARAMETERS = {"gate_proj": "gated", "joint_proj": "rnn"}
"""The parameter that tells a head type from the vanilla one (sglang ``models/dspark.py``:
``GatedMarkovHead.gate_proj``, ``RNNHead.joint_proj``); a head with neither is ``vanilla``."""


def tensor_headers(folder: str | os.PathLike[str]) -> dict[str, tuple[str, TensorInfo]]:
    """Tensor name -> (file, dtype and shape) over every ``*.safetensors`` file in ``folder``."""
    out: dict[str, tuple[str, TensorInfo]] = {}
    for entry in list_dir(folder):
        if entry.endswith(".safetensors") and not entry.startswith("."):
            for name, info in read_safetensors_header(Path(folder) / entry).items():
                out[name] = (printable(entry), info)
            check_tensor_count(len(out), printable(Path(folder) / entry))
    return out


def content_fingerprint(config: dict[str, Any], tensors: dict[str, tuple[str, TensorInfo]]) -> str:
    """``sha256:`` + 16 hex digits over the config and every tensor's name, dtype and shape.

    Identical for two copies of one checkpoint in different folders (the file names of the shards do
    not enter, nor ``_name_or_path``); different when a key of the config, a tensor name or a shape
    differs. Tensor values are not read: two trainings of one architecture share a fingerprint.
    """
    body = {
        "config": {k: v for k, v in config.items() if k not in FINGERPRINT_IGNORED_KEYS},
        "tensors": sorted([name, info.dtype, list(info.shape)] for name, (_, info) in tensors.items()),
    }
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class MarkovHeadTensors:
    """A Markov head as the tensors describe it."""

    rank: int
    head_type: str | None  # None: the parameters beside markov_w1/markov_w2 name no single head type
    vocab_size: int
    where: str  # "file:tensor name" of markov_w1, for messages


def markov_head(tensors: dict[str, tuple[str, TensorInfo]]) -> MarkovHeadTensors | None:
    """The Markov head in these tensors (``markov_head.*`` or a legacy ``*.markov_head.*``), or None."""
    w1 = sorted(n for n in tensors if n == MARKOV_W1 or n.endswith("." + MARKOV_W1))
    if not w1:
        return None
    file, info = tensors[w1[0]]
    prefix = w1[0][: -len("markov_w1.weight")]
    if len(info.shape) != 2 or min(info.shape) < 1:
        raise InvalidCheckpointError(
            f"{file}:{w1[0]} has shape {list(info.shape)}, but a Markov head's markov_w1 is "
            "[vocab_size, markov_rank]; re-export the checkpoint.",
            where=f"{file}:{w1[0]}",
        )
    parts = {n[len(prefix) :].split(".", 1)[0] for n in tensors if n.startswith(prefix)}
    types = {MARKOV_HEAD_PARAMETERS[p] for p in parts if p in MARKOV_HEAD_PARAMETERS}
    unknown = parts - {"markov_w1", "markov_w2", *MARKOV_HEAD_PARAMETERS}
    head_type = None if unknown or len(types) > 1 else (types.pop() if types else "vanilla")
    vocab, rank = info.shape
    return MarkovHeadTensors(int(rank), head_type, int(vocab), f"{file}:{w1[0]}")


__all__ = [
    "FINGERPRINT_IGNORED_KEYS",
    "MARKOV_W1",
    "MARKOV_HEAD_PARAMETERS",
    "MarkovHeadTensors",
    "tensor_headers",
    "content_fingerprint",
    "markov_head",
]
