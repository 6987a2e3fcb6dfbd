"""The plugin's loggers: every record escaped and bounded before any handler sees it.

Strings from a checkpoint (tensor and folder names), a path or the environment reach the startup
line, the warnings, the manifest line and the alarm. A newline, carriage return or escape sequence in
one of them must not forge a line in the server's log (a fake ``dspark accept round=...`` line, say),
and a 16 MiB config must not become a 25 MB log record. ``safe_logger(name)`` is ``logging.getLogger``
with a filter that escapes every non-printable character (``errors.printable``) and cuts a record
at ``RECORD_LIMIT`` characters.
"""

from __future__ import annotations

import logging

from ..errors import printable

RECORD_LIMIT = 16_384
"""Characters per log record: the longest legitimate line (the manifest of a real drafter) is ~3,000."""


class EscapeAndBound(logging.Filter):
    """Escapes non-printable characters in a record's message and cuts it at ``RECORD_LIMIT``."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not (message.isprintable() and len(message) <= RECORD_LIMIT):
            message = printable(message, limit=RECORD_LIMIT)
        record.msg, record.args = message, None
        return True


_FILTER = EscapeAndBound()


def safe_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, its records escaped and bounded (the filter is added once)."""
    logger = logging.getLogger(name)
    if not any(isinstance(f, EscapeAndBound) for f in logger.filters):
        logger.addFilter(_FILTER)
    return logger


__all__ = ["RECORD_LIMIT", "EscapeAndBound", "safe_logger"]
