"""Writing the geometry manifest where ``MEMRA_DSPARK_MANIFEST`` points, safely.

A regular file only, never through a symbolic link, never inside the draft or target checkpoint,
atomically (a temporary file in the same folder, then a rename), and never over a file that is not a
previous manifest: a mistyped path must not replace a checkpoint's ``config.json`` or weights, and a
FIFO must not block the launch. Each refusal is an ``InvalidCheckpointError`` naming the variable.
"""

from __future__ import annotations

import json
import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import InvalidCheckpointError, printable
from ..geometry import MANIFEST_SCHEMA, manifest_json
from ..settings import MANIFEST

PREVIOUS_LIMIT = 1 << 20
"""A previous manifest is a few KB; a larger file at the path is not one."""


def _refuse(path: str, why: str) -> InvalidCheckpointError:
    return InvalidCheckpointError(
        f"{MANIFEST.name}={printable(path, limit=200)!s}: {why}; point {MANIFEST.name} at a new file (or "
        "a previous manifest) outside the checkpoints, or unset it.",
        where=MANIFEST.name,
    )


def _inside(folder: Path, root: str | None) -> bool:
    if not root or not os.path.isdir(root):
        return False
    real = Path(root).resolve()
    return folder == real or real in folder.parents


def _is_previous_manifest(target: Path) -> bool:
    """Whether the regular file at ``target`` holds a manifest of this package (read without following
    a link, without blocking, at most ``PREVIOUS_LIMIT`` bytes)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(target, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        data = os.read(fd, PREVIOUS_LIMIT + 1)
    finally:
        os.close(fd)
    if len(data) > PREVIOUS_LIMIT:
        return False
    try:
        previous = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(previous, dict) and previous.get("schema") == MANIFEST_SCHEMA


def _checked_target(path: str, protected: Iterable[str | None]) -> Path:
    given = Path(path)
    if not given.name or given.name in (".", ".."):
        raise _refuse(path, "it names a folder, not a file")
    try:
        folder = given.parent.resolve(strict=True)
    except (OSError, RuntimeError) as err:
        raise _refuse(
            path, f"its folder does not exist or cannot be resolved ({err.__class__.__name__})"
        ) from err
    if any(_inside(folder, root) for root in protected):
        raise _refuse(path, "it is inside the draft or target checkpoint, whose files it could replace")
    target = folder / given.name
    try:
        mode = os.lstat(target).st_mode
    except FileNotFoundError:
        return target
    except OSError as err:
        raise _refuse(path, f"it cannot be examined ({err.strerror})") from err
    if stat.S_ISLNK(mode):
        raise _refuse(path, "it is a symbolic link (the manifest is never written through one)")
    if not stat.S_ISREG(mode):
        raise _refuse(path, "it is not a regular file (a FIFO, a device or a folder)")
    if not _is_previous_manifest(target):
        raise _refuse(path, "a file that is not a previous geometry manifest is already there")
    return target


def write_manifest(path: str, manifest: dict[str, Any], protected: Iterable[str | None] = ()) -> Path:
    """Write ``manifest`` to ``path`` atomically; ``protected``: checkpoint folders it must stay out of."""
    target = _checked_target(path, protected)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(manifest_json(manifest) + "\n")
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError as err:
        raise _refuse(path, f"it cannot be written ({err.strerror})") from err
    return target


__all__ = ["PREVIOUS_LIMIT", "write_manifest"]
