"""The folder ``declare`` writes: a checkpoint's files mirrored beside a new config.json, atomically,
with a typed refusal (and nothing left behind) for everything that can go wrong on the way."""

from __future__ import annotations

import errno
import json
import os
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..checkpoint.files import describe
from ..errors import InvalidCheckpointError, UsageError, WriteError, printable
from .locate import CONFIG


def write_folder(source: Path, target: Path, config: dict[str, Any], copy_files: bool) -> int:
    """Write ``target``: ``source``'s files (linked, or copied with ``copy_files``) and ``config`` as its
    config.json; the count of the other files. What a loader would read is listed first
    (``_source_files``), so a source that cannot be mirrored whole is refused before anything is
    written. ``target`` is claimed by creating it (a name another process creates first is refused,
    never shared); the folder is built in a staging folder of a fresh name this call created, then
    renamed over its own empty claim. A failure removes only what this call created (kind ``write``),
    and the source is never written to."""
    _require_new_folder(source, target)
    entries = _source_files(source)
    _claim(target)
    staging: Path | None = None
    try:
        staging = _staging(target)
        files = _mirror(source, staging, entries, copy_files)
        _write_config(staging / CONFIG, config)
        os.rename(staging, target)  # over the empty claim; ENOTEMPTY if another process filled it
    except BaseException as exc:
        _clean(staging, target)
        if isinstance(exc, OSError):
            raise _write_error(target, exc) from exc
        raise
    return files


def _require_new_folder(source: Path, target: Path) -> None:
    shown = printable(target, 200)
    try:
        os.lstat(target)
    except FileNotFoundError:
        pass
    except OSError as exc:  # a name past the file-name limit, a parent that is a file
        raise _write_error(target, exc) from exc
    else:
        raise UsageError(f"{shown} exists; name a new folder (declare never overwrites).", where="--out")
    if not target.parent.is_dir():
        raise UsageError(f"{printable(target.parent, 200)} is not a folder; create it first.", where="--out")
    if target.resolve().is_relative_to(source.resolve()):
        raise UsageError(
            f"{shown} lies inside the source {printable(source, 200)}; name a folder outside it.",
            where="--out",
        )


def _write_error(target: Path, exc: OSError) -> WriteError:
    why = exc.strerror or describe(exc)
    if exc.filename and os.fspath(exc.filename) != os.fspath(target):
        why += f" ({printable(exc.filename, 200)})"
    hint = {
        errno.ENOSPC: "free some space (a --copy needs the source's size; links need almost none)",
        errno.EDQUOT: "free some space (a --copy needs the source's size; links need almost none)",
        errno.EACCES: "name an --out in a folder you may write to",
        errno.EPERM: "name an --out in a folder you may write to",
        errno.EROFS: "name an --out on a writable file system",
        errno.ENAMETOOLONG: "name a shorter --out",
        errno.ENOTEMPTY: "another process wrote into --out meanwhile; name a new folder",
        errno.EEXIST: "another process wrote into --out meanwhile; name a new folder",
    }.get(exc.errno or 0, "fix what the error names and run it again")
    return WriteError(
        f"cannot write the declaration {printable(target, 200)}: {why}; {hint}. Nothing was left "
        "behind and the source is untouched.",
        where="--out",
    )


def _claim(target: Path) -> None:
    """Create ``target`` (empty): the atomic test that no one else has or takes the name."""
    try:
        target.mkdir()
    except FileExistsError as exc:
        raise UsageError(
            f"{printable(target, 200)} exists (created meanwhile?); name a new folder (declare never "
            "overwrites).",
            where="--out",
        ) from exc
    except OSError as exc:
        raise _write_error(target, exc) from exc


def _staging(target: Path) -> Path:
    """A new folder beside ``target`` under a fresh random name: this call's own, whatever else is there."""
    for _ in range(16):
        staging = target.parent / f".declaring-{secrets.token_hex(8)}"
        try:
            staging.mkdir()  # the user's umask, as the folder renamed into place keeps it
        except FileExistsError:
            continue
        return staging
    raise FileExistsError(errno.EEXIST, "no fresh staging name", str(target.parent))


def _clean(staging: Path | None, target: Path) -> None:
    """Remove what this call created: its staging folder and its claim on ``target`` (if still empty)."""
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)  # a name this call created, links removed not followed
    try:
        target.rmdir()  # only when empty: a folder another process filled is theirs
    except OSError:
        pass


def _write_config(path: Path, config: dict[str, Any]) -> None:
    with open(path, "x", encoding="utf-8") as out:
        out.write(json.dumps(config, indent=2) + "\n")
        out.flush()
        os.fsync(out.fileno())


@dataclass(frozen=True)
class _Entry:
    """One thing of the source to mirror: a folder or a regular file, at ``rel``."""

    rel: Path
    folder: bool


def _refuse_entry(source: Path, rel: Path, what: str) -> InvalidCheckpointError:
    shown = printable(source / rel, 200)
    return InvalidCheckpointError(
        f"{shown} {what}: a declaration must hold everything a loader reads, so declare refuses rather "
        "than leave it out. Remove it from the source, or fix it, and run it again.",
        where=shown,
    )


def _listing(source: Path, folder: Path, rel: Path) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        why = f"is a folder that cannot be listed ({exc.strerror or exc})"
        raise _refuse_entry(source, rel, why) from exc


def _kind_of(source: Path, rel: Path) -> bool:
    """Whether ``source / rel`` (links followed) is a folder; a refusal unless a folder or a readable
    regular file."""
    path = source / rel
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:  # a loop (ELOOP), a dangling link, no permission
        raise _refuse_entry(source, rel, f"cannot be followed ({exc.strerror or exc})") from exc
    if stat.S_ISDIR(mode):
        return True
    if not stat.S_ISREG(mode):
        raise _refuse_entry(source, rel, "is not a regular file (a FIFO, socket or device)")
    if not os.access(path, os.R_OK):
        raise _refuse_entry(source, rel, "cannot be read (permission denied)")
    return False


def _source_files(source: Path) -> list[_Entry]:
    """Every folder and regular file under ``source`` (links followed), or a refusal naming the first
    thing that cannot be mirrored: a FIFO, socket or device (never copied: a loader reads no such thing,
    and reading one can block or never end), a link that loops or leads nowhere, anything unreadable."""
    entries: list[_Entry] = []
    above: set[tuple[int, int]] = set()  # the folders being walked: a link back to one is a loop

    def walk(rel: Path) -> None:
        st = os.stat(source / rel)
        if (st.st_dev, st.st_ino) in above:
            raise _refuse_entry(source, rel, "is a link back into a folder above it (a loop)")
        above.add((st.st_dev, st.st_ino))
        for name in _listing(source, source / rel, rel):
            child = rel / name
            if child == Path(CONFIG):
                continue
            folder = _kind_of(source, child)
            entries.append(_Entry(child, folder))
            if folder:
                walk(child)
        above.discard((st.st_dev, st.st_ino))

    walk(Path("."))
    return entries


def _mirror(source: Path, staging: Path, entries: list[_Entry], copy_files: bool) -> int:
    """Link (or copy) every listed file into ``staging``, folders rebuilt; returns the count of files."""
    count = 0
    for entry in entries:
        dst = staging / entry.rel
        if entry.folder:
            dst.mkdir()
        elif copy_files:
            shutil.copyfile(source / entry.rel, dst)
            shutil.copystat(source / entry.rel, dst)
            count += 1
        else:
            dst.symlink_to(source / entry.rel)
            count += 1
    return count


__all__ = ["write_folder"]
