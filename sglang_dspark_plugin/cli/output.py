"""The command's output channel: a closed pipe, a full disk or an ASCII-only terminal is never a traceback.

``guarded_output()`` wraps stdout and stderr for the length of a command: a character the stream's
encoding cannot hold is written as a backslash escape, and a failing write becomes ``OutputError``,
which ``parser.main`` turns into an exit code (a closed pipe silently, as ``head`` expects; any other write
error with one line on stderr).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away
EXIT_OUTPUT_ERROR = 74  # EX_IOERR (sysexits.h): the output could not be written


class OutputError(Exception):
    """Writing the command's output failed; ``broken_pipe`` when the reader closed the pipe."""

    def __init__(self, stream: str, cause: OSError) -> None:
        super().__init__(f"cannot write to {stream}: {cause.strerror or cause}")
        self.stream = stream
        self.broken_pipe = isinstance(cause, BrokenPipeError)


class _Guarded:
    """A text stream whose write and flush failures raise ``OutputError`` (everything else passes)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream = stream
        self._name = name

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise OutputError(self._name, exc) from exc

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputError(self._name, exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _escape_unencodable(stream: TextIO) -> None:
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):  # a detached or closed stream keeps its settings
            reconfigure(errors="backslashreplace")


def _discard(stream: TextIO) -> None:
    """Point the stream's descriptor at /dev/null, so the interpreter's final flush cannot fail again."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


def report_output_error(error: OutputError, real_stdout: TextIO, real_stderr: TextIO) -> int:
    """Silence the broken stream and say why once on stderr (not for a closed pipe); the exit code."""
    _discard(real_stdout if error.stream == "stdout" else real_stderr)
    if error.broken_pipe:
        return EXIT_BROKEN_PIPE
    if error.stream == "stdout":
        with contextlib.suppress(OSError, ValueError):
            print(f"dspark-harvest: {error}", file=real_stderr, flush=True)
    return EXIT_OUTPUT_ERROR


@contextlib.contextmanager
def guarded_output() -> Iterator[tuple[TextIO, TextIO]]:
    """stdout and stderr guarded for the body; yields the real streams (for ``report_output_error``)."""
    real_stdout, real_stderr = sys.stdout, sys.stderr
    # a stream closed at the start (``>&-``) is None: write into nothing rather than fail on None
    null = open(os.devnull, "w") if real_stdout is None or real_stderr is None else None
    for stream in (real_stdout, real_stderr):
        if stream is not None:
            _escape_unencodable(stream)
    out, err = real_stdout or null, real_stderr or null
    assert out is not None and err is not None
    sys.stdout = _Guarded(out, "stdout")
    sys.stderr = _Guarded(err, "stderr")
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = real_stdout, real_stderr
        if null is not None:
            null.close()


__all__ = ["EXIT_BROKEN_PIPE", "EXIT_OUTPUT_ERROR", "OutputError", "guarded_output", "report_output_error"]
