"""The serving plan: what a ``DSPARK_HARVEST`` launch serves, decided once, in plain Python.

``make_plan(request, support)`` takes a typed snapshot of the launch (``LaunchRequest``: the draft,
the target, the speculative flags that matter, the ``MEMRA_DSPARK_*`` settings as set at launch) and
what the running sglang can serve (``SglangSupport``), and returns a frozen ``ServePlan`` or raises a
typed refusal. The plan holds everything the sglang adapters need: the harvest with its source and
evidence, the round geometry, the builtin and its query layout, the gamma flag, the Markov head, the
server arguments to declare and the manifest. It pickles and deep-copies as it is, so it travels to
sglang's scheduler processes on the server args sglang already hands them; nothing is re-derived there.
The plan only decides: ``stages`` refuses where sglang later does otherwise, ``announce`` logs it and
writes its manifest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from ..census.draft_config import DflashCfg
from ..checkpoint.headers import content_fingerprint, tensor_headers
from ..errors import DsparkHarvestError
from ..geometry import BLOCK_SIZE_FLAGS, RoundGeometry, build_manifest
from ..harvest import ENV_VAR, DsparkHarvest, Resolution
from .bundled import (
    HUB_PATTERNS,
    KEYS,
    BundledDraft,
    check_bundled_head,
    find_bundled_draft,
    require_finding_builtin,
    same_path,
)
from .context_edge import reserve_headroom, row_statement
from .layout import DSPARK, Arm, architectures_of, layout_for
from .peer import check_peer
from .refusal import ALGORITHM, as_serve_refusal
from .request import (
    DSPARK_BLOCK_FLAG,
    MANIFEST_ENV_VAR,
    LaunchRequest,
    SglangSupport,
    flag_field,
)
from .route import DraftRoute, route_for
from .servability import check_servable
from .target_checkpoint import TargetCheckpoint, load_target, refuse_uncapturable
from .topology import refuse_disaggregation
from .width import flag_int, served_block_size


@dataclass(frozen=True)
class ServePlan:
    """Everything a ``DSPARK_HARVEST`` launch serves, decided once by ``make_plan``."""

    request: LaunchRequest
    support: SglangSupport
    cfg: DflashCfg
    resolution: Resolution
    geometry: RoundGeometry
    layout: Arm
    block_size_source: str  # "config.json", or the flag that gave it
    manifest: dict[str, Any] = field(compare=False)
    trained_block_size: int | None = None  # the checkpoint's block when the launch serves a narrower one
    advice: tuple[str, ...] = ()  # WARNINGs the launcher logs with the plan
    bundled: BundledDraft | None = None  # where a launch without a draft path found its draft

    @property
    def harvest(self) -> DsparkHarvest:
        return self.resolution.harvest

    @property
    def builtin(self) -> str:
        """``DFLASH`` or ``DSPARK``: the sglang algorithm that serves the launch."""
        return self.layout.builtin

    @property
    def draft(self) -> str:
        """``--speculative-draft-model-path`` as given, or the bundled draft as every node names it
        (``cfg.path`` is the folder it resolved to)."""
        return self.bundled.name if self.bundled is not None else cast(str, self.request.draft)

    @property
    def architectures(self) -> tuple[str, ...]:
        """The draft classes sglang loads: the config's, or the class of a head bundled by dspark_* keys."""
        return (self.bundled.architectures if self.bundled is not None else ()) or architectures_of(self.cfg)

    @property
    def route(self) -> DraftRoute:
        """What the worker builds its draft as: the class the draft's names load as, and for DSPARK the
        Markov head (the zero head for a shifted drafter without one), mask token and query layout."""
        return route_for(self.layout, self.cfg, self.architectures)

    def parse_head(self, config_name: Any) -> tuple[int, str] | None:
        """The Markov head ``(rank, type)`` sglang's DSpark parse must report for the draft config named
        ``config_name``: the route's head for the served draft's own config (matched by path; the zero
        rank-1 head for a shifted drafter without one), else None (sglang's own reading stands)."""
        head = self.route.head
        if not config_name or head is None:
            return None
        return (
            head.parsed
            if same_path(config_name, self.draft) or same_path(config_name, self.cfg.path)
            else None
        )

    def row_headroom(self, page_size: int, sglang_extra: int) -> tuple[int, str]:
        """The ``req_to_token`` row headroom beyond ``context_len`` this launch builds its pool with:
        sglang's own (``sglang_extra``), widened to hold every decode round's reserve (``context_edge``),
        and the sentence the log states it in. Never narrower than sglang's."""
        window = self.geometry.verify_window
        statement = row_statement(window, page_size, sglang_extra)
        return max(sglang_extra, reserve_headroom(window, page_size)), statement

    @property
    def narrowed(self) -> bool:
        """Whether the launch serves a narrower block than the checkpoint was trained on."""
        return self.trained_block_size not in (None, self.geometry.block_size)

    @property
    def gamma_flag(self) -> dict[str, int]:
        """DSPARK takes gamma from its block-size flag: b-1 for a mask-fill DSpark drafter, the served
        gamma for a narrower block; else nothing (the builtin reads the block from the checkpoint)."""
        if self.builtin != DSPARK or not (self.layout.mask_fill_dspark or self.narrowed):
            return {}
        return {flag_field(DSPARK_BLOCK_FLAG): self.geometry.gamma}

    @property
    def declared_args(self) -> dict[str, Any]:
        """The server arguments the rewrite declares: the builtin, its verify window, its gamma flag."""
        return {
            "speculative_algorithm": self.builtin,
            "speculative_num_draft_tokens": self.geometry.verify_window,
            **self.gamma_flag,
        }


