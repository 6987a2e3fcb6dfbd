"""Round geometry and the geometry manifest.

Invariant, for every block size and both conventions: the harvested rows' trained offsets are
exactly 1..gamma, in order (draft j predicts anchor+j).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from .errors import GeometryError, HarvestEnvError, MissingBlockSizeError
from .harvest import DsparkHarvest
from .limits import MAX_BLOCK_SIZE, MAX_GAMMA
from .util.reprs import short
from .version import __version__

if TYPE_CHECKING:
    from .census.draft_config import DflashCfg
    from .harvest import Resolution

MANIFEST_SCHEMA = "sglang-dspark-plugin/geometry-manifest/v1"

BLOCK_SIZE_FLAGS = {
    DsparkHarvest.DFLASH: "--speculative-dflash-block-size",
    DsparkHarvest.DSPARK: "--speculative-dspark-block-size",
}
"""sglang's flag, per arm, that gives the block size when the draft config has none."""


@dataclass(frozen=True)
class RoundGeometry:
    """The shape of one speculative round for a harvest convention and a block size."""

    harvest: DsparkHarvest
    block_size: int

    def __post_init__(self) -> None:
        if not isinstance(self.harvest, DsparkHarvest):
            raise HarvestEnvError(
                f"RoundGeometry harvest={short(self.harvest, 60)} ({type(self.harvest).__name__}) is not a "
                "DsparkHarvest; pass DsparkHarvest.DFLASH or DsparkHarvest.DSPARK "
                "(DsparkHarvest.from_name maps a serialized name to one).",
                where="RoundGeometry(harvest=...)",
            )
        flag = BLOCK_SIZE_FLAGS[self.harvest]
        if self.block_size is None:
            raise MissingBlockSizeError(
                "the draft config gives no block size (none of block_size, dflash_config.block_size, "
                "dspark_block_size, dspark_config.block_size, speculators_config.block_size, "
                "transformer_layer_config.block_size), so the round geometry is unknown; sglang then "
                f"takes it from {flag}: pass {flag} B with the width the drafter was trained with, or "
                "add block_size to the draft's config.json.",
                where=flag,
            )
        self.harvest.n_drafts(self.block_size)  # refuses a non-integer, and a block that yields no draft
        if self.block_size > MAX_BLOCK_SIZE:
            raise GeometryError(
                f"block size {self.block_size} is beyond {MAX_BLOCK_SIZE} rows; published drafters use "
                "4..16. Pass the width the drafter was trained with (block_size in its config.json, or "
                f"{flag}).",
                where="block_size",
            )

    @property
    def first_row(self) -> int:
        """The output row that holds draft 1."""
        return self.harvest.first_row()

    @property
    def gamma(self) -> int:
        """Drafts per round."""
        return self.harvest.n_drafts(self.block_size)

    @property
    def n_drafts(self) -> int:
        """The seed API's name for ``gamma``."""
        return self.gamma

    @property
    def verify_window(self) -> int:
        """Tokens the target verifies per round: ``[anchor, d1..d_gamma]``."""
        return self.gamma + 1

    @property
    def harvested_rows(self) -> tuple[int, ...]:
        """The output rows taken as drafts 1..gamma, in order."""
        return tuple(range(self.first_row, self.first_row + self.gamma))

    @property
    def draft_rows(self) -> slice:
        """The harvested rows as one slice: ``rows[draft_rows]`` are drafts 1..gamma, in order."""
        return slice(self.first_row, self.first_row + self.gamma)

    @property
    def trained_offsets(self) -> tuple[int, ...]:
        """The offset from the anchor each harvested row was trained for: always 1..gamma."""
        return tuple(self.harvest.trained_offset_of_row(r) for r in self.harvested_rows)

    def to_json(self) -> dict[str, Any]:
        """The geometry fields of the manifest and of ``inspect --json``."""
        return {
            "harvest": self.harvest.name(),
            "block_size": self.block_size,
            "first_row": self.first_row,
            "n_drafts": self.gamma,
            "gamma": self.gamma,
            "verify_window": self.verify_window,
            "harvested_rows": list(self.harvested_rows),
            "trained_offsets": list(self.trained_offsets),
        }


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def build_manifest(
    geometry: RoundGeometry,
    resolution: Resolution,
    cfg: DflashCfg | None = None,
    *,
    producer: str,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The geometry record plus its provenance, identical in shape for the plugin and the engine."""
    manifest: dict[str, Any] = {
        "schema": MANIFEST_SCHEMA,
        "producer": producer,  # "sglang-plugin" or "reference-engine"
        **geometry.to_json(),
        **resolution.to_json(),  # source, env value, census harvest, evidence, warnings
        "checkpoint": None if cfg is None else cfg.path,
        "architecture": None if cfg is None else cfg.architecture,
        "mask_token_id": None if cfg is None else cfg.mask_token_id,
        "target_layer_ids": None
        if cfg is None or cfg.target_layer_ids is None
        else list(cfg.target_layer_ids),
        "versions": {
            "sglang-dspark-plugin": __version__,  # the running code's, installed or not
            "sglang": _version("sglang"),
            "torch": _version("torch"),
            "transformers": _version("transformers"),
        },
    }
    if extra:
        manifest.update(extra)
    return manifest


def manifest_json(manifest: dict[str, Any]) -> str:
    """Stable serialization (sorted keys) so two manifests diff field by field."""
    return json.dumps(manifest, sort_keys=True, indent=2, default=str)


__all__ = [
    "RoundGeometry",
    "build_manifest",
    "manifest_json",
    "MANIFEST_SCHEMA",
    "MAX_BLOCK_SIZE",
    "MAX_GAMMA",
    "BLOCK_SIZE_FLAGS",
]
