"""A figure written where a user's ``--plot`` names, never over what it must not replace.

One helper for ``check --plot`` and ``report --plot``: matplotlib is asked for cleanly (an install hint,
not a traceback); the path is refused when it is a link (written through, a link can land on anything),
a folder, one of the command's own inputs (``report x.log --plot x.log``), or an existing file that is
not already an image of the named format (a PNG replaces a PNG, never a log or a config) unless the
user asks (``--replace-plot``). The figure is written to a fresh file in the same folder and renamed into
place: an interrupted or failed write leaves the old file as it was.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import UsageError, printable

SIGNATURES: dict[str, tuple[bytes, ...]] = {
    "png": (b"\x89PNG\r\n\x1a\n",),
    "pdf": (b"%PDF-",),
    "ps": (b"%!PS",),
    "eps": (b"%!PS", b"\xc5\xd0\xd3\xc6"),
    "svg": (b"<?xml", b"<svg"),
    "svgz": (b"\x1f\x8b",),
    "jpg": (b"\xff\xd8\xff",),
    "jpeg": (b"\xff\xd8\xff",),
    "tif": (b"II*\x00", b"MM\x00*"),
    "tiff": (b"II*\x00", b"MM\x00*"),
    "webp": (b"RIFF",),
}
"""How a file of each format starts: an existing file that does not is not replaced unless asked."""

REPLACE_FLAG = "--replace-plot"


def require_matplotlib(what: str = "--plot") -> None:
    """Refuse cleanly where matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UsageError(
            f"{what} needs matplotlib; install it with `pip install sglang-dspark-plugin[plot]`.", where=what
        ) from exc


def _is_input(target: Path, inputs: Iterable[str]) -> str | None:
    for given in inputs:
        if given == "-":
            continue
        try:
            if os.path.samefile(given, target):
                return given
        except OSError:
            pass
        try:
            if Path(given).expanduser().resolve() == target.resolve():
                return given
        except (OSError, RuntimeError):
            pass
    return None


def _starts_like(target: Path, extension: str) -> bool:
    signatures = SIGNATURES.get(extension, ())
    try:
        fd = os.open(target, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        head = os.read(fd, 16)
    finally:
        os.close(fd)
    return any(head.startswith(s) for s in signatures)


def check_figure_path(
    path: str, *, inputs: Iterable[str] = (), replace: bool = False, what: str = "--plot"
) -> Path:
    """The file a figure may be written to, or a ``UsageError`` saying why not and what to do."""
    shown = printable(path, 200)
    target = Path(path).expanduser()
    if not target.name or target.name in (".", ".."):
        raise UsageError(
            f"{what} {shown} is a directory; give a file name in it, such as plot.png.", where=what
        )
    try:
        found = os.lstat(target)
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise UsageError(f"{what} {shown}: cannot look at it ({exc.strerror or exc}).", where=what) from exc
    if found is not None and stat.S_ISLNK(found.st_mode):
        raise UsageError(
            f"{what} {shown} is a symbolic link; name the file itself (a link may lead to an input or "
            "any other file, which the plot would replace).",
            where=what,
        )
    if found is not None and stat.S_ISDIR(found.st_mode):
        raise UsageError(
            f"{what} {shown} is a directory; give a file name in it, such as {shown.rstrip('/')}/plot.png.",
            where=what,
        )
    source = _is_input(target, inputs)
    if source is not None:
        raise UsageError(
            f"{what} {shown} is the input {printable(source, 200)}: the plot would replace it; name another "
            "file.",
            where=what,
        )
    extension = target.suffix[1:].lower()
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UsageError(f"{what} {shown} exists and is not a regular file; name another file.", where=what)
    if found is not None and not replace and not _starts_like(target, extension):
        raise UsageError(
            f"{what} {shown} exists and is not a .{printable(extension, 20)} image; name a new file, or "
            f"pass {REPLACE_FLAG} to replace it.",
            where=what,
        )
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(
            f"{what} {shown}: the folder {printable(folder, 200)} does not exist; create it first.",
            where=what,
        )
    return target


def _new_file_mode() -> int:
    """``0o666`` less this process's umask, read without changing it (Linux), else ``0o644``."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def save_figure(
    fig: Any, path: str, *, dpi: int, inputs: Iterable[str] = (), replace: bool = False, what: str = "--plot"
) -> None:
    """Write ``fig`` to ``path`` (checked by ``check_figure_path``), atomically."""
    target = check_figure_path(path, inputs=inputs, replace=replace, what=what)
    extension = target.suffix[1:].lower() or "png"
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        mode = _new_file_mode()
    shown = printable(path, 200)
    try:
        fd, temporary = tempfile.mkstemp(prefix=".plot-", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        raise UsageError(
            f"{what} {shown}: cannot write in its folder ({exc.strerror or exc}).", where=what
        ) from exc
    try:
        with os.fdopen(fd, "wb") as out:
            fig.savefig(out, format=extension, dpi=dpi)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except (OSError, ValueError) as exc:
        Path(temporary).unlink(missing_ok=True)
        detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else printable(str(exc), 200)
        raise UsageError(f"{what} {shown}: cannot write it ({detail}).", where=what) from exc
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["REPLACE_FLAG", "SIGNATURES", "check_figure_path", "require_matplotlib", "save_figure"]
