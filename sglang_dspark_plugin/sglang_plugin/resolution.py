"""The served resolution: the draft checkpoint sglang was given -> census -> harvest -> round geometry.

``served(server_args)`` is the one place the sglang glue turns server arguments into a harvest. It
runs once per process (cached by draft path and ``MEMRA_DSPARK_HARVEST``): in the main process from
``handle_server_args`` (argument resolution, before any model loads), and again in every spawned
scheduler process, where the factory and the workers ask for it.

It accepts the real ``ServerArgs`` of both sglang versions and 0.5.23's recording stand-in
(``sglang.srt.arg_groups.overrides._ForeignDefaults``, which a plugin's ``handle_server_args`` receives
there): ``unwrap_record`` reaches the record behind the stand-in, ``read_arg`` reads through 0.5.23's
resolving view (declarations made so far over the raw input), and ``declare_args`` writes the way each
version's own handlers write (0.5.23 ``declare_resolution``, 0.5.17 plain attributes).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from ..draft_config import DflashCfg
from ..errors import DsparkHarvestError, InvalidCheckpointError
from ..geometry import BLOCK_SIZE_FLAGS, RoundGeometry, build_manifest, manifest_json
from ..harvest import ENV_VAR, DsparkHarvest, Resolution
from .layout import harvest_layout, layout_for

ALGORITHM = "DSPARK_HARVEST"
"""The name users pass to ``--speculative-algorithm``."""

MANIFEST_ENV_VAR = "MEMRA_DSPARK_MANIFEST"
"""When set to a path, the main process writes the geometry manifest there at startup."""

logger = logging.getLogger("sglang_dspark_plugin.sglang_plugin")


class ServeRefusal(DsparkHarvestError, ValueError):
    """A refusal raised while sglang resolves its arguments.

    A ``ValueError``, like sglang's own argument errors, so ``launch_server`` and ``Engine`` end with
    the message as the last line; ``kind`` keeps the class of the typed error it wraps.
    """

    def __init__(self, message: str, *, kind: str = "invalid", where: str | None = None) -> None:
        super().__init__(message, where=where)
        self.kind = kind

    @classmethod
    def wrap(cls, err: DsparkHarvestError) -> ServeRefusal:
        """Re-raise a typed error that is not a ``ValueError`` (census conflict, unsupported drafter)."""
        return cls(f"{ALGORITHM}: {err.message}", kind=err.kind, where=err.where)


@dataclass(frozen=True)
class Served:
    """What the plugin serves for one draft checkpoint in this process."""

    cfg: DflashCfg
    resolution: Resolution
    geometry: RoundGeometry
    manifest: dict[str, Any]
    draft: str = ""  # --speculative-draft-model-path as given (cfg.path is the folder it resolved to)
    target: str | None = None  # --model-path
    block_size_source: str = "config.json"  # or the flag that gave it, when the config has none


_CACHE: dict[tuple[Any, ...], Served] = {}
_ANNOUNCED: set[tuple[str, str | None]] = set()


def unwrap_record(server_args: Any) -> Any:
    """The ``ServerArgs`` record behind 0.5.23's recording stand-in; anything else unchanged."""
    try:
        from sglang.srt.arg_groups.overrides import _ForeignDefaults, record_of
    except ImportError:  # 0.5.17 hands plugins the record itself
        return server_args
    if isinstance(server_args, _ForeignDefaults):
        return record_of(object.__getattribute__(server_args, "_cfg"))
    return server_args


def read_arg(server_args: Any, name: str) -> Any:
    """A server argument as resolved so far (0.5.23: declarations over raw input; 0.5.17: the field)."""
    record = unwrap_record(server_args)
    try:
        from sglang.srt.arg_groups.overrides import resolving_view
    except ImportError:
        return getattr(record, name)
    return getattr(resolving_view(record), name)


def declare_args(server_args: Any, source: str, **fields: Any) -> None:
    """Set server arguments so that sglang's later readers (and its builtin handlers) see them."""
    record = unwrap_record(server_args)
    try:
        from sglang.srt.arg_groups.overrides import declare_resolution
    except ImportError:  # 0.5.17's handlers assign fields in place; do the same
        for name, value in fields.items():
            setattr(record, name, value)
        return
    declare_resolution(record, source, **fields)


def published_server_args() -> Any | None:
    """The server args sglang published in this process (scheduler: before ``Scheduler(...)``), or None."""
    from sglang.srt.runtime_context import get_context

    try:
        return get_context().server_args
    except ValueError:  # "Global server args is not set yet!"
        return None


def served(server_args: Any) -> Served:
    """Census the draft checkpoint in ``server_args`` and resolve its harvest and geometry (cached)."""
    draft = read_arg(server_args, "speculative_draft_model_path")
    if not draft:
        raise InvalidCheckpointError(
            f"{ALGORITHM} needs a draft checkpoint: pass --speculative-draft-model-path DRAFT (a local "
            "directory or a hub id already in the Hugging Face cache); got none.",
            where="--speculative-draft-model-path",
        )
    target = _optional_arg(server_args, "model_path")
    flags = {flag: _optional_arg(server_args, field) for flag, field in BLOCK_SIZE_FIELDS.items()}
    key = (str(draft), os.environ.get(ENV_VAR), target, *flags.values())
    hit = _CACHE.get(key)
    if hit is not None:
        return hit

    from ..census import census

    try:
        cfg = census(str(draft))
        resolution = DsparkHarvest.explain(cfg)
        block_size, block_size_source = _block_size(cfg, resolution.harvest, flags)
        # A missing block size (None) is refused by RoundGeometry itself, naming the arm's flag.
        geometry = RoundGeometry(resolution.harvest, cast(int, block_size))
    except DsparkHarvestError as err:
        if isinstance(err, ValueError):
            raise
        raise ServeRefusal.wrap(err) from err
    layout = layout_for(resolution.harvest, cfg)
    manifest = build_manifest(
        geometry,
        resolution,
        cfg,
        producer="sglang-plugin",
        extra={
            "algorithm": ALGORITHM,
            "sglang_builtin": layout.builtin,
            **layout.manifest_fields(),
            "speculative_num_draft_tokens": geometry.verify_window,
            "block_size_source": block_size_source,
        },
    )
    result = Served(
        cfg=cfg,
        resolution=resolution,
        geometry=geometry,
        manifest=manifest,
        draft=str(draft),
        target=None if target is None else str(target),
        block_size_source=block_size_source,
    )
    _CACHE[key] = result
    return result


