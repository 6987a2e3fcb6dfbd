"""The seed API: which output rows of a DFlash-family draft block are the drafts.

A drafter receives ``[anchor, MASK x (b-1)]`` and returns one row per input row.

* ``DFLASH`` (mask-fill): row k is trained on the token at anchor+k; the anchor row is untrained.
  Drafts are rows 1..b-1 (b-1 of them), verify window b.
* ``DSPARK`` (shifted): row k is trained on the token at anchor+k+1, anchor row included.
  Drafts are rows 0..b-1 (b of them), verify window b+1.

Either way draft j (1-based) is row ``first_row() + j - 1`` and predicts position anchor+j.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .census.draft_config import vote_list
from .errors import GeometryError, HarvestEnvError
from .util.validation import is_int, require_environ, require_type

if TYPE_CHECKING:
    from .census.draft_config import DflashCfg, Signal

ENV_VAR = "MEMRA_DSPARK_HARVEST"
"""The explicit override. Unset: the checkpoint census decides (historical default: dflash)."""


class DsparkHarvest(enum.Enum):
    """The draft-row harvest convention of a DFlash-family drafter."""

    DFLASH = "dflash"
    DSPARK = "dspark"

    def name(self) -> str:  # type: ignore[override]  # the seed API's serialized name
        """The manifest / serialized name: ``"dflash"`` or ``"dspark"``."""
        return self.value

    @staticmethod
    def from_name(s: object) -> DsparkHarvest | None:
        """Exact serialized name -> member; anything else -> ``None``."""
        for member in DsparkHarvest:
            if s == member.value:
                return member
        return None

    def first_row(self) -> int:
        """The output row that holds draft 1."""
        return 1 if self is DsparkHarvest.DFLASH else 0

    def n_drafts(self, b: int) -> int:
        """Drafts harvested from a block of ``b`` rows; refuses a block that yields none."""
        if not is_int(b):
            raise GeometryError(
                f"block size must be an integer, got {b!r} ({type(b).__name__}); "
                "pass the drafter's block_size (rows per draft block)."
            )
        n = b - 1 if self is DsparkHarvest.DFLASH else b
        if n < 1:
            raise GeometryError(
                f"a block of {b} row(s) yields {n} draft(s) under the {self.value} harvest; "
                f"{self.value} needs block_size >= {2 if self is DsparkHarvest.DFLASH else 1} "
                "(check block_size / dflash_config.block_size / dspark_block_size in the draft config)."
            )
        return n

    def trained_offset_of_row(self, row: int) -> int:
        """The position, relative to the anchor, that output row ``row`` was trained to predict."""
        if not is_int(row) or row < 0:
            raise GeometryError(f"row must be a non-negative integer, got {row!r}.")
        return row if self is DsparkHarvest.DFLASH else row + 1

    @staticmethod
    def from_env_value(v: str | None) -> DsparkHarvest:
        """Parse an explicit harvest value. ``None`` (unset) -> DFLASH, the historical arm.

        ``dflash`` and ``dspark`` are accepted ignoring ASCII case and surrounding ASCII whitespace;
        anything else (a typo, the empty string, a non-ASCII look-alike such as the Kelvin sign, whose
        lower case is ``k``) is refused: a silent fallback is how misalignment hides.
        """
        if v is None:
            return DsparkHarvest.DFLASH
        if isinstance(v, str) and v.isascii():
            member = DsparkHarvest.from_name(v.strip(" \t\n\r\f\v").lower())
            if member is not None:
                return member
        accepted = ", ".join(repr(m.value) for m in DsparkHarvest)
        raise HarvestEnvError(
            f"{ENV_VAR}={_shown(v)} is not a harvest convention; accepted values: {accepted} "
            f"(ASCII, case-insensitive), or leave {ENV_VAR} unset to let the checkpoint census decide.",
            where=ENV_VAR,
        )

    @staticmethod
    def resolve_value(v: str | None, strategy_dspark: bool) -> DsparkHarvest:
        """Explicit ``v`` wins (parsed by ``from_env_value``); unset -> the census strategy."""
        hint = "pass DflashCfg.strategy_dspark (True or False)."
        require_type(strategy_dspark, bool, "strategy_dspark", hint)
        if v is not None:
            return DsparkHarvest.from_env_value(v)
        return DsparkHarvest.DSPARK if strategy_dspark else DsparkHarvest.DFLASH

    @staticmethod
    def resolve(cfg: DflashCfg) -> DsparkHarvest:
        """The served resolution: ``MEMRA_DSPARK_HARVEST`` if set, else the checkpoint's census."""
        return DsparkHarvest.explain(cfg).harvest

    @staticmethod
    def explain(cfg: DflashCfg, environ: Mapping[str, str] | None = None) -> Resolution:
        """``resolve`` plus where the answer came from (``env``, ``census`` or ``default``)."""
        return Resolution.of(cfg, require_environ(environ, "DsparkHarvest.explain(environ=...)").get(ENV_VAR))


def _shown(value: object, limit: int = 60) -> str:
    """``ascii(value)`` cut to ``limit`` characters: a look-alike shows its escapes, a huge value is cut."""
    text = ascii(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}... ({len(text)} characters)"


@dataclass(frozen=True)
class Resolution:
    """A resolved harvest and its provenance."""

    harvest: DsparkHarvest
    source: str  # "env" | "census" | "default"
    env_value: str | None
    evidence: tuple[Signal, ...] = ()
    census_harvest: DsparkHarvest | None = None
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, cfg: DflashCfg, env_value: str | None) -> Resolution:
        """Resolve ``cfg`` under an explicit value (``None`` = unset)."""
        from .census.draft_config import DflashCfg

        hint = "pass the census's result (sglang_dspark_plugin.census.census(path)), not a raw config."
        require_type(cfg, DflashCfg, "cfg", hint)
        evidence = cfg.evidence
        if env_value is None:
            # Raises CensusConflictError when the deciding tier disagrees: no default on conflict.
            harvest = DsparkHarvest.resolve_value(None, cfg.strategy_dspark)
            source = "census" if cfg.deciding_tier is not None else "default"
            return cls(harvest, source, None, evidence, harvest if source == "census" else None)

        harvest = DsparkHarvest.from_env_value(env_value)
        warnings: list[str] = []
        census_harvest: DsparkHarvest | None = None
        if cfg.conflict:
            warnings.append(
                f"{ENV_VAR}={env_value!r} overrides a checkpoint whose census is contradictory "
                f"({cfg.conflict}); serving the {harvest.value} harvest because you asked for it."
            )
        elif cfg.deciding_tier is not None:
            census_harvest = DsparkHarvest.resolve_value(None, cfg.strategy_dspark)
            if census_harvest is not harvest:
                votes = vote_list(evidence)
                warnings.append(
                    f"{ENV_VAR}={env_value!r} contradicts the checkpoint census, which says "
                    f"{census_harvest.value} ({votes}). Serving {harvest.value} as asked; if acceptance "
                    f"collapses, unset {ENV_VAR}."
                )
        return cls(harvest, "env", env_value, evidence, census_harvest, tuple(warnings))

    def to_json(self) -> dict[str, Any]:
        """JSON-able form used by the CLI and the manifest."""
        return {
            "harvest": self.harvest.name(),
            "source": self.source,
            "env_var": ENV_VAR,
            "env_value": self.env_value,
            "census_harvest": None if self.census_harvest is None else self.census_harvest.name(),
            "evidence": [s.to_json() for s in self.evidence],
            "warnings": list(self.warnings),
        }


__all__ = ["DsparkHarvest", "Resolution", "ENV_VAR"]
