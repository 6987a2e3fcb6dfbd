"""What a launch asks for (``LaunchRequest``) and what the running sglang can serve (``SglangSupport``):
the two inputs of ``plan.make_plan``, plain frozen records that every part of the plan reads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..geometry import BLOCK_SIZE_FLAGS
from ..harvest import ENV_VAR, DsparkHarvest
from ..probe.live import ProbeSettings
from ..releases import nearest
from ..settings import MANIFEST, PEER_MANIFEST, read_setting
from ..telemetry.settings import TelemetrySettings

MANIFEST_ENV_VAR = MANIFEST.name
"""When set to a path, the launcher writes the geometry manifest there at startup."""

DFLASH_BLOCK_FLAG = BLOCK_SIZE_FLAGS[DsparkHarvest.DFLASH]
DSPARK_BLOCK_FLAG = BLOCK_SIZE_FLAGS[DsparkHarvest.DSPARK]


def flag_field(flag: str) -> str:
    """sglang's ``ServerArgs`` field of a flag: ``--speculative-dspark-block-size`` ->
    ``speculative_dspark_block_size``."""
    return flag[2:].replace("-", "_")


@dataclass(frozen=True)
class SglangSupport:
    """What the running sglang can serve, as far as the plan's decisions go: its row of the release
    table (``for_version``) or, for the running sglang, the same features read from its code."""

    version: str
    mask_fill_dspark: bool  # DSPARK reads sample_from_anchor (the mask-fill layout)
    disaggregation: tuple[str, ...]  # builtins whose prefill->decode draft state it builds
    dspark_subfolder: bool  # DSPARK finds a draft in the target's dspark/ subfolder
    dflash_reads_layout: bool = False  # DFLASH's draft-config parser reads the anchor-first keys itself
    # (no release of the table does: sglang PRs 40203 and 40181; the adapters detect it)

    @classmethod
    def for_version(cls, version: str) -> SglangSupport:
        """The support a release has, from the release table (``releases.nearest``: a release without a
        row is taken as the newest measured one below it); the adapters detect it from sglang's code."""
        release = nearest(version)
        return cls(version, release.mask_fill_dspark, release.pd_builtins, release.dspark_subfolder)


REQUEST_ARGS = (
    "speculative_draft_model_path",
    "speculative_draft_model_revision",
    "model_path",
    "revision",
    "download_dir",
    "speculative_num_draft_tokens",
    flag_field(DFLASH_BLOCK_FLAG),
    flag_field(DSPARK_BLOCK_FLAG),
    "disaggregation_mode",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "page_size",
)
"""sglang's server arguments a ``LaunchRequest`` is made of (``LaunchRequest.of``)."""


@dataclass(frozen=True)
class LaunchRequest:
    """What a launch asks for: the server arguments that matter and the settings as set at launch."""

    draft: str | None
    target: str | None = None
    draft_revision: str | None = None
    revision: str | None = None  # --revision: the target's, and a bundled draft's
    download_dir: str | None = None  # --download-dir: the cache sglang fetches a hub target's files into
    num_draft_tokens: Any = None
    dflash_block_size: Any = None
    dspark_block_size: Any = None
    disaggregation_mode: str | None = None
    num_steps: Any = None  # --speculative-num-steps, as given (the builtin overrides it to 1)
    eagle_topk: Any = None  # --speculative-eagle-topk, as given (the builtin overrides it to 1)
    page_size: Any = None  # --page-size, as given (sglang's default: 1)
    harvest_env: str | None = None  # MEMRA_DSPARK_HARVEST, as given (the resolution parses and records it)
    manifest_path: str | None = None  # MEMRA_DSPARK_MANIFEST
    peer_manifest: str | None = None  # MEMRA_DSPARK_PEER_MANIFEST (a disaggregated decode server)
    telemetry: TelemetrySettings = field(default_factory=TelemetrySettings)  # the telemetry variables
    probe: ProbeSettings = field(default_factory=ProbeSettings)  # the live offset probe's variables

    @classmethod
    def of(cls, args: Mapping[str, Any], environ: Mapping[str, str]) -> LaunchRequest:
        """From sglang's argument names (``speculative_draft_model_path``, ...) and an environment."""
        return cls(
            draft=_text(args.get("speculative_draft_model_path")),
            target=_text(args.get("model_path")),
            draft_revision=_text(args.get("speculative_draft_model_revision")),
            revision=_text(args.get("revision")),
            download_dir=_text(args.get("download_dir")),
            num_draft_tokens=args.get("speculative_num_draft_tokens"),
            dflash_block_size=args.get(flag_field(DFLASH_BLOCK_FLAG)),
            dspark_block_size=args.get(flag_field(DSPARK_BLOCK_FLAG)),
            disaggregation_mode=_text(args.get("disaggregation_mode")),
            num_steps=args.get("speculative_num_steps"),
            eagle_topk=args.get("speculative_eagle_topk"),
            page_size=args.get("page_size"),
            harvest_env=environ.get(ENV_VAR),
            manifest_path=read_setting(MANIFEST_ENV_VAR, environ),
            peer_manifest=read_setting(PEER_MANIFEST.name, environ),
            telemetry=TelemetrySettings.from_env(environ),
            probe=ProbeSettings.from_env(environ),
        )

    def block_size_flags(self) -> dict[str, Any]:
        """``{flag: value}`` of both arms' block-size flags (``None``: not given)."""
        return {DFLASH_BLOCK_FLAG: self.dflash_block_size, DSPARK_BLOCK_FLAG: self.dspark_block_size}


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


__all__ = [
    "DFLASH_BLOCK_FLAG",
    "DSPARK_BLOCK_FLAG",
    "MANIFEST_ENV_VAR",
    "REQUEST_ARGS",
    "LaunchRequest",
    "SglangSupport",
    "flag_field",
]
