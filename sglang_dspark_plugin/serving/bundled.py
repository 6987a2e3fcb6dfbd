"""A DSPARK draft bundled in the target checkpoint, found where sglang's builtin finds it (sglang-free).

With no ``--speculative-draft-model-path``, sglang's DSPARK handler (``_handle_dspark``) looks in two
places, in this order:

* ``dspark_keys``: the target's config.json carries sglang's prefixed ``dspark_*`` keys
  (``dspark_block_size`` = gamma, ``dspark_markov_rank``, ``dspark_noise_token_id`` = the mask token,
  ``dspark_target_layer_ids``): the draft is the target checkpoint itself (``--model-path`` at
  ``--revision``), its head the target's ``mtp.<stage>.*`` tensors, loaded as sglang's own
  ``DeepseekV4ForCausalLMDSpark`` (``architectures.SGLANG_BUNDLED_DSPARK``). sglang 0.5.17 and 0.5.23.
* ``dspark_subfolder``: a ``dspark/`` subfolder of the target with its own config.json, a complete
  draft checkpoint (for a hub id, the ``dspark/*`` files of the target's snapshot). sglang 0.5.23; 0.5.17
  refuses the launch.

The plan censuses the folder sglang will load and leaves the path to sglang's handler: a draft path
declared at the start of resolution would change what sglang resolves (its speculative step gives a
draft path without a revision the revision ``main``). The worker checks that sglang resolved the
folder the plan censused (``stages.check_served_draft``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..census.architectures import SGLANG_BUNDLED_DSPARK
from ..census.dialects import DEEPSEEK_STAGE_SIGNAL
from ..census.draft_config import DflashCfg
from ..census.locate import CONFIG
from ..census.rules import SGLANG_BUNDLE_KEYS
from ..checkpoint.files import printable, regular_file
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError
from ..harvest import ENV_VAR, DsparkHarvest, Resolution
from ..releases import first_release
from .layout import DSPARK, Arm
from .refusal import ALGORITHM, ServeRefusal
from .servability import require_mask_token
from .target_checkpoint import CONFIG_PATTERNS, TargetCheckpoint

if TYPE_CHECKING:
    from .request import LaunchRequest, SglangSupport

KEYS, SUBFOLDER = "dspark_keys", "dspark_subfolder"
SUBFOLDER_NAME = "dspark"
DRAFT_FLAG = "--speculative-draft-model-path"
HUB_PATTERNS = [*CONFIG_PATTERNS, f"{SUBFOLDER_NAME}/*"]
"""What the plan takes of a hub target that may bundle the draft: its configs and shard index (the
census reads names, not weights) and the ``dspark/`` files sglang itself fetches for a subfolder draft."""


@dataclass(frozen=True)
class BundledDraft:
    """Where a launch without a draft path finds its draft, as sglang's DSPARK handler finds it."""

    form: str  # KEYS or SUBFOLDER
    draft: str  # what sglang's --speculative-draft-model-path becomes on this node
    name: str  # the draft as every node names it: the target, or <target>/dspark
    folder: str  # the local folder the census reads
    revision: str | None = None  # KEYS: the target's --revision, which sglang gives the draft
    target_architecture: str | None = None

    @property
    def architectures(self) -> tuple[str, ...]:
        """The class sglang loads a ``dspark_keys`` head as; ``()`` for a subfolder (its config names it)."""
        served = SGLANG_BUNDLED_DSPARK.get(self.target_architecture or "")
        return (served,) if self.form == KEYS and served else ()

    def describe(self) -> str:
        where = "its config.json's dspark_* keys" if self.form == KEYS else f"its {SUBFOLDER_NAME}/ subfolder"
        return f"draft bundled in the target ({where})"

    def to_json(self) -> dict[str, Any]:
        return {"form": self.form, "draft": self.name, "revision": self.revision}


def same_path(a: Any, b: Any) -> bool:
    """Whether two path strings name the same place (``~`` and relative paths resolved)."""
    if a is None or b is None:
        return False
    return os.path.abspath(os.path.expanduser(str(a))) == os.path.abspath(os.path.expanduser(str(b)))


