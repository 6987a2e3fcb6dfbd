"""The ``spec_class`` of ``DSPARK_HARVEST``, for the route where the early rewrite to the builtin did not
run: it behaves as sglang's DFLASH or DSPARK, whichever the draft checkpoint resolves to. sglang
dispatches on predicates, never on the algorithm's name, so every predicate asks the builtin enum member
of the resolved arm; the arm resolves during argument handling, or in a scheduler process from the
server args sglang published (docs/sglang.md, the fallback route).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
from sglang.srt.speculative.spec_registry import CustomSpecAlgo

from ..errors import DsparkHarvestError, GeometryError
from ..geometry import RoundGeometry
from ..harvest import ENV_VAR, DsparkHarvest
from .layout import layout_of
from .resolution import (
    ALGORITHM,
    Served,
    ServeRefusal,
    announce,
    builtin_name,
    declare_args,
    published_server_args,
    read_arg,
    served,
    unwrap_record,
)

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("sglang_dspark_plugin.sglang_plugin")

_SOURCE = f"{ALGORITHM}.handle_server_args"

# Methods whose answer does not depend on the arm (both builtin members agree; tested).
ARM_INDEPENDENT = (
    "is_some",
    "is_none",
    "is_speculative",
    "is_eagle",
    "is_eagle3",
    "is_frozen_kv_mtp",
    "is_uno",
    "is_dflash_family",
    "is_standalone",
    "is_ngram",
    "supports_target_verify_for_draft",
    "supports_prefill_shared_read_done",
    "supports_mixed_chunk",
    "supports_grammar_overlap",
    "has_draft_kv",
    "carries_draft_hidden_states",
    "need_topk",
)
# Methods whose answer depends on the arm (DFLASH vs DSPARK).
ARM_DEPENDENT = (
    "is_dflash",
    "is_dspark",
    "supports_ragged_verify",
    "get_num_tokens_per_req_for_target_verify",
)


def builtin_member(harvest: DsparkHarvest, builtin: str | None = None) -> SpeculativeAlgorithm:
    """The builtin enum member whose semantics the arm serves: ``builtin`` when the layout named it
    (a mask-fill DSpark drafter is served by DSPARK), else the harvest's own."""
    return SpeculativeAlgorithm[builtin or builtin_name(harvest)]


