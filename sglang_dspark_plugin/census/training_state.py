"""The ``strategy`` field of a SpecForge ``training_state.pt``, read without torch and without a tensor.

The state is a torch zip checkpoint; its ``data.pkl`` is unpickled with stand-ins for every tensor
and storage, and with no class outside a short list of plain containers.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from ..checkpoint_files import describe, open_regular, printable
from ..errors import InvalidCheckpointError

TRAINING_STATE = "training_state.pt"

MAX_STATE_PICKLE_BYTES = 32 * 2**20
"""The uncompressed size of a training state's ``data.pkl`` read at most. It holds the structure
only (tensor data sits in other zip members): about 100 bytes per tensor, so SpecForge's states,
optimizer included, stay far below; a pickle beyond it is a decompression bomb, not a state."""

MISSING = object()
"""The strategy of a training state that has no ``strategy`` field."""


class _Stub:
    """Stands in for a tensor or storage: never holds data, never runs torch code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        pass


def _rebuild(*args: Any, **kwargs: Any) -> _Stub:
    return _Stub()


_TORCH_REBUILDERS = frozenset(
    {
        "_rebuild_tensor",
        "_rebuild_tensor_v2",
        "_rebuild_tensor_v3",
        "_rebuild_parameter",
        "_rebuild_parameter_with_state",
        "_rebuild_device_tensor_from_numpy",
        "_rebuild_qtensor",
    }
)
# Plain containers a training state may hold; torch.Size is only ever a tuple of ints. torch.save
# pickles with protocol 2, which names the builtins module "__builtin__".
_CONTAINERS: dict[tuple[str, str], type] = {
    ("collections", "OrderedDict"): OrderedDict,
    ("torch", "Size"): tuple,
    **{(module, "set"): set for module in ("builtins", "__builtin__")},
    **{(module, "frozenset"): frozenset for module in ("builtins", "__builtin__")},
}


class _StateUnpickler(pickle.Unpickler):
    """Unpickles a torch checkpoint's ``data.pkl`` with stand-ins for every tensor and storage."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "torch._utils" and name in _TORCH_REBUILDERS:
            return _rebuild
        if module in ("torch", "torch.storage") and name.endswith("Storage"):
            return _Stub
        if (module, name) in _CONTAINERS:
            return _CONTAINERS[module, name]
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")

    def persistent_load(self, pid: Any) -> _Stub:
        return _Stub()


def read_training_strategy(path: Path) -> Any:
    """The ``strategy`` field of a SpecForge training_state.pt, read without loading tensors.

    ``None`` when there is no such file, ``MISSING`` when the state has no such field. The pickle is
    decompressed into memory only up to ``MAX_STATE_PICKLE_BYTES`` and unpickled from there, so a
    small file cannot expand without bound.
    """
    where = printable(path)
    fix = "remove it from the checkpoint folder or replace it with SpecForge's training_state.pt."
    opened = open_regular(path, "training state", fix)
    if opened is None:
        return None
    handle, _ = opened
    try:
        with handle, zipfile.ZipFile(handle) as archive:
            data = _state_pickle(archive, where, fix)
            state = _StateUnpickler(io.BytesIO(data)).load()
    except InvalidCheckpointError:
        raise
    except Exception as exc:  # BadZipFile, UnpicklingError, EOFError, MemoryError, ...: not usable
        raise InvalidCheckpointError(
            f"{where} cannot be read as a torch zip checkpoint without loading tensors ({describe(exc)}); "
            f"{fix}",
            where=where,
        ) from exc
    if type(state) not in (dict, OrderedDict):
        raise InvalidCheckpointError(
            f"{where} holds a {type(state).__name__}, expected SpecForge's training-state dict; {fix}",
            where=where,
        )
    # dict.get, not state.get: a pickle may give an OrderedDict instance attributes (BUILD), and an
    # attribute named "get" would shadow the method
    return dict.get(state, "strategy", MISSING)


def _state_pickle(archive: zipfile.ZipFile, where: str, fix: str) -> bytes:
    """The bytes of the archive's ``data.pkl``, at most ``MAX_STATE_PICKLE_BYTES`` of them."""
    members = [i for i in archive.infolist() if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")]
    if not members:
        raise InvalidCheckpointError(
            f"{where} is a zip without data.pkl, not a torch checkpoint; {fix}", where=where
        )
    if members[0].file_size > MAX_STATE_PICKLE_BYTES:
        raise InvalidCheckpointError(
            f"{where}: its data.pkl unpacks to {members[0].file_size} bytes, more than the "
            f"{MAX_STATE_PICKLE_BYTES} a training state's structure takes; {fix}",
            where=where,
        )
    with archive.open(members[0]) as member:
        # the declared size bounds what zipfile inflates; read one byte more to be sure
        data = member.read(MAX_STATE_PICKLE_BYTES + 1)
    if len(data) > MAX_STATE_PICKLE_BYTES:
        raise InvalidCheckpointError(
            f"{where}: its data.pkl unpacks to more than {MAX_STATE_PICKLE_BYTES} bytes; {fix}",
            where=where,
        )
    return data


__all__ = ["TRAINING_STATE", "MAX_STATE_PICKLE_BYTES", "MISSING", "read_training_strategy"]
