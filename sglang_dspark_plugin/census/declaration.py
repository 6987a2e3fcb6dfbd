"""Declarations other engines read: the census's decision written into a copy of a draft's config.json.

The census decides a draft's harvest from every signal it carries; an engine other than this plugin reads
one key, or none, and guesses the rest. ``declare`` writes the decision in the keys those engines read,
in a new folder (the tensors linked or copied, the source never touched):

* ``sample_from_anchor`` at the top level (sglang 0.5.23's DSPARK reads it there only) and nested in
  ``dflash_config`` (where sglang's nemotron check, the open DFLASH PR 40203 and the speculators-style
  exports look); ``true`` = anchor-first (shifted, DSpark), ``false`` = 1+N fill-in (mask-fill, DFlash);
* the block size at the top level and in ``dflash_config`` where the source leaves it out (sglang reads
  ``dflash_config.block_size`` then the top level; SpecForge requires the top level).

A draft the census refuses (contradictory evidence, Domino, malformed) is refused here too, and so is
one with no vote at all: the plugin serves such a draft with the historical default, a guess that a
declaration must not turn into a fact. ``MEMRA_DSPARK_HARVEST`` is not read: it overrides one launch,
and a declaration outlives it.

What each sglang release's own builtins (and the two open sglang PRs) serve from the source and from
the copy is the serving side's reading (``releases.plain``), which ``cli.declare`` prints beside this.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CensusConflictError, UsageError
from ..limits import MAX_BLOCK_SIZE
from .architectures import FAMILY_DFLASH, FAMILY_DSPARK
from .decision import CONFLICT_FIX
from .draft_config import DflashCfg
from .folder import write_folder
from .locate import CONFIG

READS_SHIFTED = "shifted"
READS_MASK_FILL = "mask-fill"
FLAG = "sample_from_anchor"
NESTED = "dflash_config"
LAYOUT_OF = {FAMILY_DSPARK: READS_SHIFTED, FAMILY_DFLASH: READS_MASK_FILL}


@dataclass(frozen=True)
class Declaration:
    """The declared config and what it changed: the keys written, the layout."""

    source: str
    out: str
    harvest: str  # "dflash" | "dspark", the census's decision
    config: dict[str, Any]
    source_config: dict[str, Any]  # the source's config.json, as the census read it
    written: dict[str, Any]  # key path -> value, only the keys the source lacked or had otherwise
    files: int  # the other files, linked or copied
    copied: bool

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report's declaration: the keys written, the layout, the files."""
        return {
            "source": self.source,
            "out": self.out,
            "harvest": self.harvest,
            "layout": LAYOUT_OF[self.harvest],
            "block_size": self.config[NESTED]["block_size"],
            "written": self.written,
            "files": self.files,
            "files_are": "copied" if self.copied else "linked to the source's",
        }


def declared_config(cfg: DflashCfg, block_size: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(config, written)``: the census's decision on ``cfg`` stated in every key ``declare`` writes.

    Raises ``CensusConflictError`` on contradictory evidence and ``UsageError`` for a draft with no
    vote, or with no block size and no ``block_size`` given (or one that contradicts the source's)."""
    if cfg.conflict:
        fix = "Fix the checkpoint's config.json: declare states only what its evidence agrees on."
        raise CensusConflictError(cfg.conflict.replace(CONFLICT_FIX, fix), where=cfg.path)
    if cfg.verdict not in LAYOUT_OF:
        raise UsageError(
            "the census found no signal of this draft's training strategy: the plugin serves it with "
            "the historical default (mask-fill), a guess a declaration must not state as a fact; add "
            f"'{FLAG}' to its config.json by hand if you know how it was trained.",
            where=os.path.join(cfg.path, CONFIG),
        )
    width = _block_size(cfg, block_size)
    config = copy.deepcopy(cfg.raw)
    nested = config.get(NESTED)
    if nested is None:
        nested = config[NESTED] = {}
    if not isinstance(nested, dict):
        raise UsageError(
            f"{NESTED} is {type(nested).__name__}, not an object; fix the source's config.json.",
            where=os.path.join(cfg.path, CONFIG),
        )
    wanted = {FLAG: cfg.verdict == FAMILY_DSPARK, "block_size": width}
    written: dict[str, Any] = {}
    for table, prefix in ((config, ""), (nested, f"{NESTED}.")):
        for key, value in wanted.items():
            if table.get(key) != value or type(table.get(key)) is not type(value):
                table[key] = value
                written[prefix + key] = value
    return config, written


def _block_size(cfg: DflashCfg, given: int | None) -> int:
    where = os.path.join(cfg.path, CONFIG)
    if given is not None and not 2 <= given <= MAX_BLOCK_SIZE:
        raise UsageError(f"--block-size {given}: a block has 2..{MAX_BLOCK_SIZE} rows.", where="--block-size")
    if cfg.block_size is None and given is None:
        raise UsageError(
            "the source gives no block size; pass --block-size N, the width the drafter was trained with.",
            where=where,
        )
    if cfg.block_size is not None and given is not None and given != cfg.block_size:
        raise UsageError(
            f"--block-size {given} contradicts the source's block size {cfg.block_size}; drop the flag.",
            where="--block-size",
        )
    return cfg.block_size if cfg.block_size is not None else int(given or 0)


def declare(
    cfg: DflashCfg, out: str | os.PathLike[str], *, block_size: int | None = None, copy_files: bool = False
) -> Declaration:
    """Write ``out``: a copy of the census's checkpoint folder whose config.json declares the decision
    (``folder.write_folder``: every other file linked to the source's, or copied with ``copy_files``;
    built aside and renamed into place; a typed refusal with nothing left behind). ``out`` must not
    exist yet, nor lie inside the source."""
    config, written = declared_config(cfg, block_size)
    files = write_folder(Path(cfg.path).absolute(), Path(out).absolute(), config, copy_files)
    return Declaration(
        cfg.path, os.fspath(out), str(cfg.verdict), config, cfg.raw, written, files, copy_files
    )


__all__ = [
    "Declaration",
    "declare",
    "declared_config",
    "READS_SHIFTED",
    "READS_MASK_FILL",
]
