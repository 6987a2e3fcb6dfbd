"""The draft routes: while a worker builds its draft, the draft's architecture names load the class
its arm serves (``HarvestDSparkDraftModel`` for DSPARK, sglang's ``DFlashDraftModel`` for a mask-fill
drafter with a DSpark name and no Markov head) through this process's ``ModelRegistry``. What may be
served at all was decided by the plan (``serving.refusals``) before any model loaded."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from ..architectures import SGLANG_BUNDLED_DSPARK, SGLANG_DENSE_DSPARK, SGLANG_DSPARK_ARM
from ..serving.refusals import dspark_arm_names
from .draft_model import DraftRoute, HarvestDSparkDraftModel

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


@contextlib.contextmanager
def dspark_draft_route(architectures: tuple[str, ...], route: DraftRoute) -> Iterator[None]:
    """While the DSpark worker builds its draft, the draft's architecture names load our model.

    The swap is in this process's ``ModelRegistry`` only and is undone on exit, so the target (already
    loaded) and any later model load see sglang's own classes. A head bundled by the target's dspark_*
    keys loads as sglang's own class (``SGLANG_BUNDLED_DSPARK``; its Markov head is always trained).
    """
    if any(a in SGLANG_BUNDLED_DSPARK.values() for a in architectures):
        yield
        return
    names = dspark_arm_names(architectures)
    with _route_lock:
        HarvestDSparkDraftModel._route = route
        try:
            with _registry_swap(names, HarvestDSparkDraftModel):
                yield
        finally:
            HarvestDSparkDraftModel._route = None


@contextlib.contextmanager
def dflash_draft_route(architectures: tuple[str, ...]) -> Iterator[None]:
    """The dflash arm loads sglang's ``DFlashDraftModel`` for a mask-fill drafter with a DSpark name.

    Without a Markov head (the plan refused one here) the two classes share one backbone and the same
    weights, and sglang's DSpark class would refuse it (``markov_rank`` 0).
    """
    names = [a for a in architectures if a in DSPARK_ARCHITECTURES]
    if not names:
        yield
        return
    from sglang.srt.models.dflash import DFlashDraftModel

    with _route_lock, _registry_swap(names, DFlashDraftModel):
        yield


def route_of(plan: Any, sample_from_anchor: bool) -> DraftRoute:
    """What ``HarvestDSparkDraftModel`` builds for this plan: its Markov head (rank 0: the zero head),
    its mask token and its query layout."""
    head = plan.cfg.markov_head
    return DraftRoute(
        markov_rank=0 if head is None else head.rank,
        mask_token_id=plan.cfg.mask_token_id,
        markov_head_type=None if head is None else head.head_type,
        sample_from_anchor=sample_from_anchor,
    )


__all__ = [
    "DSPARK_ARCHITECTURES",
    "DSPARK_ARM_ARCHITECTURES",
    "dflash_draft_route",
    "dspark_draft_route",
    "route_of",
]
