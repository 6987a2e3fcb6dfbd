"""Every refusal the serving plan owns, each over the launch request and the census (sglang-free).

Each raises a typed error whose message names what was wrong, where, and how to fix it; the plan
(``plan.make_plan``) calls them in one place, before any model loads.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..census.architectures import DSPARK_ARCHITECTURES, SGLANG_DSPARK_ARM
from ..census.draft_config import DflashCfg
from ..census.families import pattern_family
from ..census.markov import HEAD_TYPES
from ..checkpoint.headers import tensor_headers
from ..errors import DsparkHarvestError, InvalidCheckpointError, UnsupportedCheckpointError
from ..harvest import ENV_VAR, Resolution
from ..util.validation import is_int
from .capture import uncapturable_message
from .layout import DSPARK, Layout, architectures_of
from .releases import BY_VERSION
from .servability import unbuilt_reason, unloadable_layout

if TYPE_CHECKING:
    from .request import LaunchRequest, SglangSupport
    from .target_checkpoint import TargetCheckpoint

ALGORITHM = "DSPARK_HARVEST"
"""The name users pass to ``--speculative-algorithm``."""


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


SGLANG_FIX = (
    "install a supported sglang (from a checkout of this package: pip install '.[sglang-0523]' or "
    "'.[sglang-0517]') and run `dspark-harvest doctor`"
)


class WorkerContractError(ServeRefusal):
    """The installed sglang lacks a class, method or parameter the workers rely on."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message, kind="unsupported", where=where)


def contract_mismatch(version: str | None, missing: list[tuple[str, str]], outcome: str) -> str:
    """One line: what sglang ``version`` lacks (``(target, problem)`` pairs), what that means for the
    plugin (``outcome``: "NOT registered", "cannot serve"), and the fix."""
    shown = "; ".join(f"{target} ({problem})" for target, problem in missing[:6])
    more = f" and {len(missing) - 6} more" if len(missing) > 6 else ""
    return (
        f"sglang-dspark-plugin: {ALGORITHM} {outcome}: sglang {version} lacks what the plugin relies on: "
        f"{shown}{more}; other speculative algorithms are unaffected; {SGLANG_FIX}."
    )


def no_plan(where: str) -> ServeRefusal:
    """The refusal of a ``DSPARK_HARVEST`` process whose server args carry no plan: it never re-derives
    one."""
    return ServeRefusal(
        f"{ALGORITHM}: {where} found no serving plan on its server args, so it cannot know which rows "
        "the drafter was trained for; refusing rather than guessing. The plan is made while sglang "
        "resolves the launch's arguments, which needs the plugin's hooks in place first: launch with "
        "`python -m sglang.launch_server ...` or `sglang.Engine(...)`, or call "
        "`sglang.srt.plugins.load_plugins()` before building ServerArgs yourself, and pass sglang's "
        "resolved server args on unchanged (a rebuild from fields drops the plan).",
        kind="unsupported",
        where="server args",
    )


def as_serve_refusal(err: DsparkHarvestError) -> DsparkHarvestError:
    """``err`` itself when sglang already shows it as an argument error (a ``ValueError``), else wrapped."""
    return err if isinstance(err, ValueError) else ServeRefusal.wrap(err)


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


def refuse_disaggregation(request: LaunchRequest, layout: Layout, support: SglangSupport) -> None:
    """Prefill-decode disaggregation where the builtin serves it; refused, with sglang's reason, where
    this sglang builds no prefill->decode draft state for that builtin (it would fail on the first
    transferred request, not at launch)."""
    mode = request.disaggregation_mode
    if mode in (None, "null") or layout.builtin in support.disaggregation:
        return
    raise ServeRefusal(
        f"{ALGORITHM}: --disaggregation-mode {mode} with a draft served as {layout.builtin}: sglang "
        f"{support.version} builds the prefill->decode draft state (SpeculativeAlgorithm."
        f"build_disagg_draft_input) for {', '.join(support.disaggregation) or 'no'} DFlash-family "
        f"builtin only, so the builtin {layout.builtin} itself would fail on the first transferred "
        "request. Serve without --disaggregation-mode, or with an sglang whose "
        f"{layout.builtin} supports it (0.5.20 and later serve DFLASH and DSPARK under disaggregation, "
        "0.5.17 to 0.5.19 DSPARK only).",
        kind="unsupported",
        where="--disaggregation-mode",
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


def refuse_double_shift(cfg: DflashCfg, layout: Layout, support: SglangSupport) -> None:
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


def _require_layout(cfg: DflashCfg, layout: Layout, resolution: Resolution, support: SglangSupport) -> None:
    """Refuse a mask-fill DSpark drafter on a sglang without that layout."""
    if not layout.mask_fill_dspark or support.mask_fill_dspark:
        return
    rank = cfg.markov_head.rank if cfg.markov_head is not None else 0
    raise UnsupportedCheckpointError(
        f"{cfg.path} is a mask-fill drafter (dflash harvest, {resolution.source}) with a DSpark "
        f"architecture and a rank-{rank} Markov head. sglang {support.version} cannot serve it: its "
        "DFLASH worker has no Markov head (it would drop a trained part of the model) and its DSPARK has "
        "no mask-fill layout. Use sglang 0.5.19 or later, whose DSPARK serves it with "
        f"sample_from_anchor=false; or, if the drafter was trained shifted, set {ENV_VAR}=dspark.",
        where="sglang version",
    )


def check_servable(
    cfg: DflashCfg,
    layout: Layout,
    resolution: Resolution,
    target: TargetCheckpoint | None,
    support: SglangSupport,
    tensor_names: list[str] | None = None,
) -> None:
    """Refuse, before any model loads, a draft the builtin's worker would refuse after the target loaded:
    the layout this sglang lacks, a class it does not build, a config without model_type; for DSPARK
    the mask token, the architecture, the Markov head's type
    and the vocabulary against the target's (``load_target``; None: not read); for DFLASH a
    DSpark-named drafter with a Markov head."""
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
    elif any(a in DSPARK_ARCHITECTURES for a in architectures):
        _refuse_dropped_markov_head(cfg, architectures)
    elif any(pattern_family(a) for a in architectures):
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
    layout: Layout,
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


def _refuse_dropped_markov_head(cfg: DflashCfg, architectures: tuple[str, ...]) -> None:
    """DFLASH has no Markov head: a DSpark-named mask-fill drafter with one would lose it."""
    if cfg.markov_head is not None:
        raise UnsupportedCheckpointError(
            f"this drafter is mask-fill (dflash harvest) but has a rank-{cfg.markov_head.rank} Markov head "
            f"(architectures={list(architectures)!r}); sglang's DFlash worker has no Markov head and would "
            "silently drop it. DSPARK_HARVEST serves it through DSPARK with sample_from_anchor=false "
            f"(sglang 0.5.19 or later), or, if it was trained shifted, with {ENV_VAR}=dspark.",
            where="config.json: architectures / markov_rank",
        )


__all__ = [
    "ALGORITHM",
    "HEAD_TYPES",
    "ServeRefusal",
    "as_serve_refusal",
    "no_plan",
    "SGLANG_FIX",
    "WorkerContractError",
    "contract_mismatch",
    "flag_int",
    "refuse_disaggregation",
    "refuse_uncapturable",
    "require_mask_token",
    "require_model_type",
    "refuse_double_shift",
    "ANCHOR_FIRST_KEYS",
    "layout_probe_configs",
    "dspark_arm_names",
    "check_servable",
]
