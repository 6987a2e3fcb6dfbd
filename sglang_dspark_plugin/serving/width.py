"""The served width: the block the checkpoint was trained on, or a narrower one the launch asks for.

Each width flag says a block size in its builtin's own terms: ``--speculative-num-draft-tokens`` is the
verify window (the block for the dflash harvest, the block + 1 for the dspark harvest), DFLASH's
``--speculative-dflash-block-size`` is the block, DSPARK's ``--speculative-dspark-block-size`` is its
gamma (the block for a shifted drafter, the block - 1 for a mask-fill DSpark drafter). A narrower
block than the trained one keeps every draft on a row trained for its position (rows 1..b'-1, or
0..b'-1), only fewer of them: served, as the builtin serves it. A wider block verifies drafts from
rows never trained: the silent collapse, refused. Flags that disagree with each other are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import GeometryError, InvalidCheckpointError
from ..geometry import BLOCK_SIZE_FLAGS, RoundGeometry
from ..harvest import ENV_VAR, DsparkHarvest
from ..util.validation import is_int
from .layout import DSPARK, Arm
from .refusal import ALGORITHM

if TYPE_CHECKING:
    from .request import LaunchRequest

NUM_DRAFT_TOKENS_FLAG = "--speculative-num-draft-tokens"


def requested_blocks(request: LaunchRequest, trained: RoundGeometry, layout: Arm) -> dict[str, int]:
    """``{flag: the block size it asks for}`` for every width flag the launch gives."""
    out: dict[str, int] = {}
    shifted = trained.harvest is DsparkHarvest.DSPARK
    if request.num_draft_tokens is not None:
        window = flag_int(NUM_DRAFT_TOKENS_FLAG, request.num_draft_tokens)
        out[NUM_DRAFT_TOKENS_FLAG] = window - 1 if shifted else window
    dspark_flag = BLOCK_SIZE_FLAGS[DsparkHarvest.DSPARK]
    for flag, value in request.block_size_flags().items():
        if value is None:
            continue
        given = flag_int(flag, value)
        # DSPARK's flag is its gamma: b-1 drafts for a mask-fill DSpark drafter
        out[flag] = given + 1 if flag == dspark_flag and layout.mask_fill_dspark else given
    return out


def _text(g: RoundGeometry, checkpoint: str) -> str:
    return (
        f"the {g.harvest.name()} harvest of {checkpoint} (trained block_size {g.block_size}: "
        f"{g.gamma} drafts from rows {g.harvested_rows[0]}..{g.harvested_rows[-1]}, "
        f"verify window {g.verify_window} = n_drafts(b) + 1)"
    )


def served_block_size(request: LaunchRequest, trained: RoundGeometry, layout: Arm, checkpoint: str) -> int:
    """The block the launch serves: the trained one, or the narrower one its flags agree on."""
    asked = requested_blocks(request, trained, layout)
    if len(set(asked.values())) > 1:
        listed = ", ".join(f"{flag} asks for block {b}" for flag, b in asked.items())
        raise GeometryError(
            f"{ALGORITHM}: the width flags disagree ({listed}) for {_text(trained, checkpoint)}; keep one "
            "of them, or set them to the same width in their builtin's terms.",
            where=", ".join(asked),
        )
    if not asked:
        return trained.block_size
    flag, block = next(iter(asked.items()))
    value = {NUM_DRAFT_TOKENS_FLAG: request.num_draft_tokens, **request.block_size_flags()}[flag]
    if block > trained.block_size:
        raise GeometryError(
            f"{ALGORITHM}: {flag} {value} asks for a block of {block} rows, wider than "
            f"{_text(trained, checkpoint)}; the rows beyond {trained.block_size - 1} were never trained, "
            "so their drafts would be verified against positions they do not predict: the silent "
            f"collapse. Remove the flag ({ALGORITHM} sets the width from the checkpoint), or narrow it "
            f"(the widest: {flag} {_flag_value(flag, trained, layout)}). To serve the other convention, "
            f"set {ENV_VAR}.",
            where=flag,
        )
    if block < 2:
        raise GeometryError(
            f"{ALGORITHM}: {flag} {value} asks for a block of {block} rows for {_text(trained, checkpoint)}; "
            f"a block has at least 2 rows (the narrowest: {flag} "
            f"{_flag_value(flag, RoundGeometry(trained.harvest, 2), layout)}).",
            where=flag,
        )
    return block


def _flag_value(flag: str, g: RoundGeometry, layout: Arm) -> int:
    """What ``flag`` says for geometry ``g`` in its builtin's terms."""
    if flag == NUM_DRAFT_TOKENS_FLAG:
        return g.verify_window
    if flag == BLOCK_SIZE_FLAGS[DsparkHarvest.DSPARK] and layout.builtin == DSPARK:
        return g.gamma
    return g.block_size


def flag_int(flag: str, value: Any) -> int:
    """A width flag's value as an integer (sglang may hand it over as a string); refused otherwise."""
    if is_int(value):
        return value
    text = value.strip() if isinstance(value, str) else ""
    if not (text.isascii() and text.isdigit() and len(text) <= 6):
        raise InvalidCheckpointError(
            f"{flag} {value!r} is not a block size or a window; pass the number of rows the drafter was "
            "trained with (an integer >= 2), or add block_size to the draft's config.json.",
            where=flag,
        )
    return int(text)


__all__ = ["NUM_DRAFT_TOKENS_FLAG", "flag_int", "requested_blocks", "served_block_size"]
