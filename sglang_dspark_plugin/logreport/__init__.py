"""``dspark-harvest report``: a server's log, read back into what the plugin saw and what it means.

``read_logs`` streams each file in chunks (``-`` is stdin; a ``.gz`` file is read through gzip; rotated
files are given oldest first), keeps only the lines the grammar of ``lines`` trusts as the plugin's own,
and hands each to its attention-DP group (``groups.Group``), which replays the rounds through the
telemetry's own counter and alarm. Memory is bounded by bytes: a few chunks, lines cut at
``MAX_LINE_BYTES``, and per group a bounded state, whatever the input. A line that does not parse, or
whose values cannot be used, is counted (``malformed``), never fatal.
"""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import SettingsError, UsageError, printable
from . import engines
from .groups import Group
from .judge import group_json, group_verdict
from .lines import MAX_LINE_BYTES, ROUND, classify

EXIT_HEALTHY, EXIT_UNREADABLE, EXIT_MISALIGNED, EXIT_INCONCLUSIVE, EXIT_COLLAPSE = 0, 2, 3, 4, 5
VERDICT_CODES = {
    "healthy": EXIT_HEALTHY,
    "misaligned": EXIT_MISALIGNED,
    "collapse": EXIT_COLLAPSE,
    "inconclusive": EXIT_INCONCLUSIVE,
}
MAX_GROUPS = 4096
_ROUND_FIELDS = ("prefix", "round", "lengths", "bs", "mean", "harvest", "source", "dp")


