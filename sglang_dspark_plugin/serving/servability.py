"""Whether a sglang release's class lists build a draft in the layout the plan chose (sglang-free).

The plan decides the arm (``layout.layout_for``); ``check_servable`` is its check of the draft against
the release, before any model loads: the draft's class must be one that release registers for that
builtin, in a weight layout its loader reads, with what that builtin's worker needs (a mask token, a
Markov head type, a vocabulary the target shares, a ``model_type``), or the builtin itself would
refuse it after the target loaded.

* shifted (DSPARK, anchor-first): the dense DSpark classes the dspark arm loads;
* mask-fill (DFLASH): the release's DFlash classes, and a dense DSpark class without a Markov head
  (loaded as ``DFlashDraftModel``);
* mask-fill DSpark (DSPARK, ``sample_from_anchor`` false): a dense DSpark class keeping its Markov head.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..census.architectures import DSPARK_ARCHITECTURES, SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..census.dialects import TORCHSPEC_WEIGHT_NAMES
from ..census.draft_config import DflashCfg
from ..census.families import pattern_family
from ..census.markov import HEAD_TYPES
from ..checkpoint.headers import tensor_headers
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError
from ..harvest import ENV_VAR, Resolution
from ..releases import BY_VERSION, first_release
from .layout import DFLASH, DSPARK, Arm, architectures_of
from .refusal import ALGORITHM, ServeRefusal

if TYPE_CHECKING:
    from .request import SglangSupport
    from .target_checkpoint import TargetCheckpoint

TORCHSPEC_NATIVE = tuple(TORCHSPEC_WEIGHT_NAMES)


def _not_shifted(version: str, architecture: str) -> str | None:
    if architecture in SGLANG_DSPARK_ARM:
        return None
    if architecture in BY_VERSION[version].dspark_classes:
        return (
            f"sglang {version} builds {architecture} itself, but the dspark arm serves the dense DSpark "
            f"classes only ({', '.join(SGLANG_DSPARK_ARM)})"
        )
    return f"sglang {version} registers no {architecture} class"


def _not_mask_fill(arm: Arm, version: str, architecture: str, markov_rank: int) -> str | None:
    if architecture in BY_VERSION[version].dflash_classes:
        return None
    if architecture in SGLANG_DENSE_DSPARK:
        if markov_rank == 0 or arm.keeps_markov_head:
            return None  # loads as DFlashDraftModel: the same backbone, no head to drop
        return f"{architecture} has a rank-{markov_rank} Markov head, which sglang's {arm.builtin} would drop"
    return f"sglang {version}'s DFLASH registers no {architecture} class"


def unbuilt_reason(
    layout: Arm, architecture: str | None, markov_rank: int, unloadable: str | None, version: str
) -> str | None:
    """Why ``version`` (a release of the table, ``releases``) cannot build a draft of ``architecture`` in
    ``layout``; ``None`` when it builds it. ``unloadable``: why its loader cannot read the weights."""
    if unloadable is not None:
        return unloadable
    if architecture is None:
        return "config.json names no architecture, and sglang builds a draft from architectures[0]"
    if layout.builtin == DFLASH:
        return _not_mask_fill(layout, version, architecture, markov_rank)
    if layout.mask_fill_dspark and architecture not in SGLANG_DENSE_DSPARK:
        return f"sglang {version}'s DSPARK builds no mask-fill {architecture}"
    return _not_shifted(version, architecture)


def unloadable_layout(config: dict[str, Any], tensor_names: list[str]) -> str | None:
    """Why sglang cannot load a checkpoint in this layout (speculators', TorchSpec's own names), or None."""
    if "speculators_model_type" in config:
        return (
            "a speculators-format checkpoint (the decoder under transformer_layer_config): sglang loads "
            "z-lab / SpecForge layouts only"
        )
    native = sorted(n for n in tensor_names if n.startswith(TORCHSPEC_NATIVE))
    if native:
        return f"TorchSpec-style weight names ({native[0]}, ...): sglang loads fc / hidden_norm / norm"
    return None


def require_mask_token(cfg: DflashCfg) -> None:
    """Refuse a DSPARK-served draft without a mask token id (sglang's DSpark worker has no fallback)."""
    if cfg.mask_token_id is None:
        raise InvalidCheckpointError(
            f"the dspark arm needs the draft's mask token id and {cfg.path}/config.json declares none "
            "(sglang's DSpark worker has no tokenizer fallback, speculative/dspark_components/"
            'dspark_config.py resolve_runtime_config). Add "mask_token_id": <id of the mask token> '
            "to the draft's config.json.",
            where=f"{cfg.path}/config.json: mask_token_id",
        )


def require_model_type(cfg: DflashCfg) -> None:
    """Refuse a draft config without ``model_type``: sglang loads it with transformers' ``AutoConfig``
    (either builtin, every release from 0.5.17), which refuses it after the target loaded, unless the
    config names its own class (``auto_map.AutoConfig``, with ``--trust-remote-code``)."""
    auto_map = cfg.raw.get("auto_map")
    if cfg.raw.get("model_type") or (isinstance(auto_map, dict) and "AutoConfig" in auto_map):
        return
    raise InvalidCheckpointError(
        f"{cfg.path}/config.json has no model_type: sglang reads a draft config through transformers' "
        'AutoConfig, which refuses it ("Unrecognized model ... Should have a `model_type` key"). Add '
        '"model_type" with the type of the drafter\'s backbone (for example "qwen3" for a Qwen3-based '
        "drafter, as its target's config.json names it) to the draft's config.json.",
        where=f"{cfg.path}/config.json: model_type",
    )


ANCHOR_FIRST_KEYS = ("sample_from_anchor", "query_zero_predicts_next")
"""The keys that declare the anchor-first (shifted) layout, at the top level or in ``dflash_config``."""


def layout_probe_configs() -> tuple[dict[str, Any], dict[str, Any]]:
    """Two DFLASH draft configs alike but for the anchor-first keys (declared at the top level and in
    ``dflash_config``): a DFLASH parser that answers them differently, or refuses the second, reads the
    keys itself (``SglangSupport.dflash_reads_layout``)."""
    plain = {"num_hidden_layers": 1, "block_size": 4, "dflash_config": {"target_layer_ids": [0]}}
    keys = dict.fromkeys(ANCHOR_FIRST_KEYS, True)
    return plain, {**plain, **keys, "dflash_config": {"target_layer_ids": [0], **keys}}


def refuse_double_shift(cfg: DflashCfg, layout: Arm, support: SglangSupport) -> None:
    """A release whose DFLASH reads the anchor-first keys itself (sglang PR 40203 honours them, PR 40181
    refuses them) must never serve DFLASH a draft that declares them: the plan's mask-fill rows would be
    shifted a second time by the builtin (or refused after the target loaded)."""
    if not support.dflash_reads_layout or layout.builtin == DSPARK:
        return
    nested = cfg.raw.get("dflash_config")
    holders = (("", cfg.raw), ("dflash_config.", nested if isinstance(nested, dict) else {}))
    declared = [
        f"{where}{key}" for where, holder in holders for key in ANCHOR_FIRST_KEYS if holder.get(key) is True
    ]
    if declared:
        raise UnsupportedCheckpointError(
            f"{cfg.path}/config.json declares the anchor-first layout ({', '.join(declared)} = true) and "
            f"the plan serves it mask-fill through DFLASH ({ENV_VAR} or the census says dflash), but sglang "
            f"{support.version}'s DFLASH reads that key itself and would shift every draft a second time. "
            f"Unset {ENV_VAR} (the checkpoint declares itself shifted: the dspark arm serves it), or remove "
            "the key if the drafter was trained mask-fill.",
            where=f"config.json: {declared[0]}",
        )


def dspark_arm_names(architectures: tuple[str, ...]) -> list[str]:
    """The draft's architecture names the dspark arm loads as its model; refuses any other drafter."""
    names = [a for a in architectures if a in SGLANG_DSPARK_ARM]
    if not names:
        raise UnsupportedCheckpointError(
            f"the dspark arm serves dense DFlash-family drafters ({', '.join(SGLANG_DSPARK_ARM)}); "
            f"this draft's config.json architectures={list(architectures)!r} is none of them. Serve it "
            f"with sglang's own --speculative-algorithm for that model, or set {ENV_VAR}=dflash if it "
            "was trained with the DFlash strategy.",
            where="config.json: architectures",
        )
    return names


def _require_markov_head_type(cfg: DflashCfg) -> None:
    """A Markov head sglang can build: its type must be known (declared, or named by the tensors)."""
    head = cfg.markov_head
    if head is None or head.head_type in HEAD_TYPES:
        return
    told = "" if head.head_type is None else f" (it names {head.head_type!r}, which sglang cannot build)"
    raise InvalidCheckpointError(
        f"the draft {cfg.path} has a rank-{head.rank} Markov head (declared by {head.declared_by}) but "
        f"its config.json names no markov_head_type sglang builds{told}. Add "
        f'"markov_head_type": "vanilla" | "gated" | "rnn" (the head it was trained with) next to '
        f'"markov_rank": {head.rank} in the draft\'s config.json.',
        where=f"{cfg.path}/config.json: markov_head_type",
    )


def _require_target_vocabulary(cfg: DflashCfg, target: TargetCheckpoint | None) -> None:
    """The DSPARK Markov head (the zero head too) is sized from the draft's vocabulary and biases the
    target's logits: the two sizes must be equal, or sglang fails at the first draft step."""

    if target is None or cfg.vocab_size is None:
        return
    target_vocab = target.vocab_size
    if target_vocab is None or target_vocab == cfg.vocab_size:
        return
    raise ServeRefusal(
        f"{ALGORITHM}: the draft {cfg.path} has a vocabulary of {cfg.vocab_size} tokens "
        f"(config.json vocab_size) but the target {target.describe()} has {target_vocab} (its config.json "
        "vocab_size). The dspark arm's Markov head is sized from the draft's vocabulary and is added to "
        "the target's logits, so sglang would fail at the first draft step. Serve this drafter with the "
        f"target it was trained for (a {cfg.vocab_size}-token vocabulary), or a drafter trained for this "
        "target's tokenizer.",
        kind="unsupported",
        where="vocab_size",
    )


def _require_layout(cfg: DflashCfg, layout: Arm, resolution: Resolution, support: SglangSupport) -> None:
    """Refuse a mask-fill DSpark drafter on a sglang without that layout."""
    if not layout.mask_fill_dspark or support.mask_fill_dspark:
        return
    rank = cfg.markov_head.rank if cfg.markov_head is not None else 0
    raise UnsupportedCheckpointError(
        f"{cfg.path} is a mask-fill drafter (dflash harvest, {resolution.source}) with a DSpark "
        f"architecture and a rank-{rank} Markov head. sglang {support.version} cannot serve it: its "
        "DFLASH worker has no Markov head (it would drop a trained part of the model) and its DSPARK has "
        f"no mask-fill layout. Use sglang {first_release(lambda r: r.mask_fill_dspark)} or later, whose "
        f"DSPARK serves it with sample_from_anchor=false; or, if the drafter was trained shifted, set "
        f"{ENV_VAR}=dspark.",
        where="sglang version",
    )


def check_servable(
    cfg: DflashCfg,
    layout: Arm,
    resolution: Resolution,
    target: TargetCheckpoint | None,
    support: SglangSupport,
    tensor_names: list[str] | None = None,
) -> None:
    """Refuse, before any model loads, a draft the builtin's worker would refuse after the target loaded:
    the layout this sglang lacks, a class it does not build, a config without model_type; for DSPARK
    the mask token, the architecture, the Markov head's type and the vocabulary against the target's
    (``load_target``; None: not read); for DFLASH a DSpark class it would build without its Markov head
    (``servability.unbuilt_reason``) or a pattern-family drafter."""
    _require_layout(cfg, layout, resolution, support)
    refuse_double_shift(cfg, layout, support)
    _require_buildable(cfg, layout, resolution, support, tensor_names)
    require_model_type(cfg)
    architectures = architectures_of(cfg)
    if layout.builtin == DSPARK:
        require_mask_token(cfg)
        dspark_arm_names(architectures)
        _require_markov_head_type(cfg)
        _require_target_vocabulary(cfg, target)
    elif any(pattern_family(a) for a in architectures) and not any(
        a in DSPARK_ARCHITECTURES
        for a in architectures  # a dense DSpark class (its head: unbuilt_reason)
    ):
        raise UnsupportedCheckpointError(
            f"this drafter is mask-fill (dflash harvest) and its architectures={list(architectures)!r} name "
            "a DSpark-family class the census recognised by its naming pattern; sglang's DFlash worker "
            "would build that class's DSpark layout or none, and the dspark arm serves the dense DSpark "
            f"classes only ({', '.join(SGLANG_DSPARK_ARM)}). `dspark-harvest inspect` says which "
            "sglang version can serve it.",
            where="config.json: architectures",
        )


def _require_buildable(
    cfg: DflashCfg,
    layout: Arm,
    resolution: Resolution,
    support: SglangSupport,
    tensor_names: list[str] | None,
) -> None:
    """A class this sglang release builds in ``layout``, in a weight layout its loader reads
    (``servability.unbuilt_reason``). A release outside the class lists is left to the checks below."""

    if support.version not in BY_VERSION:
        return
    rank = 0 if cfg.markov_head is None else cfg.markov_head.rank
    names = list(tensor_headers(cfg.path)) if tensor_names is None else tensor_names
    why = unbuilt_reason(layout, cfg.architecture, rank, unloadable_layout(cfg.raw, names), support.version)
    if why is not None:
        raise UnsupportedCheckpointError(
            f"sglang {support.version} cannot serve the draft {cfg.path} under the "
            f"{resolution.harvest.name()} harvest: {why}. `dspark-harvest inspect` lists what each "
            f"sglang release serves under each harvest; {ENV_VAR} chooses the harvest only where the "
            "census is wrong.",
            where="config.json: architectures",
        )


__all__ = [
    "ANCHOR_FIRST_KEYS",
    "check_servable",
    "dspark_arm_names",
    "layout_probe_configs",
    "refuse_double_shift",
    "require_mask_token",
    "require_model_type",
    "unbuilt_reason",
    "unloadable_layout",
]
