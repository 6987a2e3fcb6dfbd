"""The DSPARK_HARVEST workers: sglang's own DFlash-family workers, one per harvest arm.

Route per arm (line numbers: sglang 0.5.17 / 0.5.23, files under ``sglang/srt/``):

* ``dflash`` arm -> ``HarvestDFlashWorker(DFlashWorkerV2)`` with no change to drafting or verification:
  sglang's DFLASH worker already harvests rows 1..b-1 (``speculative/dflash_worker_v2.py:130`` graph
  sampler ``[:, 1:, :]`` and ``:1641`` eager path / 0.5.23 ``:183`` and ``:2804``), b-1 drafts, verify
  window b (``DFlashVerifyInput(draft_token_num=b)``, 0.5.17 ``:1661-1667``). Same tokens, same accept
  lengths as the builtin DFLASH. One addition (``dflash_draft_route``): a mask-fill drafter with a DSpark
  architecture name and no Markov head loads sglang's ``DFlashDraftModel`` (same backbone, same weights;
  sglang's DSpark class would refuse ``markov_rank`` 0); with a Markov head it is refused, since the
  DFlash worker would drop a trained part of the model.
* ``dspark`` arm -> ``HarvestDSparkWorker(DSparkWorkerV2)``: sglang's DSPARK worker drafts gamma = b
  tokens from the gamma query rows ``[anchor, MASK x (b-1)]``, the anchor row's output being draft 1
  (0.5.17 ``speculative/dspark_components/dspark_draft.py:318-323`` and ``:369``), and verifies
  ``[anchor, d1..d_gamma]`` (``dspark_worker_v2.py:598-600`` / ``:1105-1110``): window gamma+1.
  The draft model is ``HarvestDSparkDraftModel``, a subclass of sglang's ``DSparkDraftModel``, chosen
  for the draft checkpoint's architecture name while (and only while) the worker builds its draft
  (``dspark_draft_route``):
  sglang picks the model class by ``hf_config.architectures`` through ``ModelRegistry.models``
  (``model_loader/loader.py:316`` -> ``model_loader/utils.py:195`` -> ``models/registry.py:55-59`` /
  0.5.23 ``loader.py:291``, ``utils.py:198``, ``registry.py:68``) and constructs it with
  ``config=model_config.hf_config`` (``loader.py:318`` / ``:296``), the same object the worker's
  ``resolve_runtime_config`` reads afterwards (``dspark_worker_v2.py:127`` / ``:261``).
  The subclass does two things to that config, before sglang's constructor reads it:

  - 0.5.23 only reads ``sample_from_anchor`` (``dspark_config.py:29-31``, default True; False would
    prepend a query row and drop the anchor row, ``dspark_draft.py:88-106`` and ``:656-668``). It is
    set to True: the census decided the checkpoint is shifted, whatever the flag says.
  - No Markov head (``markov_rank`` 0 or absent): sglang refuses it three times (``dspark_config.py:84-88``
    / ``:95-97``; ``models/dspark.py:266-272`` / ``:385-391``; ``:368-372`` / ``:525-529``). The config
    is given a rank-1 ``vanilla`` head whose two weights are set to zero (after construction, after
    ``load_weights`` and in ``post_load_weights``).
    WHY THIS IS EXACT: sglang's DSPARK draft step k uses ``base_logits[:, k] + bias(prev_token)``
    (``models/dspark.py:34-64`` / ``speculative/dspark_components/dspark_draft.py:196-245``) and the
    vanilla bias is ``markov_w2(markov_w1[prev_token])`` (``models/dspark.py:85-94`` / ``:246-258``),
    which is exactly 0 when both weights are 0, so every draft is sampled from the base logits of its
    own row: the model a DSpark-strategy drafter without a Markov head was trained as. sglang's own
    eager, graph-folded and fused-greedy paths all compute that zero bias, so none of them is bypassed.
    The checkpoint holds no ``markov_head.*`` tensor, and sglang's loader only copies the ones present
    (``models/dspark.py:405-432`` / 0.5.23 same method), so nothing else is touched. Cost: one
    rank-1 GEMV per draft step.
  - A fourth refusal runs earlier, while the TARGET's model runner starts, before any worker exists:
    with a DSpark algorithm it parses the draft config and requires ``markov_rank > 0``
    (``model_executor/model_runner_components/spec_aux_hidden_state.py:147-159`` / ``:260-272``).
    ``hooks.register_hooks`` therefore adds an AFTER hook on ``parse_dspark_draft_config`` (through
    sglang's ``HookRegistry`` when its module is loaded already, else as that module is first
    imported): for the served draft of a ``DSPARK_HARVEST`` dspark-arm process only (matched by path),
    the parse reports the head ``HarvestDSparkDraftModel`` builds (rank 1 for the zero head, else the
    checkpoint's rank and head type); every other config, algorithm and arm gets sglang's answer.

Every rank resolves its harvest through ``resolution.served`` and compares it with the other TP ranks
(``rank_agreement.check_rank_agreement`` over sglang's gloo ``get_tp_group().cpu_group``) before any
draft weight loads: a disagreement refuses startup. Per-round accept length comes from the scheduler's
host-side call ``on_verify_complete_cpu`` (0.5.17 ``managers/scheduler_components/
batch_result_processor.py:652`` / 0.5.23 ``:804``), which is overridden with the parent's signature
and feeds ``AcceptTelemetry`` on TP rank 0 (the other ranks see the same rounds): no device sync.

Overlap scheduling: nothing here runs on the device stream, the parents' ``forward_batch_generation``
is untouched, so both classes keep the overlap support of their sglang parents.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from sglang.srt.managers.tp_worker import TpModelWorker
from sglang.srt.models.dspark import DSparkDraftModel
from sglang.srt.speculative.dflash_worker_v2 import DFlashWorkerV2
from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config
from sglang.srt.speculative.dspark_components.dspark_worker_v2 import DSparkWorkerV2

from ..architectures import SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..errors import GeometryError, InvalidCheckpointError, UnsupportedCheckpointError
from ..harvest import ENV_VAR, DsparkHarvest
from ..rank_agreement import agreement_values, check_rank_agreement
from ..tensor_headers import markov_head, tensor_headers
from .hooks import PARSE_HOOK_TARGET, RESULT_HOOK_TARGET, TARGET_CONTRACT, register_hooks, same_path
from .layout import layout_of, require_layout

if TYPE_CHECKING:
    from ..telemetry import AcceptTelemetry

logger = logging.getLogger(__name__)

DSPARK_ARCHITECTURES: tuple[str, ...] = SGLANG_DENSE_DSPARK
"""sglang's dense DSpark draft classes: DFlash's backbone plus a Markov head (``models/dspark.py``)."""

DSPARK_ARM_ARCHITECTURES: tuple[str, ...] = SGLANG_DSPARK_ARM
"""Draft architectures the dspark arm serves with sglang's dense DSpark draft model (same backbone)."""

