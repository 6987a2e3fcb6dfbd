"""One log line per verify round, handed to the handlers without ``Logger.log``'s per-call work."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

_new_record = object.__new__
"""A ``LogRecord`` without running ``LogRecord.__init__`` (its fields are copied from a template)."""


class RoundLineEmitter:
    """Builds each round's ``LogRecord`` as a copy of a template, with the message and the time set.

    ``Logger.log`` walks the stack for the caller and ``LogRecord.__init__`` looks up the thread,
    process and time: most of a log call before any handler runs. The template is a record built by
    ``makeRecord`` for the logger, level and thread, naming ``origin`` (the per-round hook) as the
    caller; each round still gets its own record object (a handler may keep it). A custom record
    factory is honoured by building every record through it.
    """

    def __init__(self, origin: Callable[..., Any]) -> None:
        code = origin.__code__
        self._pathname = code.co_filename
        self._lineno = code.co_firstlineno
        self._func = code.co_name
        self._template: dict[str, Any] | None = None
        self._thread: int | None = None

    def emit(self, logger: logging.Logger, level: int, message: str, created: float | None = None) -> None:
        """Hand ``message`` at ``level`` to ``logger``'s handlers (the caller checked the level), timed
        ``created`` (``time.time()`` of the round; default now)."""
        template = self._template
        if (
            template is None
            or template["levelno"] != level
            or self._thread != threading.get_ident()
            or logging.getLogRecordFactory() is not logging.LogRecord
        ):
            record = logger.makeRecord(
                logger.name, level, self._pathname, self._lineno, message, (), None, self._func
            )
            if type(record) is logging.LogRecord:
                self._template = dict(record.__dict__)
                self._thread = threading.get_ident()
            if created is not None:
                record.created = created
                record.msecs = int((created - int(created)) * 1000) + 0.0
            logger.handle(record)
            return
        record = _new_record(logging.LogRecord)
        record.__dict__.update(template)
        now = time.time() if created is None else created
        record.msg = message
        record.created = now
        record.msecs = int((now - int(now)) * 1000) + 0.0  # LogRecord's own rounding
        record.relativeCreated = template["relativeCreated"] + (now - template["created"]) * 1000.0
        logger.handle(record)


__all__ = ["RoundLineEmitter"]
