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

``ENGINE_READERS`` is what each sglang release (and the two open sglang PRs) serves from such a config,
as the research read their code; ``served_by`` applies it to a config, so ``declare`` can print what
each would have served before the declaration and what it serves after.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CensusConflictError, UsageError
from ..limits import MAX_BLOCK_SIZE
from .architectures import FAMILY_DFLASH, FAMILY_DSPARK, family_of
from .decision import CONFLICT_FIX
from .draft_config import DflashCfg
from .folder import write_folder
from .locate import CONFIG

READS_SHIFTED = "shifted"
READS_MASK_FILL = "mask-fill"
REFUSED = "refused"
FLAG = "sample_from_anchor"
NESTED = "dflash_config"
LAYOUT_OF = {FAMILY_DSPARK: READS_SHIFTED, FAMILY_DFLASH: READS_MASK_FILL}


def _flag(config: Mapping[str, Any], *sections: str, keys: tuple[str, ...] = (FLAG,)) -> bool | None:
    """The first boolean among ``keys`` at the top level (``""``) or in the named sections."""
    for section in sections:
        table = config if section == "" else config.get(section)
        if isinstance(table, Mapping):
            for key in keys:
                if isinstance(table.get(key), bool):
                    return bool(table[key])
    return None


def _dspark_0523(config: Mapping[str, Any]) -> str:
    return READS_MASK_FILL if _flag(config, "") is False else READS_SHIFTED


def _pr_40203(config: Mapping[str, Any]) -> str:
    value = _flag(config, "", NESTED, keys=(FLAG, "query_zero_predicts_next"))
    return READS_SHIFTED if value else READS_MASK_FILL


def _pr_40181(config: Mapping[str, Any]) -> str:
    value = _flag(config, "", NESTED, keys=(FLAG, "query_zero_predicts_next"))
    return REFUSED if value else READS_MASK_FILL


@dataclass(frozen=True)
class EngineReader:
    """What one engine serves from a draft config: the family it loads, the keys it reads, where."""

    engine: str
    loads: str  # the architecture family it loads (FAMILY_DFLASH or FAMILY_DSPARK)
    reads: str  # the keys it reads, in words
    where: str  # file:line in the release (or the PR)
    serves: Callable[[Mapping[str, Any]], str]


ENGINE_READERS: tuple[EngineReader, ...] = (
    EngineReader(
        "sglang 0.5.17 DSPARK",
        FAMILY_DSPARK,
        "no key: always anchor-first",
        "speculative/dspark_components/dspark_draft.py:318-323,369",
        lambda _c: READS_SHIFTED,
    ),
    EngineReader(
        "sglang 0.5.23 DSPARK",
        FAMILY_DSPARK,
        "top-level sample_from_anchor (absent: true; nested ignored)",
        "speculative/dspark_components/dspark_config.py:29-31; dspark_draft.py:656-668",
        _dspark_0523,
    ),
    EngineReader(
        "sglang 0.5.17-0.5.23 DFLASH",
        FAMILY_DFLASH,
        "no key: always 1+N fill-in",
        "speculative/dflash_worker_v2.py:130,1641 (0.5.17); :183,2804 (0.5.23)",
        lambda _c: READS_MASK_FILL,
    ),
    EngineReader(
        "sglang DFLASH + PR 40203 (open)",
        FAMILY_DFLASH,
        "sample_from_anchor / query_zero_predicts_next, top level or nested (absent: 1+N)",
        "github.com/sgl-project/sglang/pull/40203",
        _pr_40203,
    ),
    EngineReader(
        "sglang DFLASH + PR 40181 (open)",
        FAMILY_DFLASH,
        "refuses sample_from_anchor / query_zero_predicts_next = true",
        "github.com/sgl-project/sglang/pull/40181",
        _pr_40181,
    ),
)
"""What each sglang release (and each open PR) serves from a draft config it loads."""


def served_by(config: Mapping[str, Any]) -> list[dict[str, str]]:
    """For each ``ENGINE_READERS`` row that loads this config's architecture: what it serves."""
    architectures = config.get("architectures")
    name = architectures[0] if isinstance(architectures, list) and architectures else None
    family = family_of(name)
    return [
        {"engine": r.engine, "serves": r.serves(config), "reads": r.reads, "where": r.where}
        for r in ENGINE_READERS
        if family is None or r.loads == family
    ]


@dataclass(frozen=True)
class Declaration:
    """The declared config and what it changed: the keys written, the layout, the engines' readings."""

    source: str
    out: str
    harvest: str  # "dflash" | "dspark", the census's decision
    config: dict[str, Any]
    source_config: dict[str, Any]  # the source's config.json, as the census read it
    written: dict[str, Any]  # key path -> value, only the keys the source lacked or had otherwise
    files: int  # the other files, linked or copied
    copied: bool

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` report: keys written, the layout each engine served before and serves after."""
        before = {row["engine"]: row["serves"] for row in served_by(self.source_config)}
        layout = LAYOUT_OF[self.harvest]
        engines = [
            {**row, "before": before[row["engine"]], "right": row["serves"] == layout}
            for row in served_by(self.config)
        ]
        return {
            "source": self.source,
            "out": self.out,
            "harvest": self.harvest,
            "layout": layout,
            "written": self.written,
            "files": self.files,
            "files_are": "copied" if self.copied else "linked to the source's",
            "engines": engines,
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
    "ENGINE_READERS",
    "EngineReader",
    "Declaration",
    "declare",
    "declared_config",
    "served_by",
    "READS_SHIFTED",
    "READS_MASK_FILL",
    "REFUSED",
]
