"""Reading a checkpoint's own files without trusting them (no torch, no sglang).

Every file is stat-ed before it is opened and opened without blocking, so a FIFO or a device named
``config.json`` or ``*.safetensors`` is refused instead of hanging; every read is bounded; JSON is
read the way sglang and transformers read it (UTF-8, no byte-order mark) and a key repeated with two
values in one object is a conflict, not last-wins; a shard index may only name files inside the
checkpoint folder (``shards``); a safetensors header is read on its own (8 bytes + the header), never
the file.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import IO, Any

from ..errors import CensusConflictError, InvalidCheckpointError, printable
from .bounds import (
    check_members,
)

MAX_CONFIG_BYTES = 16 * 2**20
"""config.json, generation_config.json, ...: real ones are a few KiB (the largest seen, with a
vocabulary table inlined, under 2 MiB)."""
MAX_JSON_DEPTH = 64
"""The deepest nesting of arrays and objects any JSON the package reads may have (a checkpoint config
nests a few levels; a few hundred make ``copy.deepcopy`` and other recursive readers overflow)."""
_UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_32_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")


def describe(exc: BaseException) -> str:
    """An exception as ``Type: message``; never the bare ``()`` of a message-less MemoryError."""
    if isinstance(exc, MemoryError):
        return "MemoryError: ran out of memory"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {printable(text, 300)}" if text else type(exc).__name__


# -- stat and open -------------------------------------------------------------------------------


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"


def os_error(path: str | os.PathLike[str], exc: OSError | ValueError, what: str) -> InvalidCheckpointError:
    where = printable(os.fspath(path))
    if isinstance(exc, ValueError):  # an embedded NUL byte
        fix = "pass the path without it."
        return InvalidCheckpointError(f"{what} {where}: the path holds a NUL byte; {fix}", where=where)
    if isinstance(exc, PermissionError):
        fix = (
            "a folder on the way lacks search (x) permission or the file lacks read permission; "
            "fix the permissions (chmod) or run as a user who may read it."
        )
    elif exc.errno == errno.ENAMETOOLONG:
        fix = "a path component is longer than the file system allows (255 bytes); shorten it."
    elif exc.errno == errno.ELOOP:
        fix = "symbolic links loop; fix the link."
    else:
        fix = "check that the path is a readable local file."
    reason = exc.strerror or describe(exc)
    return InvalidCheckpointError(f"{what} {where} cannot be accessed ({reason}): {fix}", where=where)


def stat_path(path: str | os.PathLike[str], what: str = "path") -> os.stat_result | None:
    """``os.stat`` (following links); ``None`` when nothing is there, a typed error when it cannot tell."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (OSError, ValueError) as exc:
        raise os_error(path, exc, what) from exc


def is_dir(path: str | os.PathLike[str], what: str = "path") -> bool:
    """True for a directory (or a link to one); typed errors instead of PermissionError and the like."""
    st = stat_path(path, what)
    return st is not None and stat.S_ISDIR(st.st_mode)


def regular_file(path: str | os.PathLike[str], what: str, fix: str) -> os.stat_result | None:
    """The stat of a regular file; ``None`` when absent; refused when something else has the name."""
    st = stat_path(path, what)
    if st is not None and not stat.S_ISREG(st.st_mode):
        where = printable(os.fspath(path))
        raise InvalidCheckpointError(
            f"{what} {where} is {_kind(st.st_mode)}, not a regular file; {fix}", where=where
        )
    return st


def open_regular(path: str | os.PathLike[str], what: str, fix: str) -> tuple[IO[bytes], int] | None:
    """A regular file opened for reading, and its size; ``None`` when absent.

    Checked before opening, then opened with O_NONBLOCK and checked again on the descriptor, so a
    FIFO swapped in between is refused too instead of blocking the open.
    """
    if regular_file(path, what, fix) is None:
        return None
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise os_error(path, exc, what) from exc
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        where = printable(os.fspath(path))
        raise InvalidCheckpointError(
            f"{what} {where} is {_kind(st.st_mode)}, not a regular file; {fix}", where=where
        )
    return os.fdopen(fd, "rb"), st.st_size