def _block_size(cfg: DflashCfg, harvest: DsparkHarvest, request: LaunchRequest) -> tuple[int | None, str]:
    """The block size and where it came from: config.json, else a block-size flag (the arm's own first,
    since published DFlash configs may leave it to sglang's flag); ``None`` when neither gives one."""
    if cfg.block_size is not None:
        return cfg.block_size, "config.json"
    flags = request.block_size_flags()
    arm_flag = BLOCK_SIZE_FLAGS[harvest]
    for flag in sorted(flags, key=lambda f: f != arm_flag):
        if flags[flag] is not None:
            return flag_int(flag, flags[flag]), flag
    return None, "config.json"


@dataclass(frozen=True)
class _Draft:
    """The requested draft as read: its census, harvest, trained geometry, and where it was found."""

    cfg: DflashCfg
    resolution: Resolution
    trained: RoundGeometry
    block_size_source: str
    bundled: BundledDraft | None
    advice: tuple[str, ...]
    target: TargetCheckpoint | None  # the launch's target at its --revision, read once


def _resolve(request: LaunchRequest, support: SglangSupport) -> _Draft:
    """Census, harvest and trained geometry of the requested draft (named, or bundled in the target);
    typed errors as sglang shows them."""
    from ..census import census

    try:
        bundled: BundledDraft | None = None
        advice: tuple[str, ...] = ()
        # a hub id resolves as sglang resolves it: same cache and revision, downloaded unless offline
        if request.draft:
            cfg = census(request.draft, request.draft_revision, download=True)
            target = load_target(request, optional=True)  # what the checks read; sglang loads it
        else:
            target = load_target(request, HUB_PATTERNS)
            bundled, advice = find_bundled_draft(request, target, support)
            cfg = census(bundled.folder)
        environ = {} if request.harvest_env is None else {ENV_VAR: request.harvest_env}
        resolution = DsparkHarvest.explain(cfg, environ=environ)
        if bundled is not None:
            check_bundled_head(cfg, bundled, resolution)
        block_size, source = _block_size(cfg, resolution.harvest, request)
        # A missing block size (None) is refused by RoundGeometry itself, naming the arm's flag.
        geometry = RoundGeometry(resolution.harvest, cast(int, block_size))
    except DsparkHarvestError as err:
        raise as_serve_refusal(err) from err
    return _Draft(cfg, resolution, geometry, source, bundled, advice, target)


def _steps_advice(request: LaunchRequest, layout: Arm) -> tuple[str, ...]:
    """A WARNING for each steps/topk flag other than 1: the builtin's handler overrides it to 1."""
    given = (("--speculative-num-steps", request.num_steps), ("--speculative-eagle-topk", request.eagle_topk))
    return tuple(
        f"{ALGORITHM} (like {layout.builtin}) only supports {flag} 1; overriding {value} to 1."
        for flag, value in given
        if value is not None and str(value).strip() != "1"
    )


def make_plan(request: LaunchRequest, support: SglangSupport) -> ServePlan:
    """The plan for ``request`` on ``support``, after every refusal that is the plugin's own."""
    draft = _resolve(request, support)
    cfg, resolution, trained, bundled = draft.cfg, draft.resolution, draft.trained, draft.bundled
    layout = layout_for(resolution.harvest, cfg)
    try:
        if bundled is not None:
            require_finding_builtin(bundled, layout, cfg.path)
        refuse_disaggregation(request, layout, support)
        served = served_block_size(request, trained, layout, cfg.path)
        geometry = trained if served == trained.block_size else RoundGeometry(trained.harvest, served)
        refuse_uncapturable(draft.target, cfg)
        headers = tensor_headers(cfg.path)  # read once: the loader-layout check and the fingerprint
        if bundled is None or bundled.form != KEYS:  # a dspark_keys head: check_bundled_head
            check_servable(cfg, layout, resolution, draft.target, support, list(headers))
    except DsparkHarvestError as err:
        raise as_serve_refusal(err) from err
    manifest = build_manifest(
        geometry,
        resolution,
        cfg,
        producer="sglang-plugin",
        extra={
            "algorithm": ALGORITHM,
            "sglang_builtin": layout.builtin,
            **layout.manifest_fields(),
            "speculative_num_draft_tokens": geometry.verify_window,
            "block_size_source": draft.block_size_source,
            "markov_head": None if cfg.markov_head is None else cfg.markov_head.to_json(),
            "trained_block_size": trained.block_size,
            "draft": request.draft if bundled is None else bundled.name,
            "draft_revision": request.draft_revision if bundled is None else bundled.revision,
            "bundled": None if bundled is None else bundled.to_json(),
            "draft_content": content_fingerprint(cfg.raw, headers),
            "disaggregation_mode": request.disaggregation_mode,
        },
    )
    try:
        peer_advice = check_peer(request.disaggregation_mode, request.peer_manifest, manifest)
    except DsparkHarvestError as err:
        raise as_serve_refusal(err) from err
    advice = (
        *draft.advice,
        *(() if peer_advice is None else (peer_advice,)),
        *_steps_advice(request, layout),
    )
    return ServePlan(
        request,
        support,
        cfg,
        resolution,
        geometry,
        layout,
        draft.block_size_source,
        manifest,
        None if geometry is trained else trained.block_size,  # narrowed from the trained block size
        advice,
        bundled,
    )


__all__ = [
    "MANIFEST_ENV_VAR",
    "LaunchRequest",
    "SglangSupport",
    "ServePlan",
    "flag_field",
    "make_plan",
]
