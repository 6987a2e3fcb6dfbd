"""``dspark-harvest report``: a server's log, read back into what the plugin saw and what it means.

``read_logs`` streams each file line by line (``-`` is stdin; a ``.gz`` file is read through gzip; rotated
files are given oldest first), keeps only the lines the grammar of ``lines`` trusts as the plugin's own,
and hands each to its attention-DP group (``groups.Group``), which replays the rounds through the
telemetry's own counter and alarm. Memory is bounded by the number of groups, not the log's length.
"""

from __future__ import annotations

import gzip
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import UsageError
from .groups import Group
from .judge import group_json, group_verdict
from .lines import ROUND, classify

EXIT_HEALTHY, EXIT_UNREADABLE, EXIT_MISALIGNED, EXIT_COLLAPSE = 0, 2, 3, 5
VERDICT_CODES = {"healthy": EXIT_HEALTHY, "misaligned": EXIT_MISALIGNED, "collapse": EXIT_COLLAPSE}
MAX_GROUPS = 4096
_ROUND_FIELDS = ("prefix", "round", "lengths", "bs", "mean", "harvest", "source", "dp")


@dataclass
class LogReport:
    """Every group's lines and what was set aside."""

    files: list[str]
    lines: int = 0
    plugin_lines: int = 0
    quoted: int = 0  # marker text after a quote: a request's text, ignored
    malformed: int = 0  # a marker after a trusted prefix, in no line's exact form
    groups: dict[int | None, Group] = field(default_factory=dict)

    def group(self, dp: int | None) -> Group:
        """The group of DP rank ``dp`` (created at its first line)."""
        found = self.groups.get(dp)
        if found is None:
            if len(self.groups) >= MAX_GROUPS:
                raise UsageError(f"more than {MAX_GROUPS} DP groups in the log", where="report")
            found = self.groups[dp] = Group(dp)
        return found

    def verdict(self) -> tuple[str, int]:
        """The worst group's verdict and its exit code (misaligned over collapse over healthy)."""
        kinds = [group_verdict(g)[0] for g in self.groups.values()]
        for kind in ("misaligned", "collapse"):
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
            "groups": [group_json(g) for g in ordered],
            "verdict": kind,
            "exit_code": code,
        }


def _open(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    try:
        raw = open(path, "rb")  # closed by the caller
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.", where=path) from exc
    if path.endswith(".gz"):
        return gzip.open(raw)  # type: ignore[return-value]  # a binary gzip file
    return raw


def _lines(paths: Iterable[str]) -> Iterator[tuple[str, int, bytes | None]]:
    """``(file, number, line)`` for every line holding ``dspark ``; ``None`` for the others (counted)."""
    for path in paths:
        stream = _open(path)
        try:
            for number, raw in enumerate(stream, 1):
                yield (path, number, raw if b"dspark " in raw else None)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:  # a truncated .gz: what was read stands
            yield (path, 0, None)
            print(f"dspark-harvest report: {path}: stopped reading: {exc}", file=sys.stderr)
        finally:
            if stream is not sys.stdin.buffer:
                stream.close()


def read_logs(paths: list[str]) -> LogReport:
    """Stream ``paths`` (in order) into a ``LogReport``."""
    report = LogReport(list(paths))
    groups: dict[str | None, Group] = {}  # by the line's own dp text: the fast path's lookup
    for path, number, raw in _lines(paths):
        report.lines += 1
        if raw is None:
            continue
        text = raw.decode("utf-8", "replace").rstrip("\r\n")
        fast = ROUND.match(text)  # the per-round line, most of a log: no Line built
        if fast is not None:
            prefix, index, listed, bs, mean, harvest, source, dp = fast.group(*_ROUND_FIELDS)
            if "dspark " not in prefix:
                report.plugin_lines += 1
                group = groups.get(dp)
                if group is None:
                    group = groups[dp] = report.group(None if dp is None else int(dp))
                group.round(int(index), listed, int(bs), float(mean), harvest, source)
                continue
        why, line = classify(text, path, number)
        if line is None:
            report.quoted += why == "quoted"
            report.malformed += why == "malformed"
            continue
        report.plugin_lines += 1
        report.group(line.dp).feed(line)
    for group in report.groups.values():
        group.close()
    return report


__all__ = ["read_logs", "LogReport", "EXIT_HEALTHY", "EXIT_UNREADABLE", "EXIT_MISALIGNED", "EXIT_COLLAPSE"]
