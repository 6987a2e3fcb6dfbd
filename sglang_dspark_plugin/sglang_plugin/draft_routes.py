"""The draft routes and the servability checks.

While a worker builds its draft, the draft's architecture names load the class its arm serves
(``HarvestDSparkDraftModel`` in the dspark arm, sglang's ``DFlashDraftModel`` for a mask-fill drafter
with a DSpark name and no Markov head) through this process's ``ModelRegistry``; ``check_servable``
refuses, during argument resolution, a draft the worker would refuse after the target loaded.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config

from ..architectures import SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..census.families import pattern_family
from ..errors import InvalidCheckpointError, UnsupportedCheckpointError
from ..harvest import ENV_VAR
from ..tensor_headers import markov_head, tensor_headers
from .draft_model import DraftRoute, HarvestDSparkDraftModel, served_markov_head, served_markov_rank
from .layout import DSPARK, architectures_of, require_layout

DSPARK_ARCHITECTURES: tuple[str, ...] = SGLANG_DENSE_DSPARK
"""sglang's dense DSpark draft classes: DFlash's backbone plus a Markov head (``models/dspark.py``)."""

DSPARK_ARM_ARCHITECTURES: tuple[str, ...] = SGLANG_DSPARK_ARM
"""Draft architectures the dspark arm serves with sglang's dense DSpark draft model (same backbone)."""


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
        HarvestDSparkDraftModel._route = DraftRoute(
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
    class would refuse it (``markov_rank`` 0). With a Markov head the DFlash worker would drop a trained
    part of the model: refused, with the way to serve it.
    """
    names = _dflash_arm_names(architectures, markov_rank)
    if not names:
        yield
        return
    from sglang.srt.models.dflash import DFlashDraftModel

    with _route_lock, _registry_swap(names, DFlashDraftModel):
        yield


def require_mask_token(cfg: Any) -> None:
    """Refuse a dspark-arm draft without a mask token id (sglang's DSpark worker has no fallback)."""
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
    architectures = architectures_of(cfg)
    if require_layout(served).builtin == DSPARK:
        require_mask_token(cfg)
        _dspark_arm_names(architectures)
        _require_markov_head_type(cfg)
        _require_target_vocabulary(served)
    elif any(a in DSPARK_ARCHITECTURES for a in architectures):
        _dflash_arm_names(architectures, served_markov_rank(cfg))
    elif any(pattern_family(a) for a in architectures):
        raise UnsupportedCheckpointError(
            f"this drafter is mask-fill (dflash harvest) and its architectures={list(architectures)!r} name "
            "a DSpark-family class the census recognised by its naming pattern; sglang's DFlash worker "
            "would build that class's DSpark layout or none, and the dspark arm serves the dense DSpark "
            f"classes only ({', '.join(DSPARK_ARM_ARCHITECTURES)}). `dspark-harvest inspect` says which "
            "sglang version can serve it.",
            where="config.json: architectures",
        )


__all__ = [
    "DSPARK_ARCHITECTURES",
    "DSPARK_ARM_ARCHITECTURES",
    "check_servable",
    "require_mask_token",
    "dflash_draft_route",
    "dspark_draft_route",
]
