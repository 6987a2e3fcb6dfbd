"""What a checkpoint's files may claim, bounded before anything is built from the claim.

A byte limit alone does not bound memory: a 64 MiB shard index of 6 million tiny entries parses into
1.6 GB of Python objects. So entry counts are bounded too, and before parsing: every member of a
JSON object has its ``:``, so counting them (a C-level pass) bounds the objects' members; a ``:``
inside a string only makes the count larger. A safetensors dtype or metadata entry that no loader
reads is refused as the safetensors library refuses it.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import InvalidCheckpointError, printable

if TYPE_CHECKING:
    from ..census.draft_config import Signal

MAX_TENSORS = 500_000
"""Tensors one checkpoint may name, over its index and every safetensors header. The largest
published checkpoints (DeepSeek-V3, Kimi K2 with per-expert scales) name about 100k-200k; each
name costs some 250 bytes of memory while it is read, so this is at most ~130 MB."""
MAX_HEADER_TENSORS = 100_000
"""Tensors one safetensors header may describe: a shard of the largest published checkpoints holds a
few thousand; each costs some 850 bytes while its header is parsed, so this is at most ~85 MB."""
METADATA_MEMBERS = 1_000
"""Object members allowed beside the tensors of an index or a header (``metadata``, ``__metadata__``)."""
MAX_CONFIG_MEMBERS = 1_000_000
"""Object members in a config.json: real ones hold hundreds (with a vocabulary inlined, ~100k)."""

MAX_LAYER_IDS = 64
"""Target layers a drafter may read (published drafters read 3 to 6); each id is ``< MAX_LAYER_ID``."""
MAX_LAYER_ID = 4096
"""Beyond the deepest published target (~130 layers) by far; a layer id is a small integer."""
LAYER_ID_KEYS = ("target_layer_ids", "dspark_target_layer_ids", "aux_hidden_state_layer_ids")
MAX_SIGNAL_CHARS = 1024
"""A piece of evidence as JSON, at most: it is written into the startup line, the manifest, every
alarm and the report, so a config value of megabytes must not become one."""

MAX_NDIM = 64
"""Dimensions of one tensor (models use up to ~6); bounds the work of multiplying a shape out."""

SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8,
    "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64,
}  # fmt: skip
"""Every dtype the safetensors library (0.8) reads, and its width in bits."""


def check_members(data: bytes, limit: int, what: str, where: str, fix: str, bound: str = "") -> None:
    """Refuse a JSON text whose objects may hold more than ``limit`` members, before parsing it;
    ``bound`` names the limit in the message (what it counts, the constant that sets it)."""
    members = data.count(b":")
    if members > limit:
        named = f" ({bound})" if bound else ""
        raise InvalidCheckpointError(
            f"{where}: this {what} has up to {members} JSON members, more than the {limit} it may hold"
            f"{named}; the limit bounds the memory parsing takes (~250 bytes a member); {fix}",
            where=where,
        )


def check_tensor_count(count: int, where: str) -> None:
    """Refuse a checkpoint that names more than ``MAX_TENSORS`` tensors (counted so far)."""
    if count > MAX_TENSORS:
        raise InvalidCheckpointError(
            f"{where}: the checkpoint names more than {MAX_TENSORS} tensors ({count} so far); the "
            "largest published checkpoints name ~200k. Remove the stray index or shard, or re-export it.",
            where=where,
        )


def tensor_bytes(dtype: str, shape: list[int]) -> int | None:
    """The bytes a tensor of ``dtype`` and ``shape`` takes; ``None`` for an unknown dtype or a sub-byte
    tensor that does not end on a byte boundary (the safetensors library refuses both)."""
    bits = SAFETENSORS_DTYPE_BITS.get(dtype)
    if bits is None:
        return None
    count = 1
    for d in shape:
        count *= d
    total = count * bits
    return None if total % 8 else total // 8


def tensor_entry(name: str, entry: Any, where: str, fix: str) -> tuple[str, tuple[int, ...], tuple[int, int]]:
    """A safetensors header's entry for tensor ``name``: its dtype, shape and data span, validated as
    the safetensors library validates them (a known dtype, a shape sized by its data_offsets)."""

    def bad(why: str) -> InvalidCheckpointError:
        return InvalidCheckpointError(
            f"{where}: unreadable safetensors header (tensor {printable(name, 80)}: {why}); {fix}",
            where=where,
        )

    if not isinstance(entry, dict):
        raise bad("not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str):
        raise bad("no dtype")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad("shape is not a list of non-negative integers")
    if len(shape) > MAX_NDIM:
        raise bad(f"a shape of {len(shape)} dimensions, more than the {MAX_NDIM} a model tensor can need")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise bad("data_offsets is not [start, end]")
    size = tensor_bytes(dtype, shape)
    if size is None:
        raise bad(
            f"dtype {printable(repr(dtype), 40)} {shape} is not one the safetensors library reads "
            "(or a sub-byte tensor that does not end on a byte boundary)"
        )
    if size != offsets[1] - offsets[0]:
        raise bad(f"{dtype} {shape} needs {size} bytes, data_offsets give {offsets[1] - offsets[0]}")
    return dtype, tuple(shape), (offsets[0], offsets[1])


def check_layer_id_lists(config: dict[str, Any], file: str) -> None:
    """Refuse a list of target layer ids (any spelling, top level or one section down) longer than
    ``MAX_LAYER_IDS`` or holding an integer id beyond ``MAX_LAYER_ID``, before anything reads it."""
    nodes = [("", config), *((f"{k}.", v) for k, v in config.items() if isinstance(v, dict))]
    for prefix, node in nodes:
        for key in LAYER_ID_KEYS:
            ids = node.get(key)
            if not isinstance(ids, list):
                continue  # the census says what a non-list is
            big = [i for i in ids[:MAX_LAYER_IDS] if type(i) is int and i >= MAX_LAYER_ID]
            if len(ids) > MAX_LAYER_IDS or big:
                what = f"{len(ids)} ids" if not big else f"the id {short_int(big[0])}"
                raise InvalidCheckpointError(
                    f"{file}: {prefix}{key} holds {what}, but a drafter reads at most {MAX_LAYER_IDS} "
                    f"target layers, each below {MAX_LAYER_ID}; set the layer ids the drafter was "
                    "trained with (published drafters read 3 to 6).",
                    where=f"{file}:{prefix}{key}",
                )


def short_int(n: int) -> str:
    """An integer for a message: its digits, or how many there are when they are too many to show."""
    return str(n) if n < 10**40 else f"<an integer of {n.bit_length()} bits>"


def bounded_evidence(evidence: list[Signal], file: str) -> list[Signal]:
    """``evidence``, refused when a signal's name or value, as JSON, is longer than ``MAX_SIGNAL_CHARS``."""
    for signal in evidence:
        size = max(len(signal.signal), len(json.dumps(signal.value, default=str)))
        if size > MAX_SIGNAL_CHARS:
            raise InvalidCheckpointError(
                f"{file}: the evidence {printable(signal.signal, 120)} is {size} characters long, more "
                f"than the {MAX_SIGNAL_CHARS} any setting or tensor name of a drafter takes; fix that "
                "value (or the tensor name) in the checkpoint.",
                where=printable(signal.signal, 200),
            )
    return evidence