WORKER_CONTRACT: list[tuple[str, str, tuple[str, ...] | None]] = [
    # (module, qualname, parameter names the workers pass or override; None = existence only).
    ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2", None),
    (
        "sglang.srt.speculative.dflash_worker_v2",
        "DFlashWorkerV2.__init__",
        ("server_args", "gpu_id", "nccl_port", "target_worker"),
    ),
    ("sglang.srt.speculative.dspark_components.dspark_worker_v2", "DSparkWorkerV2", None),
    (
        "sglang.srt.speculative.dspark_components.dspark_worker_v2",
        "DSparkWorkerV2.__init__",
        ("server_args", "gpu_id", "nccl_port", "target_worker"),
    ),
    (
        "sglang.srt.speculative.base_spec_worker",
        "BaseSpecWorker.on_verify_complete_cpu",
        ("num_correct_drafts_per_req", "batch_size"),
    ),
    ("sglang.srt.managers.tp_worker", "TpModelWorker", None),
    ("sglang.srt.models.dspark", "DSparkDraftModel", None),
    ("sglang.srt.models.dspark", "DSparkDraftModel.__init__", ("config", "quant_config", "prefix")),
    ("sglang.srt.models.dspark", "DSparkDraftModel.load_weights", ("weights",)),
    ("sglang.srt.models.dspark", "VanillaMarkov.__init__", ("vocab_size", "markov_rank")),
    ("sglang.srt.models.dflash", "DFlashDraftModel", None),
    ("sglang.srt.models.registry", "ModelRegistry.models", None),
    ("sglang.srt.model_loader.utils", "get_model_architecture", ("model_config",)),
    ("sglang.srt.models.registry", "ModelRegistry.get_supported_archs", ()),
    (
        "sglang.srt.speculative.dspark_components.dspark_config",
        "resolve_runtime_config",
        ("draft_hf_config", "speculative_num_draft_tokens", "target_vocab_size"),
    ),
    ("sglang.srt.distributed.parallel_state", "get_tp_group", ()),
    ("sglang.srt.runtime_context", "get_parallel", ()),  # attention_ranks
    *TARGET_CONTRACT,  # the hooks' targets (hooks.py)
]
"""Every sglang class, method and function the workers rely on. Their modules take seconds to import,
so registration does not check them: ``contract.require_worker_contract`` does, when the workers are
first needed (argument resolution of a DSPARK_HARVEST server, the worker factory), and ``dspark-harvest
doctor`` checks them with everything else. The hooks' entries are ``hooks.HOOK_CONTRACT``."""

# 0.5.17 passes the parallel state as ``ps``; 0.5.23 dropped it (research 1.5). Read once, here.
_DFLASH_TAKES_PS = "ps" in inspect.signature(DFlashWorkerV2.__init__).parameters
_DSPARK_TAKES_PS = "ps" in inspect.signature(DSparkWorkerV2.__init__).parameters
_DSPARK_TAKES_DRAFT_WORKER_CLS = "draft_worker_cls" in inspect.signature(DSparkWorkerV2.__init__).parameters


# ------------------------------------------------------------------ the dspark arm's draft config


