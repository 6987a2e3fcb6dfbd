"""The context edge: a DFlash-family decode round's KV reserve against its request's ``req_to_token`` row.

Each decode round of sglang's DFLASH/DSPARK reserves KV slots up to ``committed + 2 * W`` (W = the verify
window, ``speculative_num_draft_tokens``; the 2x absorbs the overlap scheduler's lag) and writes their
indices into the request's row of ``req_to_token`` (0.5.23 ``speculative/dflash_info_v2.py:147``,
``mem_cache/allocation_sizing.py:73-93``; 0.5.17 ``speculative/dflash_info_v2.py:154``). A row holds
``context_len + extra`` slots, where sglang's ``get_req_to_token_extra_context_len`` gives ``extra = 4 + W``
at page size 1 and sizes it for the reserve only at ``page_size > 1`` (0.5.23 ``allocation_sizing.py:96-116``,
0.5.17 ``:46-60``). A request still decoding has at most ``context_len - 4`` tokens committed, so its last
round reserves up to ``context_len - 4 + 2 W``: past the row when W > 8. On a GPU, sglang's Triton
``assign_req_to_token_pool`` masks that write by ``kv_end`` only, not by the row, so the indices land in the
NEXT request's row (measured on an H200 with 0.5.23's kernel run alone), silently: sglang issue 33579,
fix PR 33581 (open, in no release).

The plugin prevents it without changing any output: its launches size the row for the reserve at every
page size, with the rule sglang itself applies at ``page_size > 1`` (``reserve + page_size - 1``). A few
more int32 entries per row; no round computes anything else. Where a release already sizes the row for the
reserve (PR 33581's fix), its own headroom is at least this and the plugin adds nothing.
"""

from __future__ import annotations

from .refusal import ALGORITHM, ServeRefusal

ROW_BASE_EXTRA = 4
"""sglang's fixed row headroom beyond ``context_len + W`` (its ``4 + max_speculative_num_draft_tokens``)."""


def decode_reserve(window: int) -> int:
    """KV slots past the committed length one decode round reserves: ``2 * W``."""
    return 2 * window


def reserve_headroom(window: int, page_size: int) -> int:
    """The row headroom beyond ``context_len`` that holds every decode round's reserve: sglang's own rule
    for ``page_size > 1`` (the reserve, plus what page alignment can round it up by), at every page size."""
    return max(ROW_BASE_EXTRA + window, decode_reserve(window) + max(int(page_size), 1) - 1)


def overruns_row(window: int, page_size: int, extra: int) -> bool:
    """Whether a request decoding to its context limit reserves past a row of ``context_len + extra``."""
    last = -ROW_BASE_EXTRA + decode_reserve(window) + max(int(page_size), 1) - 1
    return last > extra


def row_statement(window: int, page_size: int, sglang_extra: int) -> str:
    """What the launch's row sizing is, in a sentence for the log."""
    needed = reserve_headroom(window, page_size)
    if sglang_extra >= needed:
        return (
            f"req_to_token rows hold context_len + {sglang_extra}: sglang sizes them for the decode reserve "
            f"(2 x W = {decode_reserve(window)}) itself; the plugin adds nothing."
        )
    return (
        f"req_to_token rows widened from context_len + {sglang_extra} to context_len + {needed} (page "
        f"size {page_size}, W {window}): a decode round reserves up to committed + "
        f"{decode_reserve(window)} KV slots, and a request at its context limit would otherwise write past "
        "its row (on a GPU, into another request's row: sglang issue 33579). No output changes."
    )


def row_refusal(window: int, page_size: int, headroom: int, needed: int) -> ServeRefusal:
    """The refusal of a launch whose rows turned out narrower than the reserve (the row hook did not
    take effect in this sglang): serving would risk another request's KV mapping."""
    return ServeRefusal(
        f"{ALGORITHM}: sglang built req_to_token rows of context_len + {headroom}, but a decode round at W "
        f"{window}, page size {page_size} reserves up to context_len + {needed}: a request at its context "
        "limit would write into another request's row (sglang issue 33579). The plugin's row hook did not "
        "take effect in this sglang; launch with --page-size 2 or more (sglang then sizes the row for the "
        "reserve), and report this sglang version.",
        kind="unsupported",
        where="req_to_token",
    )


__all__ = [
    "row_refusal",
    "ROW_BASE_EXTRA",
    "decode_reserve",
    "reserve_headroom",
    "overruns_row",
    "row_statement",
]
