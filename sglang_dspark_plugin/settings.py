"""Every ``MEMRA_DSPARK_*`` setting in one table: name, type, bounds, default and what it does.

``read_setting(name, environ)`` is the one way the package reads one: the raw value is parsed by the
table's rule and refused with a typed ``SettingsError`` naming the variable, the value and what is
accepted; an unset variable gives the default. Numbers take ASCII digits only, within bounds that
keep what a value implies (a window's memory, say) small; ``settings_table()`` is the markdown table
the docs hold (a test checks them against it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SettingsError
from .util.validation import environment

OFF_NAMES = ("OFF", "NONE")
LEVEL_NAMES = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARNING": logging.WARNING,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
    "CRITICAL": logging.CRITICAL,
}
MAX_DIGITS = 12
"""No setting needs more digits; a longer number is refused before ``int()`` sees it."""


@dataclass(frozen=True)
class Setting:
    """One ``MEMRA_DSPARK_*`` variable."""

    name: str
    kind: str  # "choice", "word", "flag", "path", "level", "int", "ints" or "number"
    default: Any
    accepted: str  # what the refusal and the docs list as accepted
    doc: str
    minimum: float | None = None
    maximum: float | None = None
    accepts_off: bool = False  # whether OFF / NONE is accepted ...
    off: Any = None  # ... and the value it stands for
    words: tuple[str, ...] = ()  # a "word" setting's accepted values (lower case)

    def parse(self, raw: str) -> Any:
        """The value of ``raw`` under this setting's rule; ``SettingsError`` when it breaks it."""
        text = raw.strip()
        if self.accepts_off and text.upper() in OFF_NAMES:
            return self.off
        value = _PARSERS[self.kind](self, text)
        if value is None:
            raise SettingsError(
                f"{self.name}={_shown(raw)} is not accepted; accepted values: {self.accepted}; unset it "
                f"for the default ({self.default_text()}).",
                where=self.name,
            )
        return value

    def default_text(self) -> str:
        if self.kind == "level":
            return "OFF" if self.default is None else logging.getLevelName(self.default)
        if self.kind == "flag":
            return "on" if self.default else "off"
        if self.kind == "ints":
            return ",".join(map(str, self.default)) or "OFF"
        return "unset" if self.default is None else str(self.default)