def _cfg_get(config: Any, key: str) -> Any:
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _cfg_set(config: Any, key: str, value: Any) -> None:
    if isinstance(config, dict):
        config[key] = value
    else:
        setattr(config, key, value)


def _set_markov(config: Any, rank: int, head_type: str) -> None:
    """Write the Markov rank and head type into every spelling sglang reads (and the model's own)."""
    # sglang's parse reads the prefixed key, then dspark_config (0.5.23: dflash_config merged under it,
    # dspark_config.py:206-211), then text_config, then the top level (0.5.17 dspark_config.py:212-237);
    # the model builds its head from the top level (models/dspark.py:266-273 / :385-392).
    _cfg_set(config, "markov_rank", rank)
    _cfg_set(config, "markov_head_type", head_type)
    if _cfg_get(config, "dspark_markov_rank") is not None:
        _cfg_set(config, "dspark_markov_rank", rank)
        _cfg_set(config, "dspark_markov_head_type", head_type)
    for key in ("dspark_config", "dflash_config"):
        nested = _cfg_get(config, key)
        if isinstance(nested, dict) and ("markov_rank" in nested or "markov_head_type" in nested):
            _cfg_set(config, key, {**nested, "markov_rank": rank, "markov_head_type": head_type})
    text = _cfg_get(config, "text_config")
    if text is not None and text is not config and _cfg_get(text, "markov_rank") is not None:
        _cfg_set(text, "markov_rank", rank)
        _cfg_set(text, "markov_head_type", head_type)


def _declared_head_type(config: Any) -> str | None:
    for holder in (config, _cfg_get(config, "dspark_config"), _cfg_get(config, "dflash_config")):
        if holder is not None and _cfg_get(holder, "markov_head_type") is not None:
            return str(_cfg_get(holder, "markov_head_type")).lower()
    value = _cfg_get(config, "dspark_markov_head_type")
    return None if value is None else str(value).lower()


def prepare_dspark_arm_config(
    config: Any,
    *,
    markov_rank: int | None = None,
    mask_token_id: int | None = None,
    markov_head_type: str | None = None,
    sample_from_anchor: bool = True,
) -> bool:
    """Make a draft ``hf_config`` say what the DSpark worker serves; True when it has no Markov head.

    ``markov_rank`` is the census's reading (it also knows spellings sglang does not read, such as
    ``dflash_config.markov_rank``); ``None`` keeps sglang's own reading. Sets ``sample_from_anchor =
    True`` (anchor-first, the shifted convention); a checkpoint without a Markov head gets a rank-1
    vanilla head, zeroed by ``HarvestDSparkDraftModel``; ``mask_token_id`` comes from the census when
    sglang's DSpark lookup finds none. Raises ``InvalidCheckpointError`` when sglang cannot parse it.
    ``sample_from_anchor=False`` is the mask-fill layout (a mask-fill drafter with a Markov head,
    ``layout.MASK_FILL_DSPARK``): whatever spelling the checkpoint declared it in, sglang reads the top
    level only.
    """
    _cfg_set(config, "sample_from_anchor", bool(sample_from_anchor))
    try:
        parsed = parse_dspark_draft_config(draft_hf_config=config)
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read this draft config as a DSpark draft: {exc} "
            "(fix the Markov-head keys in the draft's config.json, or, if the drafter was trained with "
            f"the DFlash strategy, serve it with {ENV_VAR}=dflash).",
            where="config.json",
        ) from exc
    rank = parsed.markov_rank if markov_rank is None else int(markov_rank)
    no_markov = rank == 0
    if no_markov:
        _set_markov(config, 1, "vanilla")
        # A confidence head (non-static ragged verify) must not read Markov features that are all zero.
        if _cfg_get(config, "confidence_head_with_markov") is None:
            _cfg_set(config, "confidence_head_with_markov", False)
    elif rank != parsed.markov_rank or _cfg_get(config, "markov_rank") != rank:
        # The model builds its head from the top-level keys only, wherever sglang's parser found them.
        head_type = parsed.markov_head_type or _declared_head_type(config) or markov_head_type
        if head_type is None:
            raise InvalidCheckpointError(
                f"the draft has a rank-{rank} Markov head but config.json names no markov_head_type; "
                'add "markov_head_type": "vanilla" | "gated" | "rnn" (the head it was trained with).',
                where="config.json: markov_head_type",
            )
        _set_markov(config, rank, head_type)
    if parsed.mask_token_id is None and mask_token_id is not None:
        _cfg_set(config, "mask_token_id", int(mask_token_id))
    check = parse_dspark_draft_config(draft_hf_config=config)
    if not check.require_markov() or (not no_markov and check.markov_rank != rank):
        raise InvalidCheckpointError(
            f"could not make sglang read this draft's Markov head (census rank {rank}, sglang reads "
            f"{check.markov_rank}); report the config.json keys holding markov_rank.",
            where="config.json",
        )
    return no_markov


