"""The draft as the plan's route (``serving.route.DraftRoute``) says: while a worker builds its draft,
the route's names load the class it names through this process's ``ModelRegistry`` (``draft_route``).
The dspark arm's class is sglang's ``DSparkDraftModel`` built from a draft config rewritten to what the
route serves (``serving.route.rewrite_config``: the query layout, the census's Markov head, the zero
rank-1 head where the checkpoint has none); the parse answer makes sglang's own parse of it agree."""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import torch
from sglang.srt.models.dspark import DSparkDraftModel
from sglang.srt.speculative.dspark_components.dspark_config import parse_dspark_draft_config

from ..errors import InvalidCheckpointError
from ..harvest import ENV_VAR
from ..serving.route import DSPARK_MODEL, DraftRoute, rewrite_config, set_config_value


def prepare_dspark_arm_config(config: Any, route: DraftRoute) -> bool:
    """Make a draft ``hf_config`` say what the plan's route serves (``sample_from_anchor`` at the top
    level, where sglang reads it, then ``serving.route.rewrite_config`` over sglang's own parse); True
    when it builds the zero head. Raises ``InvalidCheckpointError`` when sglang cannot parse it."""
    head = route.head
    if head is None:  # the plan hands the plugin's model a head always (``serving.route``)
        raise InvalidCheckpointError(
            "the draft route names no Markov head for the dspark arm's model; pass sglang's resolved "
            "server args on unchanged (the plan decides the head).",
            where="draft route",
        )
    set_config_value(config, "sample_from_anchor", bool(route.sample_from_anchor))
    try:
        parsed = parse_dspark_draft_config(draft_hf_config=config)
    except ValueError as exc:
        raise InvalidCheckpointError(
            f"sglang cannot read this draft config as a DSpark draft: {exc} "
            "(fix the Markov-head keys in the draft's config.json, or, if the drafter was trained with "
            f"the DFlash strategy, serve it with {ENV_VAR}=dflash).",
            where="config.json",
        ) from exc
    rewrite_config(route, config, (parsed.markov_rank, parsed.markov_head_type), parsed.mask_token_id)
    check = parse_dspark_draft_config(draft_hf_config=config)
    if not check.require_markov() or check.markov_rank != head.rank:
        raise InvalidCheckpointError(
            f"could not make sglang read this draft's Markov head (census rank {head.rank}, sglang reads "
            f"{check.markov_rank}); report the config.json keys holding markov_rank.",
            where="config.json",
        )
    return head.zero


def with_markov_head(result: Any, head: tuple[int, str]) -> Any:
    """sglang's parse result reporting the plan's Markov head ``(rank, head type)``; ``None`` when it
    already does (the parse hook then keeps sglang's own result)."""
    if (result.markov_rank, result.markov_head_type) == head:
        return None
    # sglang's parse result is a frozen msgspec struct (msgspec: sglang's dependency, not ours).
    structs: Any = importlib.import_module("msgspec.structs")
    return structs.replace(result, markov_rank=head[0], markov_head_type=head[1])


class HarvestDSparkDraftModel(DSparkDraftModel):
    """sglang's dense DSpark draft model in the route's query layout (anchor-first unless the route says
    mask-fill), with a zero Markov head when the checkpoint has none; built inside ``draft_route`` only."""

    _route: ClassVar[DraftRoute | None] = None

    def __init__(self, config: Any, quant_config: Any = None, prefix: str = "") -> None:
        no_markov = prepare_dspark_arm_config(config, type(self)._route or DraftRoute(None))
        super().__init__(config=config, quant_config=quant_config, prefix=prefix)
        self.dspark_harvest_zero_markov = no_markov
        self._zero_markov_head()

    def load_weights(self, weights: Any) -> Any:
        """sglang's loader, then the zero head again (a loader may re-initialise parameters)."""
        out = super().load_weights(weights)
        self._zero_markov_head()
        return out

    def post_load_weights(self) -> None:
        """Loaders that bypass ``load_weights`` (dummy, sharded state, remote) call it: keep the head zero."""
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
    """While the worker builds its draft, ``route.names`` load ``route.loads_as`` (the plugin's DSpark
    model reads the route while it is built); undone on exit, so every other model load sees sglang's
    own classes."""
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