BLOCK_SIZE_FIELDS = {flag: flag[2:].replace("-", "_") for flag in BLOCK_SIZE_FLAGS.values()}
"""sglang's block-size flags and their ServerArgs fields."""


def _block_size(cfg: DflashCfg, harvest: DsparkHarvest, flags: dict[str, Any]) -> tuple[int | None, str]:
    """The block size and where it came from: config.json, else a block-size flag (the arm's own first,
    since published DFlash configs may leave it to sglang's flag); ``None`` when neither gives one."""
    if cfg.block_size is not None:
        return cfg.block_size, "config.json"
    arm_flag = BLOCK_SIZE_FLAGS[harvest]
    for flag in sorted(flags, key=lambda f: f != arm_flag):
        if flags[flag] is not None:
            return _flag_int(flag, flags[flag]), flag
    return None, "config.json"


def _optional_arg(server_args: Any, name: str) -> Any:
    """``read_arg``, or None for a stand-in that lacks the field (sglang's ServerArgs always has it)."""
    try:
        return read_arg(server_args, name)
    except AttributeError:
        return None


def _flag_int(flag: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).strip().isdigit():
        raise InvalidCheckpointError(
            f"{flag} {value!r} is not a block size; pass the number of rows the drafter was trained "
            "with (an integer >= 2), or add block_size to the draft's config.json.",
            where=flag,
        )
    return int(value)


def builtin_name(harvest: DsparkHarvest) -> str:
    """The sglang builtin whose semantics the arm serves: DFLASH (mask-fill) or DSPARK (shifted)."""
    return harvest_layout(harvest).builtin


def describe(s: Served) -> str:
    """One line: the harvest, where it came from, and the round geometry."""
    g = s.geometry
    src = s.resolution.source
    if src == "env":
        src = f"env {ENV_VAR}={s.resolution.env_value!r}"
    elif src == "census":
        votes = [f"{e.signal}={e.value!r}" for e in s.resolution.evidence if e.vote is not None]
        src = "census: " + ", ".join(votes) if votes else "census"
    else:
        src = "default (no training-strategy signal in the checkpoint; the historical mask-fill arm)"
    return (
        f"{ALGORITHM}: harvest={g.harvest.name()} ({_builtin_text(s)} semantics) from {src}; "
        f"block_size={g.block_size}{_block_size_note(s)}, drafts per round={g.gamma} "
        f"(rows {g.harvested_rows[0]}..{g.harvested_rows[-1]}), verify window={g.verify_window}; "
        f"checkpoint {s.cfg.path}"
    )


def _builtin_text(s: Served) -> str:
    """The builtin serving ``s`` (``DSPARK, sample_from_anchor=false`` for a mask-fill DSpark drafter)."""
    return layout_for(s.geometry.harvest, s.cfg).describe()


def _block_size_note(s: Served) -> str:
    source = getattr(s, "block_size_source", "config.json")  # stand-ins built before the field existed
    return "" if source == "config.json" else f" (from {source})"


def announce(s: Served) -> None:
    """Log the resolution and the manifest once per process; write the manifest file on request."""
    key = (s.cfg.path, s.resolution.env_value)
    if key in _ANNOUNCED:
        return
    _ANNOUNCED.add(key)
    logger.info("%s", describe(s))
    for warning in s.resolution.warnings:
        logger.warning("%s: %s", ALGORITHM, warning)
    logger.info("%s geometry manifest: %s", ALGORITHM, json.dumps(s.manifest, sort_keys=True, default=str))
    path = os.environ.get(MANIFEST_ENV_VAR)
    if path:
        try:
            Path(path).write_text(manifest_json(s.manifest) + "\n", encoding="utf-8")
        except OSError as err:
            raise InvalidCheckpointError(
                f"{MANIFEST_ENV_VAR}={path!r}: cannot write the geometry manifest there ({err}); "
                f"point {MANIFEST_ENV_VAR} at a writable file path or unset it.",
                where=MANIFEST_ENV_VAR,
            ) from err
        logger.info("%s geometry manifest written to %s", ALGORITHM, path)


def clear_cache() -> None:
    """Forget cached resolutions and announcements (tests; a process normally resolves once)."""
    _CACHE.clear()
    _ANNOUNCED.clear()


__all__ = [
    "ALGORITHM",
    "MANIFEST_ENV_VAR",
    "Served",
    "ServeRefusal",
    "served",
    "unwrap_record",
    "read_arg",
    "declare_args",
    "published_server_args",
    "builtin_name",
    "describe",
    "announce",
    "clear_cache",
]