def check_metadata(metadata: Any, where: str, fix: str) -> None:
    """A safetensors ``__metadata__``: an object of string values, as the library requires."""
    if not isinstance(metadata, dict):
        bad = f"is a JSON {type(metadata).__name__}"
    else:
        wrong = [k for k, v in metadata.items() if not isinstance(v, str)]
        if not wrong:
            return
        bad = f"[{printable(repr(wrong[0]), 60)}] is a {type(metadata[wrong[0]]).__name__}"
    raise InvalidCheckpointError(
        f"{where}: unreadable safetensors header (__metadata__ {bad}, but it must be an object of "
        f"strings; the safetensors library refuses it); {fix}",
        where=where,
    )


__all__ = [
    "MAX_TENSORS",
    "MAX_HEADER_TENSORS",
    "METADATA_MEMBERS",
    "MAX_CONFIG_MEMBERS",
    "MAX_NDIM",
    "MAX_LAYER_IDS",
    "MAX_LAYER_ID",
    "LAYER_ID_KEYS",
    "MAX_SIGNAL_CHARS",
    "SAFETENSORS_DTYPE_BITS",
    "check_members",
    "check_tensor_count",
    "tensor_bytes",
    "tensor_entry",
    "check_metadata",
    "check_layer_id_lists",
    "bounded_evidence",
    "short_int",
]