def _places(target: TargetCheckpoint) -> tuple[tuple[str, ...], Path | None]:
    """Where ``target`` bundles a draft: the ``dspark_*`` keys its config.json carries, and its
    ``dspark/`` folder when that holds a config.json (``None`` otherwise)."""
    keys = tuple(k for k in SGLANG_BUNDLE_KEYS if target.config.get(k) is not None)
    sub = target.folder / SUBFOLDER_NAME
    fix = f"remove it, or pass {DRAFT_FLAG}."
    return keys, (sub if regular_file(sub / CONFIG, "bundled draft config", fix) is not None else None)


def _draft_in(target: TargetCheckpoint, form: str) -> BundledDraft:
    """The draft sglang's DSPARK takes from ``target`` in ``form`` (KEYS: the target itself)."""
    if form == KEYS:
        folder = str(target.folder)
        return BundledDraft(KEYS, target.name, target.name, folder, target.revision, target.architecture)
    sub = str(target.folder / SUBFOLDER_NAME)
    if target.hub:
        return BundledDraft(SUBFOLDER, sub, f"{target.name}/{SUBFOLDER_NAME}", sub)
    draft = os.path.join(target.name, SUBFOLDER_NAME)  # sglang's own join, on the path as given
    return BundledDraft(SUBFOLDER, draft, draft, sub)


def newest_bundled_draft(target: TargetCheckpoint) -> BundledDraft | None:
    """The draft bundled in ``target`` as the newest sglang finds it (keys first, then ``dspark/``)."""
    keys, sub = _places(target)
    if keys:
        return _draft_in(target, KEYS)
    return None if sub is None else _draft_in(target, SUBFOLDER)


def bundled_in(path: str) -> tuple[TargetCheckpoint, BundledDraft] | None:
    """``(target, its bundled draft)`` for the target ``path`` (a folder, or a hub id in the cache) where
    the newest sglang's DSPARK finds a draft in it (``newest_bundled_draft``); ``None`` where it bundles
    none. Never downloads; a malformed target raises the census's error."""
    from .request import LaunchRequest
    from .target_checkpoint import load_target

    target = load_target(LaunchRequest(draft=None, target=path), download=False)
    if target is None:
        return None
    bundled = newest_bundled_draft(target)
    return None if bundled is None else (target, bundled)


def find_bundled_draft(
    request: LaunchRequest, target: TargetCheckpoint | None, support: SglangSupport
) -> tuple[BundledDraft, tuple[str, ...]]:
    """The bundled draft of a launch that names none (``target``: ``load_target`` of it), and any
    advice; refused where sglang finds none."""
    if target is None:
        why = (
            "the launch names no --model-path either"
            if not request.target
            else f"the target {printable(request.target)} is neither a local folder nor a hub id"
        )
        raise _no_draft(why, ())
    keys, sub = _places(target)
    if keys:
        ignored = f"{printable(sub)} is not served: sglang takes the dspark_* keys of the target first"
        return _draft_in(target, KEYS), ((ignored,) if sub and support.dspark_subfolder else ())
    if sub is not None and support.dspark_subfolder:
        return _draft_in(target, SUBFOLDER), ()
    if sub is not None:
        first = first_release(lambda r: r.dspark_subfolder)
        raise ServeRefusal(
            f"{ALGORITHM}: the launch names no draft and the target {printable(target.name)} holds one in "
            f"its {SUBFOLDER_NAME}/ subfolder ({printable(sub / CONFIG)}), but sglang {support.version}'s "
            "DSPARK does not look there (its handler knows only the dspark_* keys of the target's "
            f"config.json; sglang {first} looks in dspark/ too), so the builtin refuses this launch as well "
            f'("DSpark dense speculative decoding requires setting {DRAFT_FLAG}"). Pass {DRAFT_FLAG} '
            f"{printable(sub)}, or serve with sglang {first} or later.",
            kind="unsupported",
            where=DRAFT_FLAG,
        )
    places = [
        f"{printable(target.folder / CONFIG)} has none of the dspark_* keys ({', '.join(SGLANG_BUNDLE_KEYS)})"
    ]
    if support.dspark_subfolder:
        places.append(f"{printable(target.folder / SUBFOLDER_NAME / CONFIG)} does not exist")
    raise _no_draft("; ".join(places), tuple(places))


