"""A checkpoint's safetensors headers and its shard index, read without trusting them (no torch, no
sglang): a header is read on its own (8 bytes + the header, bounded), never the file; an index may only
name files inside the checkpoint folder."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any

from ..errors import InvalidCheckpointError, printable
from .bounds import (
    MAX_HEADER_TENSORS,
    MAX_TENSORS,
    METADATA_MEMBERS,
    check_members,
    check_metadata,
    tensor_entry,
)
from .files import open_regular, os_error, parse_json, read_json, regular_file

MAX_INDEX_BYTES = 64 * 2**20
"""A shard index: about 80 bytes per tensor, so 64 MiB is some 800k tensors."""
MAX_SAFETENSORS_HEADER_BYTES = 100_000_000
"""The safetensors library's own limit on a header."""


# -- safetensors headers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its safetensors header describes it (no data)."""

    dtype: str
    shape: tuple[int, ...]


_HEADER_MEMBERS = 4 * MAX_HEADER_TENSORS + METADATA_MEMBERS  # a tensor: name, dtype, shape, data_offsets
_HEADER_BOUND = (
    f"bounds.MAX_HEADER_TENSORS: {MAX_HEADER_TENSORS} tensors a file, four members each, plus "
    f"{METADATA_MEMBERS} of metadata"
)
_SHARD_FIX = "re-save the weights in shards of fewer tensors (save_pretrained(max_shard_size=...))."
"""A complete file can exceed the bound: the fix is a re-export in smaller shards, not a re-download."""


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, TensorInfo]:
    """Tensor name -> dtype and shape, from the header alone (8 + header bytes are read, nothing else).

    The header is validated the way the safetensors library validates it (offsets inside the file,
    contiguous, covering the data exactly, sized by dtype and shape), so a truncated or corrupt file is
    refused here rather than when the weights load.
    """
    where = printable(os.fspath(path))
    fix = "the file is truncated or not a safetensors file; re-download or re-export it."
    opened = open_regular(path, "safetensors file", "remove it or replace it with the real weights.")
    if opened is None:
        raise InvalidCheckpointError(f"{where} is missing; {fix}", where=where)
    handle, size = opened
    with handle:
        try:
            prefix = handle.read(8)
            n = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            if n < 0 or n > MAX_SAFETENSORS_HEADER_BYTES or 8 + n > size:
                raise InvalidCheckpointError(
                    f"{where}: unreadable safetensors header (length {n} in a file of {size} bytes; "
                    f"at most {MAX_SAFETENSORS_HEADER_BYTES}); {fix}",
                    where=where,
                )
            raw = handle.read(n)
        except OSError as exc:
            raise os_error(path, exc, "safetensors file") from exc
    check_members(raw, _HEADER_MEMBERS, "safetensors header", where, _SHARD_FIX, bound=_HEADER_BOUND)
    header = parse_json(raw, f"{where} (safetensors header)", fix)
    if not isinstance(header, dict):
        raise InvalidCheckpointError(
            f"{where}: unreadable safetensors header (not an object); {fix}", where=where
        )
    data_len = size - 8 - n
    tensors: dict[str, TensorInfo] = {}
    spans: list[tuple[int, int, str]] = []
    for name, entry in header.items():
        if name == "__metadata__":
            check_metadata(entry, where, fix)
            continue
        dtype, shape, span = tensor_entry(name, entry, where, fix)
        tensors[name] = TensorInfo(dtype, shape)
        spans.append((*span, name))
    end = 0
    for start, stop, name in sorted(spans):
        if start != end:
            raise InvalidCheckpointError(
                f"{where}: unreadable safetensors header (tensor {printable(name, 80)} starts at byte "
                f"{start}, expected {end}: the tensors must tile the data); {fix}",
                where=where,
            )
        end = stop
    if end != data_len:
        raise InvalidCheckpointError(
            f"{where}: unreadable safetensors header (it describes {end} bytes of tensor data, the file "
            f"holds {data_len}); {fix}",
            where=where,
        )
    return tensors


# -- the shard index -------------------------------------------------------------------------------


def read_index(path: str | os.PathLike[str]) -> dict[str, str] | None:
    """``weight_map`` of a ``model.safetensors.index.json`` (tensor name -> shard file); ``None`` if absent.

    Every shard must be a string naming a file inside the checkpoint folder: an absolute path or a
    ``..`` component is refused, so a weight can never be loaded from outside the checkpoint.
    """
    fix = "fix it or delete it."
    bound = f"bounds.MAX_TENSORS: {MAX_TENSORS} tensors a checkpoint, plus {METADATA_MEMBERS} of metadata"
    data = read_json(path, "shard index", MAX_INDEX_BYTES, fix, MAX_TENSORS + METADATA_MEMBERS, bound)
    if data is None:
        return None
    where = printable(os.fspath(path))
    weight_map = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(weight_map, dict):
        raise InvalidCheckpointError(
            f"{where}: 'weight_map' must be an object of tensor name -> shard file, got "
            f"{type(weight_map).__name__}; {fix}",
            where=f"{where}:weight_map",
        )

    def key(shard: Any) -> str:  # the first entry that names ``shard``, for the message
        name = next(n for n, s in weight_map.items() if s is shard or s == shard)
        return f"{where}:weight_map[{printable(repr(name), 80)}]"

    for shard in weight_map.values():
        if type(shard) is not str or not shard:
            raise InvalidCheckpointError(
                f"{key(shard)} = {printable(repr(shard), 80)}, but a shard must be a file name (a "
                f"non-empty string) such as 'model-00001-of-00002.safetensors'; {fix}",
                where=key(shard),
            )
    for shard in set(weight_map.values()):  # a few distinct shards, however many tensors
        parts = PurePath(shard).parts
        if os.path.isabs(shard) or ".." in parts or "\x00" in shard or shard.startswith("~"):
            raise InvalidCheckpointError(
                f"{key(shard)} = {printable(repr(shard), 120)} points outside the checkpoint folder; a "
                "shard index may only name files inside it (a plain file name such as "
                "'model-00001-of-00002.safetensors'). Fix the index or delete it.",
                where=key(shard),
            )
    return weight_map


def shard_files(folder: str | os.PathLike[str], index: dict[str, str]) -> list[Path]:
    """The distinct shard files an index names, each checked to exist as a regular file in ``folder``."""
    out = []
    for shard in sorted(set(index.values())):
        path = Path(folder) / shard
        if regular_file(path, "shard", "replace it with the real shard file.") is None:
            raise InvalidCheckpointError(
                f"{printable(path)} is missing: the shard index names it; download the missing shard, "
                "or re-export the checkpoint.",
                where=printable(path),
            )
        out.append(path)
    return out


__all__ = [
    "MAX_INDEX_BYTES",
    "MAX_SAFETENSORS_HEADER_BYTES",
    "TensorInfo",
    "read_safetensors_header",
    "read_index",
    "shard_files",
]