def served_markov_head(cfg: Any) -> tuple[int, str | None]:
    """The Markov head the dspark arm serves for a census ``cfg``: ``(rank, head type)``.

    The rank is the config's (the census reads spellings sglang does not, such as
    ``dflash_config.markov_rank`` on 0.5.17, and checks them against the tensor shapes); a config
    that declares none takes the rank of the ``markov_head.*`` tensors (``markov_w1`` is [vocab,
    rank]) and, unless declared, their head type; else sglang's own parse of the raw config decides.
    The head type is the config's declaration (None when it has none). Rank 0 means no Markov head:
    the zero rank-1 head is served.
    """
    declared = _declared_head_type(cfg.raw)
    if cfg.markov_rank is not None:
        return int(cfg.markov_rank), declared
    found = markov_head(tensor_headers(cfg.path))
    if found is not None:
        return found.rank, declared or found.head_type
    # Without a path the parse hook (which calls this) leaves the parse alone: no recursion even when
    # config.json records the served draft's own "_name_or_path".
    raw = {k: v for k, v in cfg.raw.items() if k != "_name_or_path"}
    try:
        return int(parse_dspark_draft_config(draft_hf_config=raw).markov_rank), declared
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read {cfg.path}/config.json as a DSpark draft: {exc}", where="config.json"
        ) from exc


def served_markov_rank(cfg: Any) -> int:
    """The rank of ``served_markov_head``: 0 when the checkpoint has no Markov head."""
    return served_markov_head(cfg)[0]


def _served_markov(config: Any) -> tuple[int, str] | None:
    """(rank, head type) the dspark arm serves for this draft config, or None when it is not ours."""
    from .resolution import ALGORITHM, published_server_args, read_arg

    name = _cfg_get(config, "_name_or_path")
    if not name:
        return None
    from .builtin import marker_of

    server_args = published_server_args()
    if server_args is None:
        return None
    # The plugin's server: the marker of the rewrite to the builtin, or the custom algorithm's name
    # (fallback route). A plain DSPARK launch has neither and keeps sglang's refusal of markov_rank 0.
    if marker_of(server_args) is None and (
        str(read_arg(server_args, "speculative_algorithm") or "").upper() != ALGORITHM
    ):
        return None
    # The path first: only the served draft's own config may resolve (census) here.
    if not same_path(name, read_arg(server_args, "speculative_draft_model_path")):
        return None
    served = _served_for(server_args)
    if served.resolution.harvest is not DsparkHarvest.DSPARK:
        return None
    rank, served_type = served_markov_head(served.cfg)
    if rank == 0:
        return 1, "vanilla"  # the zero head of HarvestDSparkDraftModel
    head_type = _declared_head_type(config) or served_type
    return None if head_type is None else (rank, head_type)


def _served_markov_after_parse(result: Any, *args: Any, **kwargs: Any) -> Any:
    """AFTER hook: sglang's parse reports the Markov head the dspark arm serves for its draft.

    Only for the draft of a ``DSPARK_HARVEST`` server in the dspark arm (matched by path); any other
    config, algorithm or arm gets sglang's own result (``None`` = unchanged). The head it reports is the
    one ``HarvestDSparkDraftModel`` builds: rank 1 zeroed when the checkpoint has none, else the
    census's rank (spellings such as ``dflash_config.markov_rank`` that 0.5.17 does not read).
    """
    config = kwargs.get("draft_hf_config", args[0] if args else None)
    wanted = _served_markov(config)
    if wanted is None or (result.markov_rank, result.markov_head_type) == wanted:
        return None
    import msgspec

    return msgspec.structs.replace(result, markov_rank=wanted[0], markov_head_type=wanted[1])


@dataclass(frozen=True)
class _DraftRoute:
    markov_rank: int | None
    mask_token_id: int | None
    markov_head_type: str | None = None
    sample_from_anchor: bool = True


class HarvestDSparkDraftModel(DSparkDraftModel):
    """sglang's dense DSpark draft model, anchor-first always, with a zero Markov head when it has none."""

    _route: ClassVar[_DraftRoute | None] = None

    def __init__(self, config: Any, quant_config: Any = None, prefix: str = "") -> None:
        route = type(self)._route
        route = route if route is not None else _DraftRoute(None, None)
        no_markov = prepare_dspark_arm_config(
            config,
            markov_rank=route.markov_rank,
            mask_token_id=route.mask_token_id,
            markov_head_type=route.markov_head_type,
            sample_from_anchor=route.sample_from_anchor,
        )
        super().__init__(config=config, quant_config=quant_config, prefix=prefix)
        self.dspark_harvest_zero_markov = no_markov
        self._zero_markov_head()

    def load_weights(self, weights: Any) -> Any:
        """sglang's loader, then the zero head again (a loader may re-initialise parameters)."""
        out = super().load_weights(weights)
        self._zero_markov_head()
        return out

    def post_load_weights(self) -> None:
        """Called by sglang's loaders that bypass ``load_weights`` (dummy, sharded state, remote; 0.5.17
        ``model_loader/loader.py:333-339``, 0.5.23 ``:315-321``): keep the head zero there too."""
        parent = getattr(super(), "post_load_weights", None)
        if parent is not None:
            parent()
        self._zero_markov_head()

    def _zero_markov_head(self) -> None:
        if not self.dspark_harvest_zero_markov or self.markov_head is None:
            return
        with torch.no_grad():
            for p in self.markov_head.parameters():
                p.zero_()


