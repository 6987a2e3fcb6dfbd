"""The launch's target checkpoint, found where sglang finds it (sglang-free).

sglang resolves ``--model-path`` once for the whole launch: a local folder as it is, a hub id at
``--revision`` (default ``main``) in ``--download-dir`` when given, else the Hugging Face cache, fetched
unless ``HF_HUB_OFFLINE``. Every part of the plan that reads the target (its layer count and
vocabulary, a draft bundled in it) reads the one folder ``load_target`` returns, through the resolver
drafts use (``census.locate.resolve_checkpoint``), so no check reads a revision sglang does not serve.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..census.locate import CONFIG, is_hub_id, resolve_checkpoint
from ..checkpoint.bounds import MAX_CONFIG_MEMBERS
from ..checkpoint.files import MAX_CONFIG_BYTES, is_dir, read_json
from ..errors import HubDownloadError
from .capture import target_layer_count, target_vocab_size, uncapturable_message
from .refusal import ALGORITHM, ServeRefusal

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg
    from .request import LaunchRequest

CONFIG_PATTERNS = ["*.json"]
"""What the plan takes of a hub target to read it: its configs and shard index, never its weights."""

REVISION_FLAG = "--revision"


@dataclass(frozen=True)
class TargetCheckpoint:
    """The target sglang loads: ``--model-path`` as given, at ``--revision``, and what its folder holds."""

    name: str  # --model-path as given
    revision: str | None  # --revision as given (None: the hub's main)
    folder: Path  # the path itself, or the hub snapshot at that revision
    hub: bool  # whether the folder is a hub snapshot
    config: Mapping[str, Any] = field(default_factory=dict, compare=False)  # config.json ({}: none)

    @property
    def architecture(self) -> str | None:
        return target_layer_count(self.config)[0]

    @property
    def num_layers(self) -> int | None:
        return target_layer_count(self.config)[1]

    @property
    def vocab_size(self) -> int | None:
        return target_vocab_size(self.config)

    def describe(self) -> str:
        """The target as every node names it: ``org/name`` or ``org/name@rev``, or the local path."""
        return f"{self.name}@{self.revision}" if self.hub and self.revision else self.name


def load_target(
    request: LaunchRequest,
    allow_patterns: list[str] | None = None,
    *,
    download: bool = True,
    optional: bool = False,
) -> TargetCheckpoint | None:
    """The launch's target as sglang resolves it (``allow_patterns``: the files fetched of a hub target,
    default its configs), with its config.json; ``download=False`` reads the cache only.

    ``None`` where the launch names no target, or one that is neither a local folder nor a hub id (sglang
    says what it makes of it). A hub revision missing from the cache with ``HF_HUB_OFFLINE`` set is
    refused, typed, naming the repo, the revision and the download that fetches it; so is one whose
    download fails, unless ``optional`` (checks of the target are then left to sglang, which downloads
    it again and says what stops it)."""
    target = request.target
    local = target is not None and is_dir(target, "target")
    if target is None or not (local or is_hub_id(target)):
        return None
    try:
        folder = resolve_checkpoint(
            target,
            request.revision,
            download=download,
            cache_dir=request.download_dir,
            allow_patterns=CONFIG_PATTERNS if allow_patterns is None else allow_patterns,
            flag=REVISION_FLAG,
        )
    except HubDownloadError:
        if optional:
            return None
        raise
    fix = "fix the target's config.json."
    config = read_json(
        folder / CONFIG,
        "target config",
        MAX_CONFIG_BYTES,
        fix,
        MAX_CONFIG_MEMBERS,
        "bounds.MAX_CONFIG_MEMBERS",
    )
    return TargetCheckpoint(
        target, request.revision, folder, not local, config if isinstance(config, dict) else {}
    )


def refuse_uncapturable(target: TargetCheckpoint | None, cfg: DflashCfg) -> None:
    """Refuse a drafter whose target layers sglang cannot capture from this target (before any load);
    ``target`` is the launch's, at its ``--revision`` (``load_target``).

    sglang would fail at the first decode round ("DFLASH target_hidden feature dim mismatch").
    """

    if not cfg.target_layer_ids or target is None or target.num_layers is None:
        return
    architecture, layers = target.architecture, target.num_layers
    why = uncapturable_message(
        cfg.target_layer_ids, layers, where=f"{cfg.path}/config.json", target_architecture=architecture
    )
    if why:
        raise ServeRefusal(
            f"{ALGORITHM}: sglang cannot serve this drafter with target {target.describe()} "
            f"({architecture}, {layers} layers in {target.folder / 'config.json'}): {why}",
            kind="unsupported",
            where="target_layer_ids",
        )


__all__ = ["CONFIG_PATTERNS", "REVISION_FLAG", "TargetCheckpoint", "load_target", "refuse_uncapturable"]
