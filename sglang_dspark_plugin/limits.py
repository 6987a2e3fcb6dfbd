"""The widths the package accepts anywhere. A leaf module (it imports nothing of the package), so the
census, the geometry and the telemetry share these bounds without importing one another."""

from __future__ import annotations

MAX_BLOCK_SIZE = 1024
"""The widest block accepted. Published drafters use 4..16 rows; every row is a query of one drafter
forward and a token of the verify window, so a width of thousands is a corrupt config, not a drafter
(and the geometry's row tuples would grow with it)."""
MAX_GAMMA = MAX_BLOCK_SIZE
"""The most drafts per round: the dspark harvest of the widest block (b drafts from b rows)."""

__all__ = ["MAX_BLOCK_SIZE", "MAX_GAMMA"]