_route_lock = threading.Lock()


@contextlib.contextmanager
def _registry_swap(names: list[str], cls: type) -> Iterator[None]:
    """Load ``cls`` for these architecture names in this process's ``ModelRegistry``, until exit."""
    # Imported here: the registry module imports every model module, too slow for plugin import.
    from sglang.srt.models.registry import ModelRegistry

    ModelRegistry.get_supported_archs()  # 0.5.23 loads its default table lazily: load it first
    saved = {name: ModelRegistry.models.get(name) for name in names}
    for name in names:
        ModelRegistry.models[name] = cls
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                ModelRegistry.models.pop(name, None)
            else:
                ModelRegistry.models[name] = old


def _dspark_arm_names(architectures: list[str] | tuple[str, ...]) -> list[str]:
    """The draft's architecture names the dspark arm loads as its model; refuses any other drafter."""
    names = [a for a in architectures if a in DSPARK_ARM_ARCHITECTURES]
    if not names:
        raise UnsupportedCheckpointError(
            f"the dspark arm serves dense DFlash-family drafters ({', '.join(DSPARK_ARM_ARCHITECTURES)}); "
            f"this draft's config.json architectures={list(architectures)!r} is none of them. Serve it "
            f"with sglang's own --speculative-algorithm for that model, or set {ENV_VAR}=dflash if it "
            "was trained with the DFlash strategy.",
            where="config.json: architectures",
        )
    return names


def _dflash_arm_names(architectures: list[str] | tuple[str, ...], markov_rank: int | None) -> list[str]:
    """The DSpark architecture names the dflash arm loads as ``DFlashDraftModel``; refuses a Markov head."""
    names = [a for a in architectures if a in DSPARK_ARCHITECTURES]
    if names and markov_rank:
        raise UnsupportedCheckpointError(
            f"this drafter is mask-fill (dflash harvest) but has a rank-{markov_rank} Markov head "
            f"(architectures={list(architectures)!r}); sglang's DFlash worker has no Markov head and would "
            "silently drop it. DSPARK_HARVEST serves it through DSPARK with sample_from_anchor=false "
            f"(sglang 0.5.23 or later), or, if it was trained shifted, with {ENV_VAR}=dspark.",
            where="config.json: architectures / markov_rank",
        )
    return names


@contextlib.contextmanager
def dspark_draft_route(
    architectures: list[str] | tuple[str, ...],
    *,
    markov_rank: int | None = None,
    mask_token_id: int | None = None,
    markov_head_type: str | None = None,
    sample_from_anchor: bool = True,
) -> Iterator[None]:
    """While the DSpark worker builds its draft, the draft's architecture names load our model.

    The swap is in this process's ``ModelRegistry`` only and is undone on exit, so the target (already
    loaded) and any later model load see sglang's own classes.
    """
    names = _dspark_arm_names(architectures)
    with _route_lock:
        HarvestDSparkDraftModel._route = _DraftRoute(
            markov_rank, mask_token_id, markov_head_type, sample_from_anchor
        )
        try:
            with _registry_swap(names, HarvestDSparkDraftModel):
                yield
        finally:
            HarvestDSparkDraftModel._route = None


@contextlib.contextmanager
def dflash_draft_route(
    architectures: list[str] | tuple[str, ...], *, markov_rank: int | None
) -> Iterator[None]:
    """The dflash arm loads sglang's ``DFlashDraftModel`` for a mask-fill drafter with a DSpark name.

    Without a Markov head the two classes share one backbone and the same weights, and sglang's DSpark
    class would refuse it (``models/dspark.py:368-372`` / ``:525-529``). With a Markov head the DFlash
    worker would drop a trained part of the model: refused, with the way to serve it.
    """
    names = _dflash_arm_names(architectures, markov_rank)
    if not names:
        yield
        return
    from sglang.srt.models.dflash import DFlashDraftModel

    with _route_lock, _registry_swap(names, DFlashDraftModel):
        yield


# ------------------------------------------------------------------ what both arms share


def rank_agreement_values(served: Any) -> dict[str, Any]:
    """What every TP rank must agree on (``rank_agreement.agreement_values``): the harvest, its source,
    the geometry, the draft as the user named it and a fingerprint of its content."""
    draft = getattr(served, "draft", "") or served.cfg.path
    return agreement_values(draft, served.cfg, served.resolution, served.geometry)


def _architectures(cfg: Any) -> tuple[str, ...]:
    """The draft's ``config.json`` architectures, the names sglang's loader resolves."""
    names = cfg.raw.get("architectures") or ([cfg.architecture] if cfg.architecture else [])
    return tuple(str(n) for n in names)


