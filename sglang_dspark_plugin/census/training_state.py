"""The ``strategy`` field of a SpecForge ``training_state.pt``, read without torch and without a tensor.

The state is a torch zip checkpoint: its directory and its ``data.pkl`` are bounded, and the pickle is
unpickled within budgets, with stand-ins for every tensor and storage and no class outside a short
list of plain containers (``state_pickle``).
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import IO, Any

from ..checkpoint.files import describe, open_regular, printable
from ..errors import InvalidCheckpointError
from .state_pickle import DICT_TYPES
from .state_pickle import StateUnpickler as _StateUnpickler

TRAINING_STATE = "training_state.pt"

MAX_STATE_PICKLE_BYTES = 32 * 2**20
"""The uncompressed size of a training state's ``data.pkl`` read at most. It holds the structure
only (tensor data sits in other zip members): about 100 bytes per tensor, so SpecForge's states,
optimizer included, stay far below; a pickle beyond it is a decompression bomb, not a state."""

MAX_STATE_DIRECTORY_BYTES = 4 * 2**20
"""The zip central directory read at most. torch.save writes a member a storage, ~80 bytes of
directory each, so this is some 50k storages; zipfile builds a ~450-byte object for every member
listed, so a directory of millions would cost gigabytes before the pickle is even found."""

MISSING = object()
"""The strategy of a training state that has no ``strategy`` field."""


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
        with handle:
            _check_directory(handle, where, fix)
            with zipfile.ZipFile(handle) as archive:
                data = _state_pickle(archive, where, fix)
            state = _StateUnpickler(data).load()
    except InvalidCheckpointError:
        raise
    except Exception as exc:  # BadZipFile, UnpicklingError, EOFError, MemoryError, ...: not usable
        raise InvalidCheckpointError(
            f"{where} cannot be read as a torch zip checkpoint without loading tensors ({describe(exc)}); "
            f"{fix}",
            where=where,
        ) from exc
    if type(state) not in DICT_TYPES:
        raise InvalidCheckpointError(
            f"{where} holds a {type(state).__name__}, expected SpecForge's training-state dict; {fix}",
            where=where,
        )
    return dict.get(state, "strategy", MISSING)


def _check_directory(handle: IO[bytes], where: str, fix: str) -> None:
    """Refuse a zip whose central directory is larger than ``MAX_STATE_DIRECTORY_BYTES``, before
    zipfile lists it (with the end record zipfile itself reads)."""
    end_record = getattr(zipfile, "_EndRecData")(handle)  # noqa: B009  # private, and zipfile's own
    if end_record is None:
        return  # not a zip: zipfile says so
    size = end_record[getattr(zipfile, "_ECD_SIZE")]  # noqa: B009
    if size > MAX_STATE_DIRECTORY_BYTES:
        raise InvalidCheckpointError(
            f"{where}: its zip directory is {size} bytes, more than the {MAX_STATE_DIRECTORY_BYTES} the "
            f"members of a training state take (~80 bytes each); {fix}",
            where=where,
        )


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


__all__ = [
    "TRAINING_STATE",
    "MAX_STATE_PICKLE_BYTES",
    "MAX_STATE_DIRECTORY_BYTES",
    "MISSING",
    "read_training_strategy",
]