def read_bounded(path: str | os.PathLike[str], what: str, limit: int, fix: str) -> bytes | None:
    """The whole file, refused (not read) when larger than ``limit`` bytes; ``None`` when absent."""
    opened = open_regular(path, what, fix)
    if opened is None:
        return None
    handle, size = opened
    where = printable(os.fspath(path))
    with handle:
        if size > limit:
            raise InvalidCheckpointError(
                f"{what} {where} is {size} bytes, more than the {limit} bytes such a file can "
                f"reasonably hold; {fix}",
                where=where,
            )
        try:
            data = handle.read(size + 1)  # not limit + 1: a read allocates what it is asked for
        except OSError as exc:
            raise os_error(path, exc, what) from exc
    if len(data) > size:  # it grew after the stat, or its size is not its length (a /proc file)
        raise InvalidCheckpointError(
            f"{what} {where} holds more than the {size} bytes its size says; {fix}", where=where
        )
    return data


# -- JSON ----------------------------------------------------------------------------------------


def _pairs_hook(where: str) -> Any:
    def no_conflicting_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out and out[key] != value:
                raise CensusConflictError(
                    f"{where}: key {printable(repr(key), 80)} appears twice in one object with different "
                    f"values ({printable(repr(out[key]), 80)}, then {printable(repr(value), 80)}); a "
                    "JSON reader silently keeps the last one, so the file says two things. Keep the one "
                    "that is right and delete the other.",
                    where=f"{where}:{printable(key, 80)}",
                )
            out[key] = value
        return out

    return no_conflicting_duplicates


def parse_json(data: bytes, where: str, fix: str) -> Any:
    """JSON as sglang and transformers read it: UTF-8 without a byte-order mark; duplicates checked."""
    if data.startswith(_UTF8_BOM):
        raise InvalidCheckpointError(
            f"{where} starts with a UTF-8 byte-order mark, which sglang and transformers reject "
            "(they read plain UTF-8); save it as UTF-8 without a BOM.",
            where=where,
        )
    if data.startswith(_UTF16_32_BOMS) or data[:4].count(0) >= 2:
        raise InvalidCheckpointError(
            f"{where} is UTF-16 or UTF-32 encoded, which sglang and transformers reject (they read "
            "UTF-8); save it as UTF-8.",
            where=where,
        )
    try:
        text = data.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_pairs_hook(where))
    except CensusConflictError:
        raise
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidCheckpointError(
            f"{where} is not valid UTF-8 JSON ({describe(exc)}); {fix}", where=where
        ) from exc
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise InvalidCheckpointError(
            f"{where} nests arrays and objects {depth} levels deep, more than the {MAX_JSON_DEPTH} any "
            f"config needs (MAX_JSON_DEPTH); {fix}",
            where=where,
        )
    return value


def json_depth(value: Any) -> int:
    """How deep ``value``'s arrays and objects nest (0 for a scalar), counted without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in children)
    return deepest


def read_json(
    path: str | os.PathLike[str],
    what: str,
    limit: int,
    fix: str,
    members: int | None = None,
    bound: str = "",
) -> Any:
    """A bounded, regular, UTF-8 JSON file; ``None`` when absent (the caller says what that means).

    With ``members``, a file whose objects may hold more members than that is refused unparsed, the
    message naming ``bound`` (the constant that sets it)."""
    data = read_bounded(path, what, limit, fix)
    if data is None:
        return None
    if members is not None:
        check_members(data, members, what, printable(os.fspath(path)), fix, bound=bound)
    return parse_json(data, printable(os.fspath(path)), fix)


def list_dir(folder: str | os.PathLike[str], what: str = "checkpoint folder") -> list[str]:
    """The names in ``folder``, sorted; typed errors for a folder that cannot be listed."""
    try:
        return sorted(os.listdir(folder))
    except (OSError, ValueError) as exc:
        raise os_error(folder, exc, what) from exc


__all__ = [
    "MAX_CONFIG_BYTES",
    "printable",
    "describe",
    "stat_path",
    "is_dir",
    "regular_file",
    "open_regular",
    "read_bounded",
    "parse_json",
    "json_depth",
    "MAX_JSON_DEPTH",
    "read_json",
    "list_dir",
]