def _require_mask_token(cfg: Any) -> None:
    if cfg.mask_token_id is None:
        raise InvalidCheckpointError(
            f"the dspark arm needs the draft's mask token id and {cfg.path}/config.json declares none "
            "(sglang's DSpark worker has no tokenizer fallback, speculative/dspark_components/"
            'dspark_config.py resolve_runtime_config). Add "mask_token_id": <id of the mask token> '
            "to the draft's config.json.",
            where=f"{cfg.path}/config.json: mask_token_id",
        )


def _require_markov_head_type(cfg: Any) -> None:
    """A Markov head sglang can build: its parse of config.json must accept it (the target's model
    runner parses it before any worker exists), and the head type must be known."""
    rank, head_type = served_markov_head(cfg)
    if rank == 0:
        return
    raw = {k: v for k, v in cfg.raw.items() if k != "_name_or_path"}
    try:
        parse_dspark_draft_config(draft_hf_config=raw)
        sglang_says = ""
    except ValueError as exc:
        sglang_says = f"; sglang refuses it: {exc}"
    if head_type is not None and not sglang_says:
        return
    found = markov_head(tensor_headers(cfg.path))
    told = f" (the tensors say {found.head_type!r})" if found is not None and found.head_type else ""
    raise InvalidCheckpointError(
        f"the draft {cfg.path} has a rank-{rank} Markov head but its config.json names no "
        f'markov_head_type{told}{sglang_says}. Add "markov_head_type": "vanilla" | "gated" | "rnn" '
        f'(the head it was trained with) next to "markov_rank": {rank} in the draft\'s config.json.',
        where=f"{cfg.path}/config.json: markov_head_type",
    )


def _require_target_vocabulary(served: Any) -> None:
    """The dspark arm's Markov head (the zero head too) is sized from the draft's vocabulary and biases
    the target's logits: the two sizes must be equal, or sglang fails at the first draft step."""
    from ..capture import target_vocab_size
    from .resolution import ALGORITHM, ServeRefusal

    target, draft_vocab = getattr(served, "target", None), served.cfg.vocab_size
    if target is None or draft_vocab is None:
        return
    target_vocab = target_vocab_size(str(target))
    if target_vocab is None or target_vocab == draft_vocab:
        return
    raise ServeRefusal(
        f"{ALGORITHM}: the draft {served.cfg.path} has a vocabulary of {draft_vocab} tokens "
        f"(config.json vocab_size) but the target {target} has {target_vocab} (its config.json "
        "vocab_size). The dspark arm's Markov head is sized from the draft's vocabulary and is added to "
        "the target's logits, so sglang would fail at the first draft step. Serve this drafter with the "
        f"target it was trained for (a {draft_vocab}-token vocabulary), or a drafter trained for this "
        "target's tokenizer.",
        kind="unsupported",
        where="vocab_size",
    )


def check_servable(served: Any) -> None:
    """Refuse, during argument resolution, a draft the arm's worker would refuse after the target loaded.

    The same checks the workers run while they build the draft (mask token, architecture, Markov head),
    without touching sglang's model registry; for the dspark arm also the Markov head's type and the
    vocabulary against the target's.
    """
    cfg = served.cfg
    architectures = _architectures(cfg)
    if require_layout(served).builtin == "DSPARK":
        _require_mask_token(cfg)
        _dspark_arm_names(architectures)
        _require_markov_head_type(cfg)
        _require_target_vocabulary(served)
    elif any(a in DSPARK_ARCHITECTURES for a in architectures):
        _dflash_arm_names(architectures, served_markov_rank(cfg))


def _served_for(server_args: Any) -> Any:
    """``resolution.served``: imported on first use, so this module imports without it."""
    from .resolution import served

    return served(server_args)


def _tp_cpu_group() -> tuple[Any, int]:
    from sglang.srt.distributed.parallel_state import get_tp_group

    group = get_tp_group()
    return group.cpu_group, int(group.rank_in_group)


@dataclass(frozen=True)
class AttentionRanks:
    """A process's place in sglang's attention layout: ``tp_rank = (attn_dp_rank * attn_cp_size +
    attn_cp_rank) * attn_tp_size + attn_tp_rank`` (``layers/dp_attention.py``, both versions)."""

    tp_rank: int
    attn_tp_rank: int
    attn_cp_rank: int
    attn_dp_rank: int
    attn_dp_size: int


def attention_ranks(tp_rank: int) -> AttentionRanks:
    """This process's attention ranks, as sglang published them (``runtime_context.get_parallel()``).

    Without a published topology for this TP rank (data-parallel attention never initialised, as in a
    CPU test) the TP group is one attention group: ``AttentionRanks(tp_rank, tp_rank, 0, 0, 1)``.
    """
    try:
        from sglang.srt.runtime_context import get_parallel

        p = get_parallel()
        ranks = AttentionRanks(
            int(p.tp_rank), int(p.attn_tp_rank), int(p.attn_cp_rank), int(p.attn_dp_rank), int(p.attn_dp_size)
        )
    except Exception:  # noqa: BLE001 - not initialised (or another layout): the TP rank alone
        return AttentionRanks(tp_rank, tp_rank, 0, 0, 1)
    return ranks if ranks.tp_rank == tp_rank else AttentionRanks(tp_rank, tp_rank, 0, 0, 1)


