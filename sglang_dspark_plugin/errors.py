"""One small hierarchy of typed errors.

Every error carries a ``kind`` (the machine-readable class of refusal used by the CLI's JSON output)
and a message that names what was wrong, where, and how to fix it.
"""

from __future__ import annotations

import json


def printable(text: object, limit: int | None = None) -> str:
    """``text`` with every non-printable character escaped (a terminal never sees a raw escape code).

    With ``limit``, longer results are cut to that many characters and end in ``...``.
    """
    out = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(text))
    if limit is not None and len(out) > limit:
        return out[: max(limit - 3, 0)] + "..."
    return out


class DsparkHarvestError(Exception):
    """Base class of every refusal raised by this package."""

    kind: str = "error"
    multiline: bool = False  # a message laid out on several lines (its values escaped by the raiser)

    def __init__(self, message: str, *, where: str | None = None) -> None:
        # The message reaches sglang's last line and the server's log: no string from a checkpoint, a
        # path or the environment may bring a raw newline or escape sequence along.
        if self.multiline:
            message = "\n".join(printable(line) for line in message.split("\n"))
        else:
            message = printable(message)
        super().__init__(message)
        self.message = message
        self.where = None if where is None else printable(where)

    def to_json(self) -> dict[str, str]:
        """The ``{"kind", "message"}`` object printed by ``--json`` refusals."""
        out = {"kind": self.kind, "message": self.message}
        if self.where:
            out["where"] = self.where
        return out

    def render(self, command: str, *, as_json: bool) -> str:
        """How ``dspark-harvest COMMAND`` prints this refusal: a JSON error object, or one line."""
        if as_json:
            return json.dumps({"error": self.to_json()}, indent=2)
        return f"{f'dspark-harvest {command}'.rstrip()}: refused ({self.kind}): {printable(self.message)}"


class HarvestEnvError(DsparkHarvestError, ValueError):
    """``MEMRA_DSPARK_HARVEST`` (or another explicit harvest value) is not a known convention."""

    kind = "env"


class CensusConflictError(DsparkHarvestError):
    """The checkpoint's own signals disagree about its training strategy."""

    kind = "conflict"


class UnsupportedCheckpointError(DsparkHarvestError):
    """The checkpoint is not a drafter this plugin can serve (Domino, not DFlash-family, ...)."""

    kind = "unsupported"


class InvalidCheckpointError(DsparkHarvestError, ValueError):
    """Missing, malformed or out-of-range input: a config, a header, a block width, a path."""

    kind = "invalid"


class HubDownloadError(InvalidCheckpointError):
    """A hub checkpoint missing from the cache whose download failed (no network, no access); sglang,
    which downloads it again, reports what stops it."""


class GeometryError(InvalidCheckpointError):
    """A block width that yields no draft, or a width that contradicts the resolved geometry."""


class MissingBlockSizeError(GeometryError):
    """A round geometry was asked for, but neither the draft config nor a flag gives the block size."""


class UsageError(DsparkHarvestError, ValueError):
    """A command-line argument is wrong (unknown option, bad value, a --device or --plot that cannot work)."""

    kind = "usage"


class MemoryLimitError(DsparkHarvestError, MemoryError):
    """The machine ran out of memory loading or running the models."""

    kind = "memory"


class WriteError(DsparkHarvestError):
    """A file or folder a command writes could not be written (a full disk, no permission, a name too
    long): nothing half-written is left behind."""

    kind = "write"


class SettingsError(DsparkHarvestError, ValueError):
    """A ``MEMRA_DSPARK_*`` telemetry setting (log level, summary cadence, alarm) has a bad value."""

    kind = "env"


class ProbeMismatchError(DsparkHarvestError):
    """The live offset probe found the served drafts misaligned or unmatched, under
    ``MEMRA_DSPARK_ON_MISMATCH=fail``; the message says what it measured and what fixes it."""

    kind = "probe"


class ArgumentTypeError(DsparkHarvestError, TypeError):
    """A Python API call got an argument of the wrong type (a dict for a ``DflashCfg``, a str for a
    ``DsparkHarvest``); the message names the parameter, the type it got and the one it takes."""

    kind = "type"


__all__ = [
    "DsparkHarvestError",
    "HarvestEnvError",
    "CensusConflictError",
    "UnsupportedCheckpointError",
    "InvalidCheckpointError",
    "HubDownloadError",
    "GeometryError",
    "MissingBlockSizeError",
    "UsageError",
    "MemoryLimitError",
    "WriteError",
    "SettingsError",
    "ProbeMismatchError",
    "ArgumentTypeError",
]
