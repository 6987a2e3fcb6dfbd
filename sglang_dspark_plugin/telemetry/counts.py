"""One round's accepted-draft counts packed into bytes, and the ``accept_len`` text built from them."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any


class CountPacker:
    """The per-round counts packed into bytes, and the ``accept_len`` text built from them.

    One ``bytes(counts)`` checks that every count is an int in 0..255 (``TypeError`` / ``ValueError``
    otherwise); from there the range check, the sum, the histogram and the text are C-level passes
    over the bytes (``translate``, ``count``, slice assignment), with no Python step per request.
    Accept lengths above 255 (gamma >= 255, far beyond published drafters) use an ``array('H')``
    and plain loops instead.
    """

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma
        self.small = gamma < 255
        self.width = len(str(gamma + 1))  # digits of the longest accept length
        self._text = [str(n + 1) for n in range(gamma + 1)]
        if self.small:
            self._valid = bytes(range(gamma + 1))
            self._plus_one = bytes(min(n + 1, 255) for n in range(256))
            # One table per digit position: count n -> that digit of n+1, NUL where n+1 has fewer digits.
            padded = [str(min(n, gamma) + 1).rjust(self.width, "\0") for n in range(256)]
            self._digits = [bytes(ord(t[d]) for t in padded) for d in range(self.width)]

    def empty(self) -> bytearray | array[int]:
        """A buffer that ``pack``'s results can be appended to."""
        return bytearray() if self.small else array("H")

    def pack(self, counts: Sequence[Any]) -> bytes | array[int] | None:
        """The counts, packed; ``None`` when one is not an int in [0, gamma]."""
        if type(counts) is not list and type(counts) is not tuple:
            counts = list(counts)  # never the raw buffer of an array-like
        try:
            if self.small:
                packed = bytes(counts)
                return None if packed.translate(None, self._valid) else packed
            wide = array("H", counts)
        except (TypeError, ValueError, OverflowError):
            return None
        return None if max(wide) > self.gamma else wide

    def accept_lengths(self, packed: bytes | array[int]) -> list[int]:
        """Accepted drafts + 1 per request."""
        if type(packed) is bytes:
            return list(packed.translate(self._plus_one))
        return [n + 1 for n in packed]

    def text(self, packed: bytes | array[int]) -> str:
        """``1,4,17`` for counts ``[0, 3, 16]``."""
        if type(packed) is not bytes or len(packed) <= 16:  # a plain join is cheaper for a few requests
            return ",".join([self._text[n] for n in packed])
        step = self.width + 1
        out = bytearray(len(packed) * step)
        for d, table in enumerate(self._digits):
            out[d::step] = packed.translate(table)
        out[self.width :: step] = b"," * len(packed)
        return out.translate(None, b"\0")[:-1].decode("ascii")


__all__ = ["CountPacker"]