def telemetry_placement(ranks: AttentionRanks) -> tuple[bool, int | None]:
    """(whether this rank keeps the accept telemetry, the ``dp=`` tag of its lines).

    Every rank of one attention group (its attention-TP and context-parallel peers) verifies the same
    batch, so the first of them keeps the telemetry; with data-parallel attention each DP group runs
    its own batch, so each group's first rank keeps one, tagged with the group's DP rank. Without it
    that is TP rank 0 alone, untagged.
    """
    watches = ranks.attn_tp_rank == 0 and ranks.attn_cp_rank == 0
    return watches, (ranks.attn_dp_rank if ranks.attn_dp_size > 1 else None)


class _HarvestWorkerMixin:
    """Resolution, rank agreement and the per-round telemetry hook, common to both arms."""

    dspark_harvest: ClassVar[DsparkHarvest]
    dspark_served: Any = None
    dspark_telemetry: AcceptTelemetry | None = None

    def _dspark_harvest_init(self, server_args: Any) -> Any:
        served = _served_for(server_args)
        harvest = served.resolution.harvest
        if harvest is not self.dspark_harvest:
            raise GeometryError(
                f"{type(self).__name__} serves the {self.dspark_harvest.name()} harvest but this process "
                f"resolved {harvest.name()} ({served.resolution.source}); the factory and the worker "
                f"disagree. Check that {ENV_VAR} is the same in every process of this server.",
                where=ENV_VAR,
            )
        from .resolution import read_arg

        running_as = str(read_arg(server_args, "speculative_algorithm") or "").upper()
        builtin = layout_of(served).builtin
        if running_as in ("DFLASH", "DSPARK") and running_as != builtin:
            raise GeometryError(
                f"{type(self).__name__}: sglang runs this server as {running_as} but the draft "
                f"{served.cfg.path} resolves to the {harvest.name()} harvest ({builtin}) in "
                f"this process ({served.resolution.source}); refusing rather than serving the wrong "
                f"convention. Check that {ENV_VAR} is the same in every process of this server.",
                where="speculative_algorithm",
            )
        group, tp_rank = _tp_cpu_group()
        check_rank_agreement(rank_agreement_values(served), group)
        enable_metrics = bool(getattr(server_args, "enable_metrics", False))
        self._dspark_attach(served, tp_rank=tp_rank, enable_metrics=enable_metrics)
        return served

    def _dspark_attach(self, served: Any, *, tp_rank: int = 0, enable_metrics: bool = False) -> None:
        """Keep ``served``; create the accept telemetry on the first rank of each attention group.

        That is TP rank 0 (the others verify the same rounds), and with data-parallel attention the
        first rank of every DP group, whose lines end with ``dp=N`` (``telemetry_placement``).
        """
        from ..telemetry import AcceptTelemetry, PrometheusMetrics
        from .resolution import announce

        self.dspark_served = served
        watches, dp_rank = telemetry_placement(attention_ranks(tp_rank))
        if not watches:
            self.dspark_telemetry = None
            return
        # The startup line and manifest, once per scheduler process too: sglang 0.5.17 resolves its
        # arguments before the launcher configures logging, so the launcher's INFO lines can be lost.
        announce(served)
        gamma = served.geometry.gamma
        metrics = PrometheusMetrics(gamma) if enable_metrics else None
        self.dspark_telemetry = AcceptTelemetry.from_resolution(
            served.resolution, gamma, metrics=metrics, dp_rank=dp_rank
        )
        logger.info(
            "DSPARK_HARVEST worker %s%s: harvest=%s (%s), block_size=%d, gamma=%d, verify_window=%d, "
            "harvested rows %s",
            type(self).__name__,
            "" if dp_rank is None else f" (dp {dp_rank})",
            served.resolution.harvest.name(),
            served.resolution.source,
            served.geometry.block_size,
            gamma,
            served.geometry.verify_window,
            list(served.geometry.harvested_rows),
        )

    dspark_live_mask: list[bool] | None = None

    def on_verify_complete_cpu(self, num_correct_drafts_per_req: list[int], batch_size: int = 0) -> None:
        """sglang's host-side per-round hook: the parent's work, then one telemetry record (no sync).

        Requests that had already finished (still in an overlapped batch) are left out, as sglang
        leaves them out of their ``spec_verify_ct``.
        """
        super().on_verify_complete_cpu(num_correct_drafts_per_req, batch_size=batch_size)  # type: ignore[misc]
        telemetry = self.dspark_telemetry
        if telemetry is None:
            return
        live, self.dspark_live_mask = self.dspark_live_mask, None
        values = num_correct_drafts_per_req
        if live is not None and len(live) == len(values) and not all(live):
            values = [v for v, keep in zip(values, live, strict=True) if keep]
        if values:
            telemetry.on_verify_complete(values)


