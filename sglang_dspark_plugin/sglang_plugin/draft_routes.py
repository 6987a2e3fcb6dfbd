"""The draft route in this process: while a worker builds its draft, the names the plan's route gives
(``serving.route.DraftRoute``) load the class it names, through this process's ``ModelRegistry``. What
is loaded as what, with which Markov head, was decided by the plan before any model loaded; this only
translates the class name into sglang's class."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from ..serving.route import DSPARK_MODEL, DraftRoute
from .draft_model import HarvestDSparkDraftModel

_route_lock = threading.Lock()


@contextlib.contextmanager
def _registry_swap(names: tuple[str, ...], cls: type) -> Iterator[None]:
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
def draft_route(route: DraftRoute) -> Iterator[None]:
    """While the worker builds its draft, ``route.names`` load ``route.loads_as``.

    The swap is in this process's ``ModelRegistry`` only and is undone on exit, so the target (already
    loaded) and any later model load see sglang's own classes. The plugin's DSpark model reads the route
    (its head, mask token and query layout) while it is built.
    """
    if route.loads_as is None or not route.names:
        yield
        return
    if route.loads_as != DSPARK_MODEL:
        from sglang.srt.models.dflash import DFlashDraftModel

        with _route_lock, _registry_swap(route.names, DFlashDraftModel):
            yield
        return
    with _route_lock:
        HarvestDSparkDraftModel._route = route
        try:
            with _registry_swap(route.names, HarvestDSparkDraftModel):
                yield
        finally:
            HarvestDSparkDraftModel._route = None


__all__ = ["draft_route"]