@dataclass
class LogReport:
    """Every group's lines and what was set aside."""

    files: list[str]
    lines: int = 0
    plugin_lines: int = 0
    quoted: int = 0  # marker text after a quote: a request's text, ignored
    malformed: int = 0  # a marker after a trusted prefix, in no line's exact form, or unusable values
    overlong: int = 0  # lines longer than MAX_LINE_BYTES, skipped
    groups: dict[int | None, Group] = field(default_factory=dict)
    engine_lines: int = 0  # sglang's decode lines and vLLM's spec metrics lines read
    engine_groups: dict[tuple[str, int | None], engines.EngineGroup] = field(default_factory=dict)
    decode_log_interval: int = engines.DEFAULT_DECODE_LOG_INTERVAL

    def engine_group(self, engine: str, dp: int | None) -> engines.EngineGroup:
        """The group of ``engine``'s lines of DP rank ``dp`` (created at its first line)."""
        found = self.engine_groups.get((engine, dp))
        if found is None:
            if len(self.engine_groups) >= MAX_GROUPS:
                raise UsageError(f"more than {MAX_GROUPS} DP groups of {engine}'s lines", where="report")
            found = self.engine_groups[(engine, dp)] = engines.EngineGroup(engine, dp)
        return found

    def group(self, dp: int | None) -> Group:
        """The group of DP rank ``dp`` (created at its first line)."""
        found = self.groups.get(dp)
        if found is None:
            if len(self.groups) >= MAX_GROUPS:
                raise UsageError(f"more than {MAX_GROUPS} DP groups in the log", where="report")
            found = self.groups[dp] = Group(dp)
        return found

    def verdict(self) -> tuple[str, int]:
        """The worst group's verdict and its exit code: misaligned over collapse over healthy, the plugin's
        groups and the engines' alike; ``inconclusive`` only when no group holds enough rounds to judge
        (an engine's few lines beside the plugin's judged rounds change nothing)."""
        kinds = [group_verdict(g)[0] for g in self.groups.values()]
        kinds += [engines.verdict(g)[0] for g in self.engine_groups.values()]
        for kind in ("misaligned", "collapse", "healthy", "inconclusive"):
            if kind in kinds:
                return kind, VERDICT_CODES[kind]
        return "healthy", EXIT_HEALTHY

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report."""
        kind, code = self.verdict()
        ordered = sorted(self.groups.values(), key=lambda g: -1 if g.dp is None else g.dp)
        return {
            "files": self.files,
            "lines": self.lines,
            "plugin_lines": self.plugin_lines,
            "ignored_quoted": self.quoted,
            "malformed": self.malformed,
            "overlong": self.overlong,
            "groups": [group_json(g) for g in ordered],
            "engine_lines": self.engine_lines,
            "decode_log_interval": self.decode_log_interval,
            "engines": [
                engines.group_json(g)
                for g in sorted(
                    self.engine_groups.values(), key=lambda g: (g.engine, -1 if g.dp is None else g.dp)
                )
            ],
            "verdict": kind,
            "exit_code": code,
        }


CHUNK_BYTES = 1 << 20
"""What the reader takes from a file at a time: memory stays within a few of these, whatever the input."""
_PLUGIN_MARK, _SGLANG_MARK, _VLLM_MARK = _MARKS = (b"dspark ", *(m.encode() for m in engines.MARKERS))
"""What a line the report reads holds: the plugin's marker, sglang's ``accept len: ``, vLLM's
``SpecDecoding metrics: `` (named one by one where a line is tested: no loop on the busiest path)."""


@dataclass
class _Counts:
    lines: int = 0
    overlong: int = 0


def _open(path: str) -> IO[bytes]:
    if path == "-":
        stdin = sys.stdin
        buffer = getattr(stdin, "buffer", None) if stdin is not None else None
        if buffer is None or getattr(stdin, "closed", True):
            raise UsageError(
                "report -: standard input is closed; pipe the log in, or name the file.", where="-"
            )
        return buffer
    try:
        raw = open(path, "rb")  # closed by the caller
    except OSError as exc:
        raise UsageError(f"cannot read {printable(path, 200)}: {exc.strerror or exc}.", where=path) from exc
    if path.endswith(".gz"):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]  # the caller closes raw too
    return raw


def _chunks(stream: IO[bytes]) -> Iterator[bytes]:
    while True:
        try:
            chunk = stream.read(CHUNK_BYTES)
        except ValueError as exc:  # a stream closed under the reader
            raise OSError(str(exc)) from exc
        if not chunk:
            return
        yield chunk


def _marked(stream: IO[bytes], counts: _Counts) -> Iterator[tuple[int, bytes]]:
    """``(number, line)`` for every line holding ``dspark `` (without its newline), read in chunks of
    ``CHUNK_BYTES``; every line is counted, and one longer than ``MAX_LINE_BYTES`` is skipped and counted
    as overlong. Only the lines with the marker are cut out of a chunk: a log's other lines cost a
    search and a count of newlines, not a Python step each."""
    carry, skipping = b"", False
    for chunk in _chunks(stream):
        if skipping:  # the rest of an over-long line
            end = chunk.find(b"\n")
            if end < 0:
                continue
            counts.lines += 1
            chunk, skipping = chunk[end + 1 :], False
        data = carry + chunk if carry else chunk
        last = data.rfind(b"\n")
        if last < 0:
            carry = data
        else:
            carry = data[last + 1 :]
            yield from _cut(data, last + 1, counts)
        if len(carry) > MAX_LINE_BYTES:
            carry, skipping = b"", True
            counts.overlong += 1
    if skipping:
        counts.lines += 1
    elif carry:
        counts.lines += 1
        if any(m in carry for m in _MARKS):
            yield counts.lines, carry


def _cut(data: bytes, end: int, counts: _Counts) -> Iterator[tuple[int, bytes]]:
    """The marked lines of ``data[:end]`` (whole lines), numbered on from ``counts.lines``. A chunk where
    most lines carry a marker (a busy server's per-round lines) is split into lines at once; a sparse
    one (blank lines, sglang's own lines) is searched marker by marker, each marked line cut once."""
    newlines = data.count(b"\n", 0, end)
    if 2 * sum(data.count(m, 0, end) for m in _MARKS) > newlines:
        first = counts.lines
        for number, line in enumerate(data[: end - 1].split(b"\n"), first + 1):
            if _PLUGIN_MARK in line or _SGLANG_MARK in line or _VLLM_MARK in line:
                if len(line) <= MAX_LINE_BYTES:
                    yield number, line
                else:
                    counts.overlong += 1
        counts.lines = first + newlines
        return
    starts: set[int] = set()
    for mark in _MARKS:
        found = data.find(mark, 0, end)
        while found >= 0:
            start = data.rfind(b"\n", 0, found) + 1
            starts.add(start)
            stop = data.find(b"\n", found, end)
            found = data.find(mark, stop + 1, end)
    done = 0  # where the lines not yet counted start
    for start in sorted(starts):
        stop = data.find(b"\n", start, end)
        counts.lines += data.count(b"\n", done, start) + 1
        if stop - start <= MAX_LINE_BYTES:
            yield counts.lines, data[start:stop]
        else:
            counts.overlong += 1
        done = stop + 1
    counts.lines += data.count(b"\n", done, end)


def _lines(paths: Iterable[str], counts: _Counts) -> Iterator[tuple[str, int, bytes]]:
    """``(file, number, line)`` for every line holding ``dspark `` (all lines counted in ``counts``)."""
    for path in paths:
        stream = _open(path)
        try:
            for number, raw in _marked(stream, counts):
                yield (path, number, raw)
        except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt .gz: what was read stands
            why = printable(str(exc) or type(exc).__name__, 200)
            print(f"dspark-harvest report: {printable(path, 200)}: stopped reading: {why}", file=sys.stderr)
        finally:
            if path != "-":
                stream.close()
                inner = getattr(stream, "fileobj", None)
                if inner is not None:
                    inner.close()


def read_logs(paths: list[str], decode_log_interval: int = engines.DEFAULT_DECODE_LOG_INTERVAL) -> LogReport:
    """Stream ``paths`` (in order) into a ``LogReport`` (``decode_log_interval``: the decode batches one
    sglang decode line covers, its ``--decode-log-interval``)."""
    report = LogReport(list(paths), decode_log_interval=decode_log_interval)
    counts = _Counts()
    groups: dict[str | None, Group] = {}  # by the line's own dp text: the fast path's lookup
    for path, number, raw in _lines(paths, counts):
        text = raw.decode("utf-8", "replace").rstrip()
        try:
            _read_line(report, groups, text, path, number)
        except engines.Rejected:
            pass  # counted by its group
        except (ValueError, OverflowError, SettingsError):  # values the grammar lets through, unusable
            report.malformed += 1
    report.lines, report.overlong = counts.lines, counts.overlong
    for group in report.groups.values():
        group.close()
    return report


def _read_line(report: LogReport, groups: dict[str | None, Group], text: str, path: str, number: int) -> None:
    fast = ROUND.match(text)  # the per-round line, most of a log: no Line built
    if fast is not None:
        prefix, index, listed, bs, mean, harvest, source, dp = fast.group(*_ROUND_FIELDS)
        if "dspark " not in prefix:
            group = groups.get(dp)
            if group is None:
                group = groups[dp] = report.group(None if dp is None else int(dp))
            group.round(int(index), listed, int(bs), float(mean), harvest, source)
            report.plugin_lines += 1
            return
    if "dspark " not in text:
        _read_engine_line(report, text, number)
        return
    why, line = classify(text, path, number)
    if line is None:
        report.quoted += why == "quoted"
        report.malformed += why == "malformed"
        return
    report.group(line.dp).feed(line)
    report.plugin_lines += 1


def _read_engine_line(report: LogReport, text: str, number: int) -> None:
    """sglang's decode line or vLLM's spec metrics line, into its engine's group."""
    try:
        window = engines.parse(text, report.decode_log_interval)
    except engines.Rejected:
        engine = "sglang" if engines.SGLANG_MARKER in text else "vllm"
        report.engine_group(engine, None).rejected += 1
        raise
    if window is not None:
        report.engine_group(window.engine, window.dp).add(window, number)
        report.engine_lines += 1


__all__ = [
    "read_logs",
    "LogReport",
    "EXIT_INCONCLUSIVE",
    "EXIT_HEALTHY",
    "EXIT_UNREADABLE",
    "EXIT_MISALIGNED",
    "EXIT_COLLAPSE",
]