def _shown(value: str, limit: int = 60) -> str:
    """``ascii(value)`` cut to ``limit`` characters: control characters escaped, a huge value cut."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(value)} characters)"


def _digits(text: str) -> int | None:
    """A non-negative integer written in ASCII digits (``²`` or a 5000-digit number is not one)."""
    if not text or len(text) > MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def _within(setting: Setting, value: float) -> bool:
    low = setting.minimum if setting.minimum is not None else -math.inf
    high = setting.maximum if setting.maximum is not None else math.inf
    return low <= value <= high


def _int(setting: Setting, text: str) -> int | None:
    value = _digits(text)
    return value if value is not None and _within(setting, value) else None


def _number(setting: Setting, text: str) -> float | None:
    if not text.isascii() or len(text) > 32:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and _within(setting, value) else None


def _level(setting: Setting, text: str) -> int | None:
    if text.upper() in LEVEL_NAMES:
        return LEVEL_NAMES[text.upper()]
    return _int(setting, text)


def _choice(setting: Setting, text: str) -> str | None:
    from .harvest import DsparkHarvest

    return DsparkHarvest.from_env_value(text).name()  # refuses with its own typed message


def _word(setting: Setting, text: str) -> str | None:
    # ASCII only: a look-alike (the Kelvin sign lower-cases to "k") must not pass as a word
    word = text.lower()
    return word if text.isascii() and word in setting.words else None


FLAG_WORDS = {
    **dict.fromkeys(("1", "on", "true", "yes"), True),
    **dict.fromkeys(("0", "off", "false", "no"), False),
}


def _flag(setting: Setting, text: str) -> bool | None:
    return FLAG_WORDS.get(text.lower()) if text.isascii() else None


def _path(setting: Setting, text: str) -> str | None:
    return text if text and text.isprintable() and len(text) <= 4096 else None


MAX_INTS = 32


def _ints(setting: Setting, text: str) -> tuple[int, ...] | None:
    """Comma-separated integers, strictly increasing, each within the bounds, at most ``MAX_INTS``."""
    parts = text.split(",")
    if len(parts) > MAX_INTS:
        return None
    values = [_int(setting, part.strip()) for part in parts]
    if any(v is None for v in values):
        return None
    found = tuple(int(v) for v in values if v is not None)
    return found if all(a < b for a, b in zip(found[:-1], found[1:], strict=True)) else None


_PARSERS: dict[str, Callable[[Setting, str], Any]] = {
    "ints": _ints,
    "choice": _choice,
    "word": _word,
    "path": _path,
    "flag": _flag,
    "level": _level,
    "int": _int,
    "number": _number,
}

HARVEST = Setting(
    "MEMRA_DSPARK_HARVEST",
    "choice",
    None,
    "dflash, dspark (ASCII, case-insensitive)",
    "the harvest convention, overriding the checkpoint census (unset: the census decides)",
)
MANIFEST = Setting(
    "MEMRA_DSPARK_MANIFEST",
    "path",
    None,
    "a file path (printable, at most 4096 characters)",
    "where the launcher writes the geometry manifest at startup (unset: the log only)",
)
PEER_MANIFEST = Setting(
    "MEMRA_DSPARK_PEER_MANIFEST",
    "path",
    None,
    "a file path (printable, at most 4096 characters)",
    "on a disaggregated decode server: the prefill server's manifest, whose plan this one must match",
)
ACCEPT_LOG_LEVEL = Setting(
    "MEMRA_DSPARK_ACCEPT_LOG_LEVEL",
    "level",
    logging.INFO,
    "DEBUG, INFO, WARNING, ERROR, CRITICAL, OFF (case-insensitive) or a number 1..50",
    "level of the per-round line; OFF: no per-round line (summaries and the alarm stay)",
    minimum=1,
    maximum=50,
    accepts_off=True,
    off=None,
)
SUMMARY_EVERY = Setting(
    "MEMRA_DSPARK_SUMMARY_EVERY",
    "int",
    100,
    "an integer 0..1000000000, or OFF (= 0)",
    "rounds between summary lines; 0 or OFF: none",
    minimum=0,
    maximum=10**9,
    accepts_off=True,
    off=0,
)
ALARM_THRESHOLD = Setting(
    "MEMRA_DSPARK_ALARM_THRESHOLD",
    "number",
    1.6,
    "a number 0..1025 (accept lengths run from 1.0 to gamma+1), or 0 / OFF to disable the alarm",
    "rolling mean accept length below which the alarm fires; 0 or OFF: no alarm",
    minimum=0,
    maximum=1025,
    accepts_off=True,
    off=0.0,
)
ALARM_WARMUP = Setting(
    "MEMRA_DSPARK_ALARM_WARMUP",
    "int",
    100,
    "an integer 0..1000000000",
    "rounds ignored before the rolling window starts",
    minimum=0,
    maximum=10**9,
)
ALARM_WINDOW = Setting(
    "MEMRA_DSPARK_ALARM_WINDOW",
    "int",
    500,
    "an integer 1..100000",
    "rolling window, in rounds; at most one alarm per window (its memory grows with it)",
    minimum=1,
    maximum=100_000,
)
PROBE_ROUNDS = Setting(
    "MEMRA_DSPARK_PROBE_ROUNDS",
    "int",
    200,
    "an integer 0..1000000000",
    "verify rounds after startup in which the live offset probe samples every round",
    minimum=0,
    maximum=10**9,
)
PROBE_EVERY = Setting(
    "MEMRA_DSPARK_PROBE_EVERY",
    "int",
    16,
    "an integer 0..1000000, or OFF (= 0)",
    "after those rounds the probe samples 1 round in this many, and every round while the alarm window "
    "is below its threshold; 0 or OFF: none but those",
    minimum=0,
    maximum=10**6,
    accepts_off=True,
    off=0,
)
ON_MISMATCH = Setting(
    "MEMRA_DSPARK_ON_MISMATCH",
    "word",
    "warn",
    "warn, fail (ASCII, case-insensitive)",
    "what a decisive probe verdict other than matched does: warn logs it; fail also stops the server "
    "with it (canaries, staging)",
    words=("warn", "fail"),
)
CONTEXT_BUCKETS = Setting(
    "MEMRA_DSPARK_CONTEXT_BUCKETS",
    "ints",
    (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
    f"up to {MAX_INTS} increasing integers 1..100000000, comma-separated, or OFF",
    "the upper bounds of the context-length buckets acceptance is counted in (the request's tokens at "
    "the anchor; one more bucket holds everything beyond the last); OFF: no buckets (docs/telemetry.md)",
    minimum=1,
    maximum=10**8,
    accepts_off=True,
    off=(),
)
DEFER_ROUNDS = Setting(
    "MEMRA_DSPARK_DEFER_ROUNDS",
    "int",
    64,
    "an integer 1..1024",
    "verify rounds whose telemetry and probe steps are queued before they run, warm (the batch "
    "draining runs the queue sooner); 1: every round at once, no lag (docs/telemetry.md)",
    minimum=1,
    maximum=1024,
)
QUEUE_THREAD = Setting(
    "MEMRA_DSPARK_QUEUE_THREAD",
    "word",
    "auto",
    "auto, 1, 0, on, off, true, false, yes, no (ASCII, case-insensitive)",
    "run the queued rounds' telemetry and probe steps on a thread of their own, off the scheduler's "
    "(their lines land after the round's answer); auto: on where sglang serves on an accelerator, "
    "off on CPU, where the forward pass keeps the cores busy; ignored under "
    "MEMRA_DSPARK_ON_MISMATCH=fail (docs/telemetry.md)",
    words=("auto", *FLAG_WORDS),
)
HOST_TIMING = Setting(
    "MEMRA_DSPARK_HOST_TIMING",
    "flag",
    False,
    "1, 0, on, off, true, false, yes, no (ASCII, case-insensitive)",
    "time the plugin's own host work per verify round and log it, as a fraction of the round time, "
    "with every summary (docs/telemetry.md)",
)
REQUEST_LOG = Setting(
    "MEMRA_DSPARK_REQUEST_LOG",
    "flag",
    True,
    "1, 0, on, off, true, false, yes, no (ASCII, case-insensitive)",
    "one line per finished request (its verify rounds, accepted drafts, accept length, context at its "
    "first and last round) and the per-request accept-length histogram (docs/telemetry.md)",
)
SYNC_DEBUG = Setting(
    "MEMRA_DSPARK_SYNC_DEBUG",
    "flag",
    False,
    "1, 0, on, off, true, false, yes, no (ASCII, case-insensitive)",
    "run the plugin's per-round work under torch.cuda.set_sync_debug_mode('error'), so a device "
    "synchronisation it adds fails loudly (validation runs; no effect without CUDA)",
)

SETTINGS: tuple[Setting, ...] = (
    HARVEST,
    MANIFEST,
    PEER_MANIFEST,
    ACCEPT_LOG_LEVEL,
    SUMMARY_EVERY,
    ALARM_THRESHOLD,
    ALARM_WARMUP,
    ALARM_WINDOW,
    PROBE_ROUNDS,
    PROBE_EVERY,
    ON_MISMATCH,
    CONTEXT_BUCKETS,
    DEFER_ROUNDS,
    QUEUE_THREAD,
    HOST_TIMING,
    REQUEST_LOG,
    SYNC_DEBUG,
)
"""Every ``MEMRA_DSPARK_*`` variable the package reads."""
BY_NAME = {s.name: s for s in SETTINGS}


def read_setting(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """The parsed value of one setting (``environ``, or the process environment); its default when
    unset; ``SettingsError`` (or the harvest's ``HarvestEnvError``) when the value is refused."""
    setting = BY_NAME[name]
    raw = environment(environ).get(name)
    return setting.default if raw is None else setting.parse(raw)


def check_fields(owner: str, values: object, checks: Iterable[tuple[str, bool, str]]) -> None:
    """Refuse the first field of a settings object built in code (``owner`` its class name) whose check
    failed: ``checks`` are ``(field, ok, what it accepts)``; the ``SettingsError`` names the field, its
    value and what is accepted."""
    for name, ok, expected in checks:
        if not ok:
            raise SettingsError(
                f"{owner}.{name}={getattr(values, name)!r:.60} is out of range or of the wrong type; "
                f"expected {expected}.",
                where=f"{owner}.{name}",
            )


def settings_table() -> str:
    """The markdown table of every setting, as the docs hold it."""
    rows = ["| variable | default | accepted | meaning |", "|---|---|---|---|"]
    rows += [f"| `{s.name}` | `{s.default_text()}` | {s.accepted} | {s.doc} |" for s in SETTINGS]
    return "\n".join(rows)


__all__ = [
    "Setting",
    "SETTINGS",
    "BY_NAME",
    "HARVEST",
    "MANIFEST",
    "PEER_MANIFEST",
    "ACCEPT_LOG_LEVEL",
    "SUMMARY_EVERY",
    "ALARM_THRESHOLD",
    "ALARM_WARMUP",
    "ALARM_WINDOW",
    "PROBE_ROUNDS",
    "PROBE_EVERY",
    "ON_MISMATCH",
    "CONTEXT_BUCKETS",
    "DEFER_ROUNDS",
    "QUEUE_THREAD",
    "HOST_TIMING",
    "REQUEST_LOG",
    "SYNC_DEBUG",
    "check_fields",
    "read_setting",
    "settings_table",
]