def _mirrored(name: str, member_of: Callable[[Any], SpeculativeAlgorithm]) -> Callable[..., Any]:
    """A predicate that asks the builtin member ``member_of(self)``, with the enum method's signature;
    ``False`` where this sglang's enum has no such method (0.5.17 has no ``is_uno``, for example)."""

    def mirrored(self: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(member_of(self), name, None)
        return False if method is None else method(*args, **kwargs)

    mirrored.__name__ = name
    parent = vars(SpeculativeAlgorithm).get(name)
    vars(mirrored)["__signature__"] = inspect.signature(parent if parent is not None else _predicate)
    return mirrored


def _predicate(self: Any) -> bool:
    """The signature of a predicate this sglang's enum lacks."""
    return False


def _mirror_predicates(cls: type[DsparkHarvestSpecAlgo]) -> type[DsparkHarvestSpecAlgo]:
    """Define every predicate of ``ARM_INDEPENDENT`` and ``ARM_DEPENDENT`` on ``cls``, generated from the
    two lists (as sglang's registry derives its interface from the enum): no method is listed twice."""
    for names, member_of in ((ARM_INDEPENDENT, cls._any_member), (ARM_DEPENDENT, cls._member)):
        for name in names:
            predicate = _mirrored(name, member_of)
            predicate.__qualname__ = f"{cls.__name__}.{name}"
            setattr(cls, name, predicate)
    return cls


@_mirror_predicates
class DsparkHarvestSpecAlgo(CustomSpecAlgo):
    """``CustomSpecAlgo`` that behaves as DFLASH or DSPARK, whichever the checkpoint was trained for."""

    def __init__(
        self,
        name: str,
        factory: Any,
        *,
        supports_overlap: bool = False,
        validate_server_args: Any = None,
    ) -> None:
        super().__init__(
            name, factory, supports_overlap=supports_overlap, validate_server_args=validate_server_args
        )
        self._harvest: DsparkHarvest | None = None
        self._builtin: str | None = None

    def __repr__(self) -> str:
        arm = "unresolved" if self._harvest is None else self._harvest.name()
        return f"DsparkHarvestSpecAlgo({self.name!r}, harvest={arm})"

    # -- the arm -------------------------------------------------------------------------------
    @property
    def harvest(self) -> DsparkHarvest:
        """The resolved arm; resolves lazily from the server args sglang published in this process."""
        if self._harvest is None:
            server_args = published_server_args()
            if server_args is None:
                raise RuntimeError(
                    f"{ALGORITHM}: the harvest arm is not resolved in this process yet (no server args "
                    "were handled or published). sglang resolves arguments before it builds a "
                    "scheduler; if you build ServerArgs yourself, call resolve_once() (0.5.23) or "
                    "publish them before asking for DFLASH/DSPARK-specific predicates."
                )
            s = served(server_args)
            self._resolve_arm(s.resolution.harvest, layout_of(s).builtin)
        assert self._harvest is not None
        return self._harvest

    def _resolve_arm(self, harvest: DsparkHarvest, builtin: str | None = None) -> None:
        """Fix the arm, and answer every mirrored predicate with the builtin member's own bound method
        from now on: the same object sglang calls for DFLASH/DSPARK, so the same cost per call."""
        self._harvest, self._builtin = harvest, builtin
        member = builtin_member(harvest, builtin)
        for name in (*ARM_INDEPENDENT, *ARM_DEPENDENT):
            if hasattr(member, name):
                setattr(self, name, getattr(member, name))

    def _member(self) -> SpeculativeAlgorithm:
        return builtin_member(self.harvest, self._builtin)

    def _any_member(self) -> SpeculativeAlgorithm:
        # Arm-independent predicates: both members agree, so an unresolved arm may answer with DFLASH.
        if self._harvest is None and published_server_args() is None:
            return SpeculativeAlgorithm.DFLASH
        return self._member()

    # -- the scheduler calls these, CustomSpecAlgo lacks them (so do carries_draft_hidden_states and
    # need_topk, mirrored predicates) ---------------------------------------------------------------
    def create_future_map(
        self,
        device: torch.device,
        req_to_token_pool: Any,
        needs_cpu_seq_lens: bool = True,
        needs_confidence_relay: bool = False,
    ) -> Any:
        # The enum's own body, bound to this algorithm: the FutureMap consults our predicates.
        return SpeculativeAlgorithm.create_future_map(
            self, device, req_to_token_pool, needs_cpu_seq_lens, needs_confidence_relay
        )

    def resolve_max_speculative_num_draft_tokens(self, server_args: Any) -> int | None:
        member = self._member()
        if hasattr(member, "resolve_max_speculative_num_draft_tokens"):
            return member.resolve_max_speculative_num_draft_tokens(server_args)
        return read_arg(server_args, "speculative_num_draft_tokens")

    # -- argument resolution (fallback route) -----------------------------------------------------
    def handle_server_args(self, server_args: Any) -> None:
        """Resolve the harvest once and set the geometry; refuse contradictions before any model loads.

        Normally never reached: ``builtin.rewrite_to_builtin`` turns ``DSPARK_HARVEST`` into DFLASH /
        DSPARK at the start of argument resolution. This is the route where that early hook could not
        fire (``ServerArgs`` built before ``load_plugins()``): it serves, but sglang's checks and features
        keyed on the builtin's name do not see it, hence the warning.
        """
        record = unwrap_record(server_args)
        logger.warning(
            "%s: the early rewrite to sglang's builtin did not run (were ServerArgs built before "
            "sglang.srt.plugins.load_plugins()?); serving through the registered custom algorithm, "
            "where sglang's own checks and features keyed on DFLASH/DSPARK do not apply.",
            ALGORITHM,
        )
        s = served_or_refused(record)
        g = s.geometry
        layout = layout_of(s)
        member = builtin_member(g.harvest, layout.builtin)
        block_flag = (
            "speculative_dflash_block_size" if member.name == "DFLASH" else "speculative_dspark_block_size"
        )
        override_steps_and_topk(record, member.name)
        declare_args(
            record,
            _SOURCE,
            speculative_num_draft_tokens=g.verify_window,
            speculative_num_steps=1,
            speculative_eagle_topk=1,
            # DSPARK reads its flag as gamma: b for a shifted drafter, b-1 for a mask-fill one
            **{block_flag: g.gamma if layout.mask_fill_dspark else g.block_size},
        )
        device = str(read_arg(record, "device") or "")
        if device == "cpu":
            # sglang's DFLASH/DSPARK handlers refuse cpu; the geometry above is all that applies here.
            logger.warning(
                "%s: --device cpu: geometry resolved (%s arm), but sglang's %s worker needs "
                "cuda/npu/xpu to serve; its device checks and draft attention backend are skipped.",
                ALGORITHM,
                g.harvest.name(),
                member.name,
            )
        else:
            # The builtin dispatcher (ragged-verify env check, then _handle_dflash / _handle_dspark)
            # sets the draft attention backend, max_running_requests and its own checks.
            member.handle_server_args(record)
        resolved = read_arg(record, "speculative_num_draft_tokens")
        if resolved is None or int(resolved) != g.verify_window:
            raise GeometryError(
                f"{ALGORITHM}: sglang's {member.name} handler changed speculative_num_draft_tokens to "
                f"{resolved}, but the {g.harvest.name()} geometry of {s.cfg.path} needs "
                f"{g.verify_window}; this sglang version is not supported (run `dspark-harvest doctor`).",
                where="speculative_num_draft_tokens",
            )
        self._resolve_arm(g.harvest, member.name)
        announce(s)


def served_or_refused(record: Any) -> Served:
    """The served resolution of these server args, after every refusal that is the plugin's own:
    disaggregation, widths that contradict the checkpoint, uncapturable target layers, drafters the
    arm cannot build (conflicting evidence and bad env values are refused by ``served`` itself)."""
    refuse_disaggregation(record)
    s = served(record)
    check_width_flags(record, s.geometry, s.cfg.path)
    refuse_uncapturable(record, s)
    refuse_unservable(s)
    return s


def override_steps_and_topk(record: Any, builtin: str) -> None:
    """Warn about steps/topk flags other than 1 (the builtin handlers override them to 1 too)."""
    for field, flag in (
        ("speculative_num_steps", "--speculative-num-steps"),
        ("speculative_eagle_topk", "--speculative-eagle-topk"),
    ):
        value = read_arg(record, field)
        if value is not None and int(value) != 1:
            logger.warning(
                "%s (like %s) only supports %s 1; overriding %s to 1.", ALGORITHM, builtin, flag, value
            )


def refuse_disaggregation(server_args: Any) -> None:
    """Refuse prefill-decode disaggregation at startup (it would fail mid-request, not at launch)."""
    mode = read_arg(server_args, "disaggregation_mode")
    if mode not in (None, "null"):
        raise ServeRefusal(
            f"{ALGORITHM} does not support prefill-decode disaggregation (--disaggregation-mode {mode}). "
            "sglang builds the prefill->decode draft state only for its builtin algorithms "
            "(SpeculativeAlgorithm.build_disagg_draft_input), and a harvest-resolved geometry has not "
            "been validated across that transfer. Serve without --disaggregation-mode, or use the "
            "builtin DFLASH/DSPARK with a checkpoint trained for that builtin's convention.",
            kind="unsupported",
            where="--disaggregation-mode",
        )


def refuse_uncapturable(server_args: Any, s: Served) -> None:
    """Refuse a drafter whose target layers sglang cannot capture from this target (before any load).

    sglang would fail at the first decode round ("DFLASH target_hidden feature dim mismatch").
    """
    from ..capture import target_layer_count, uncapturable_message

    if not s.cfg.target_layer_ids:
        return
    target = read_arg(server_args, "model_path")
    architecture, layers = target_layer_count(str(target))
    if layers is None:
        return
    why = uncapturable_message(
        s.cfg.target_layer_ids, layers, where=f"{s.cfg.path}/config.json", target_architecture=architecture
    )
    if why:
        raise ServeRefusal(
            f"{ALGORITHM}: sglang cannot serve this drafter with target {target} ({architecture}, "
            f"{layers} layers): {why}",
            kind="unsupported",
            where="target_layer_ids",
        )


def refuse_unservable(s: Served) -> None:
    """Refuse here, before any model loads, a draft the arm's worker would refuse after the target loaded.

    First the workers' contract (``contract.require_worker_contract``): a sglang that lacks what the
    workers rely on stops the launch here, with one message, instead of in every scheduler.
    """
    from .contract import require_worker_contract

    require_worker_contract()
    from .workers import check_servable

    try:
        check_servable(s)
    except DsparkHarvestError as err:
        if isinstance(err, ValueError):
            raise
        raise ServeRefusal.wrap(err) from err


def check_width_flags(server_args: Any, geometry: RoundGeometry, checkpoint: str) -> None:
    """Refuse a ``--speculative-num-draft-tokens`` or block-size flag that contradicts the geometry."""
    g = geometry
    why = (
        "A wrong width is the same silent collapse as a wrong convention: drafts are verified against "
        "positions their rows were not trained for (or trained rows are dropped); nothing crashes, "
        f"acceptance just falls. Remove the flag ({ALGORITHM} sets it from the checkpoint), or set it "
        f"to the value above. To serve the other convention, set {ENV_VAR}."
    )
    geometry_text = (
        f"the {g.harvest.name()} harvest of {checkpoint} (block_size {g.block_size}: "
        f"{g.gamma} drafts from rows {g.harvested_rows[0]}..{g.harvested_rows[-1]}, "
        f"verify window {g.verify_window} = n_drafts(b) + 1)"
    )
    ndt = read_arg(server_args, "speculative_num_draft_tokens")
    if ndt is not None and int(ndt) != g.verify_window:
        raise GeometryError(
            f"{ALGORITHM}: --speculative-num-draft-tokens {ndt} contradicts {geometry_text}; it must be "
            f"{g.verify_window} (the verify window: the anchor plus {g.gamma} drafts). {why}",
            where="--speculative-num-draft-tokens",
        )
    for field, flag in (
        ("speculative_dflash_block_size", "--speculative-dflash-block-size"),
        ("speculative_dspark_block_size", "--speculative-dspark-block-size"),
    ):
        value = read_arg(server_args, field)
        if value is not None and int(value) != g.block_size:
            raise GeometryError(
                f"{ALGORITHM}: {flag} {value} contradicts {geometry_text}; the block size is the number "
                f"of rows the drafter was trained on, read from the checkpoint, so it must be "
                f"{g.block_size}. {why}",
                where=flag,
            )


__all__ = [
    "DsparkHarvestSpecAlgo",
    "builtin_member",
    "refuse_disaggregation",
    "override_steps_and_topk",
    "served_or_refused",
    "refuse_uncapturable",
    "refuse_unservable",
    "check_width_flags",
    "ARM_INDEPENDENT",
    "ARM_DEPENDENT",
]