def _no_draft(why: str, places: tuple[str, ...]) -> InvalidCheckpointError:
    looked = " looked for a draft bundled in the target: " if places else " "
    return InvalidCheckpointError(
        f"{ALGORITHM} needs a draft checkpoint and the launch names none; it{looked}{why}. Pass "
        f"{DRAFT_FLAG} DRAFT (a local directory, or a hub id sglang downloads unless HF_HUB_OFFLINE is set).",
        where=DRAFT_FLAG,
    )


def require_finding_builtin(bundled: BundledDraft, layout: Arm, folder: str) -> None:
    """Only DSPARK finds a draft bundled in the target: a draft DFLASH serves needs its path."""
    if layout.builtin == DSPARK:
        return
    raise UnsupportedCheckpointError(
        f"the {bundled.describe()} at {folder} is mask-fill without a Markov head, which sglang serves "
        f"with DFLASH, and only sglang's DSPARK looks for a draft in the target checkpoint (DFLASH needs "
        f"its path). Pass {DRAFT_FLAG} {bundled.draft}.",
        where=DRAFT_FLAG,
    )


def check_bundled_head(cfg: DflashCfg, bundled: BundledDraft, resolution: Resolution) -> None:
    """Refuse a ``dspark_keys`` head sglang would not load as a DSpark draft, before any model loads."""
    if bundled.form != KEYS:
        return
    where = f"{cfg.path}/config.json"
    if not bundled.architectures:
        raise UnsupportedCheckpointError(
            f"the target {bundled.name} declares a bundled DSpark head (dspark_* keys in {where}) but its "
            f"architectures[0] = {bundled.target_architecture!r} is not a class sglang loads such a head "
            f"from ({', '.join(SGLANG_BUNDLED_DSPARK)}): sglang would load the whole target as its own "
            f"draft. Pass {DRAFT_FLAG} with the draft checkpoint.",
            where=f"{where}: architectures",
        )
    if resolution.harvest is not DsparkHarvest.DSPARK:
        raise UnsupportedCheckpointError(
            f"the bundled DSpark head of {bundled.name} is served by sglang's {bundled.architectures[0]} "
            f"under DSPARK only (shifted: gamma = dspark_block_size drafts, verify window gamma + 1), but "
            f"the {resolution.harvest.name()} harvest was resolved ({resolution.source}). Unset {ENV_VAR}, "
            "or fix the target config's keys that declare a mask-fill layout.",
            where=f"{where}: {ENV_VAR if resolution.source == 'env' else 'dspark_*'}",
        )
    if not cfg.markov_rank or cfg.markov_head is None:  # sglang reads the rank from the config only
        raise InvalidCheckpointError(
            f"the bundled DSpark head of {bundled.name} has no Markov rank ({where}: dspark_markov_rank "
            f"is {cfg.markov_rank!r}); sglang's {bundled.architectures[0]} requires markov_rank > 0. Set "
            "dspark_markov_rank to the rank of the head's mtp.N.markov_head.* tensors.",
            where=f"{where}: dspark_markov_rank",
        )
    require_mask_token(cfg)
    if not any(s.signal.endswith(DEEPSEEK_STAGE_SIGNAL) for s in cfg.evidence):
        raise InvalidCheckpointError(
            f"the target {bundled.name} declares a bundled DSpark head (dspark_* keys in {where}) but its "
            f"weights name no {DEEPSEEK_STAGE_SIGNAL} tensor (the head's Markov tables, which sglang "
            "loads from mtp.<stage>.markov_head.embed / .head): the config and the weights contradict "
            f"each other. Pass the checkpoint that holds the head, or {DRAFT_FLAG} with the draft.",
            where=f"{cfg.path}: {DEEPSEEK_STAGE_SIGNAL}",
        )


__all__ = [
    "KEYS",
    "SUBFOLDER",
    "SUBFOLDER_NAME",
    "HUB_PATTERNS",
    "BundledDraft",
    "bundled_in",
    "check_bundled_head",
    "find_bundled_draft",
    "newest_bundled_draft",
    "require_finding_builtin",
    "same_path",
]