# ------------------------------------------------------------------ the two arms


class HarvestDFlashWorker(_HarvestWorkerMixin, DFlashWorkerV2):
    """The dflash arm: sglang's DFLASH worker unchanged (rows 1..b-1, b-1 drafts, verify window b)."""

    dspark_harvest = DsparkHarvest.DFLASH

    def _dflash_route(self, server_args: Any) -> contextlib.AbstractContextManager[None]:
        cfg = self._dspark_harvest_init(server_args).cfg
        architectures = _architectures(cfg)
        if not any(a in DSPARK_ARCHITECTURES for a in architectures):
            return contextlib.nullcontext()
        return dflash_draft_route(architectures, markov_rank=served_markov_rank(cfg))

    if _DFLASH_TAKES_PS:

        def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
            with self._dflash_route(server_args):
                super().__init__(server_args, gpu_id, ps, nccl_port, target_worker)

    else:

        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            with self._dflash_route(server_args):
                super().__init__(server_args, gpu_id, nccl_port, target_worker)


class HarvestDSparkWorker(_HarvestWorkerMixin, DSparkWorkerV2):
    """The dspark arm: sglang's DSPARK worker, anchor-first, gamma = b drafts, verify window b+1."""

    dspark_harvest = DsparkHarvest.DSPARK
    dspark_sample_from_anchor: ClassVar[bool] = True

    def _dspark_route(self, server_args: Any) -> contextlib.AbstractContextManager[None]:
        cfg = self._dspark_harvest_init(server_args).cfg
        _require_mask_token(cfg)
        rank, head_type = served_markov_head(cfg)
        return dspark_draft_route(
            _architectures(cfg),
            markov_rank=rank,
            mask_token_id=cfg.mask_token_id,
            markov_head_type=head_type,
            sample_from_anchor=self.dspark_sample_from_anchor,
        )

    if _DSPARK_TAKES_PS:

        def __init__(self, server_args, gpu_id, ps, nccl_port, target_worker):
            with self._dspark_route(server_args):
                super().__init__(server_args, gpu_id, ps, nccl_port, target_worker)

    elif _DSPARK_TAKES_DRAFT_WORKER_CLS:

        def __init__(self, server_args, gpu_id, nccl_port, target_worker, draft_worker_cls=TpModelWorker):
            with self._dspark_route(server_args):
                super().__init__(server_args, gpu_id, nccl_port, target_worker, draft_worker_cls)

    else:

        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            with self._dspark_route(server_args):
                super().__init__(server_args, gpu_id, nccl_port, target_worker)


class HarvestMaskFillDSparkWorker(HarvestDSparkWorker):
    """A mask-fill drafter with a DSpark architecture and a Markov head (``layout.MASK_FILL_DSPARK``):
    sglang 0.5.23's DSPARK worker with ``sample_from_anchor`` false. The query is
    ``[anchor, MASK x (b-1)]``, the anchor row's output is dropped, rows 1..b-1 are the b-1 drafts (the
    Markov chain starts at the anchor), verify window b: the dflash harvest, with the Markov head."""

    dspark_harvest = DsparkHarvest.DFLASH
    dspark_sample_from_anchor = False


_WORKERS: dict[tuple[DsparkHarvest, str], type] = {
    (DsparkHarvest.DFLASH, "DFLASH"): HarvestDFlashWorker,
    (DsparkHarvest.DSPARK, "DSPARK"): HarvestDSparkWorker,
    (DsparkHarvest.DFLASH, "DSPARK"): HarvestMaskFillDSparkWorker,
}


def worker_class_for(harvest: DsparkHarvest, builtin: str | None = None) -> type:
    """The worker class sglang's scheduler instantiates for a resolved harvest, served as ``builtin``
    (default: the harvest's own builtin; DSPARK for a mask-fill DSpark drafter, ``layout.layout_for``)."""
    try:
        return _WORKERS[harvest, builtin or ("DFLASH" if harvest is DsparkHarvest.DFLASH else "DSPARK")]
    except (KeyError, TypeError):
        raise GeometryError(
            f"no DSPARK_HARVEST worker for harvest {harvest!r} served as {builtin!r}; expected one of "
            + ", ".join(f"{h.name()} as {b}" for h, b in _WORKERS)
            + ".",
            where="worker_class_for",
        ) from None


__all__ = [
    "WORKER_CONTRACT",
    "DSPARK_ARM_ARCHITECTURES",
    "DSPARK_ARCHITECTURES",
    "HarvestDFlashWorker",
    "HarvestDSparkWorker",
    "HarvestMaskFillDSparkWorker",
    "HarvestDSparkDraftModel",
    "PARSE_HOOK_TARGET",
    "RESULT_HOOK_TARGET",
    "register_hooks",
    "AttentionRanks",
    "attention_ranks",
    "telemetry_placement",
    "served_markov_head",
    "served_markov_rank",
    "check_servable",
    "dflash_draft_route",
    "dspark_draft_route",
    "prepare_dspark_arm_config",
    "rank_agreement_values",
    "worker_class_for",
]
