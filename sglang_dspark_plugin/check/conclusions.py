"""From the measured runs to the report: each drafter's verdict, what sglang serves now, the manifests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CensusConflictError
from ..harvest import ENV_VAR, DsparkHarvest, Resolution
from .confidence import Comparison, compare
from .goals import grade
from .report import (
    SCHEMA_VERSION,
    CheckReport,
    DrafterInfo,
    ProbeRow,
    Recommendation,
    ReleaseServes,
    RunRow,
    Settings,
    TargetResult,
    WouldServe,
)
from .verdicts import CONTRADICTS, INCONCLUSIVE, REFUSED, SERVE_AS_IS, exit_code, overall

if TYPE_CHECKING:
    from ..census.draft_config import DflashCfg
    from .measure import Drafter, Run

NO_FIT = 1.1
"""Below this accept length under both harvests, neither fits: the drafter does not fit the target."""


def _advice(verdict: str, best: DsparkHarvest, drafter: Drafter, now: WouldServe, measured: str) -> str:
    if verdict == INCONCLUSIVE:
        return f"inconclusive ({measured}): decode more prompts (--prompt, up to all --num-prompts) to decide"
    if verdict == SERVE_AS_IS:
        return (
            f"serve as is: DSPARK_HARVEST serves {best.name()} ({now.source}) and the measurement agrees "
            f"({measured})"
        )
    served = f"serves {now.harvest} ({now.source})" if now.harvest else "refuses it at startup"
    if drafter.strategy is None:
        why = f"; {drafter.census_note}"
    elif drafter.strategy != best.name():
        why = f"; the census says {drafter.strategy}: check the checkpoint's config"
    else:
        why = ""
    fix = f"serve with {ENV_VAR}={best.name()}"
    return f"DSPARK_HARVEST {served} but {best.name()} accepts more ({measured}){why}; {fix}"


def recommend(drafter: Drafter, runs: list[Run], now: WouldServe) -> Recommendation:
    """The verdict on one drafter: the paired comparison of its two runs against what is served now."""
    mine = {r.harvest: r for r in runs if r.drafter is drafter}
    lengths = {h: r.telemetry.counts.mean_accept_length() or 1.0 for h, r in mine.items()}
    comparison: Comparison = compare(
        mine[DsparkHarvest.DFLASH].per_prompt, mine[DsparkHarvest.DSPARK].per_prompt
    )
    best = comparison.decided or max(lengths, key=lambda h: (lengths[h], h.name() == drafter.strategy))
    other = next(h for h in lengths if h is not best)
    measured = (
        f"accept length {lengths[best]:.2f} under {best.name()} vs {lengths[other]:.2f} under {other.name()}"
    )
    if lengths[best] < NO_FIT:
        verdict, advice = (
            INCONCLUSIVE,
            f"neither harvest accepts ({measured}): this drafter does not fit this target",
        )
    elif now.harvest is None:
        verdict = REFUSED
        advice = f"DSPARK_HARVEST refuses it at startup ({now.refused}); measured: {measured}"
    elif comparison.decided is None:
        verdict = INCONCLUSIVE
        advice = _advice(verdict, best, drafter, now, measured)
    else:
        verdict = SERVE_AS_IS if now.harvest == best.name() else CONTRADICTS
        advice = _advice(verdict, best, drafter, now, measured)
    override = f"{ENV_VAR}={best.name()}" if verdict == CONTRADICTS else None
    return Recommendation(
        drafter=drafter.name,
        verdict=verdict,
        harvest=best,
        census=drafter.strategy,
        served=now.harvest,
        override=override,
        comparison=comparison,
        advice=advice,
        sglang_cannot_serve=drafter.sglang_cannot_serve,
    )


def _release_serves(cfg: DflashCfg, env_value: str | None, target: str | None, version: str) -> ReleaseServes:
    from ..serving import LaunchRequest, SglangSupport
    from ..serving.verdict import release_verdict

    request = LaunchRequest(draft=str(cfg.path), target=target, harvest_env=env_value)
    verdict = release_verdict(request, SglangSupport.for_version(version))
    refused = None if verdict.servable else verdict.how
    return ReleaseServes(version, verdict.harvest, verdict.builtin, verdict.needs, refused)


def releases_to_plan() -> tuple[str, ...]:
    """The sglang releases ``check`` plans a launch for: the installed one, else every tested one."""
    from .. import releases

    installed = releases.installed_sglang()
    return (installed,) if installed else releases.TESTED


def served(
    name: str,
    cfg: DflashCfg,
    env_value: str | None,
    target: str | None = None,
    versions: tuple[str, ...] | None = None,
) -> WouldServe:
    """What ``DSPARK_HARVEST`` would serve for this drafter with this environment, or why it refuses: the
    serving plan a launch runs (``make_plan``, per release of ``versions``, default ``releases_to_plan()``;
    ``target`` is the launch's ``--model-path``, a local folder), so the gate and the launch agree."""
    per_release = tuple(_release_serves(cfg, env_value, target, v) for v in versions or releases_to_plan())
    harvests = {r.harvest for r in per_release if r.harvest is not None}
    if len(harvests) != 1:
        refusals = [f"sglang {r.version}: {r.refused}" for r in per_release if r.refused]
        why = "; ".join(refusals) or "the releases serve different harvests"
        return WouldServe(name, env_value, None, None, why, per_release)
    try:
        source = Resolution.of(cfg, env_value).source  # the decision the plan took its harvest from
    except CensusConflictError as exc:  # the plan would have refused: kept as a refusal all the same
        return WouldServe(name, env_value, None, None, exc.message, per_release)
    return WouldServe(name, env_value, harvests.pop(), source, None, per_release)


def served_by_sglang(
    cfg: DflashCfg, env_value: str | None, versions: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """``served`` as ``{"harvest", "source", "refused"}``: what ``DSPARK_HARVEST`` would serve, or why not."""
    answer = served("", cfg, env_value, versions=versions)
    return {"harvest": answer.harvest, "source": answer.source, "refused": answer.refused}


def _manifest(drafter: Drafter, best: DsparkHarvest, runs: list[Run], target_path: str) -> dict[str, Any]:
    """The geometry manifest of the deployment being recommended, with its measurement."""
    from ..geometry import RoundGeometry, build_manifest

    # the census alone where it agrees, else the explicit override
    resolution = Resolution.of(drafter.cfg, None if drafter.strategy == best.name() else best.name())
    run_ = next(r for r in runs if r.drafter is drafter and r.harvest is best)
    return build_manifest(
        RoundGeometry(best, drafter.model.block_size),
        resolution,
        drafter.cfg,
        producer="reference-engine",
        extra={
            "drafter": drafter.name,
            "target": target_path,
            "accept_length": run_.telemetry.counts.mean_accept_length(),
            "exact_match": run_.exact,
            "near_tie_flips": sum(d.near_tie for d in run_.departures),
        },
    )


def build_report(
    drafters: list[Drafter],
    runs: list[Run],
    ar_tokens_per_s: float,
    settings: Settings,
    env_value: str | None = None,
) -> CheckReport:
    """The report of a measurement; ``served`` says, per drafter, what ``DSPARK_HARVEST`` would serve
    with ``MEMRA_DSPARK_HARVEST`` as it is now (``env_value``), or why it would refuse."""
    from ..telemetry import ACCEPT_LENGTH_DEFINITION

    versions = releases_to_plan()
    now = [served(d.name, d.cfg, env_value, settings.target, versions) for d in drafters]
    recommendations = [recommend(d, runs, s) for d, s in zip(drafters, now, strict=True)]
    rows = [RunRow.of(r) for r in runs]
    verdict = overall((r.verdict for r in recommendations), all(r.exact_up_to_ties for r in rows))
    return CheckReport(
        schema_version=SCHEMA_VERSION,
        verdict=verdict,
        exit_code=exit_code(verdict),
        accept_length_definition=ACCEPT_LENGTH_DEFINITION,
        runs=rows,
        ar_tokens_per_s=ar_tokens_per_s,
        manifests=[
            _manifest(d, rec.harvest, runs, settings.target)
            for d, rec in zip(drafters, recommendations, strict=True)
        ],
        drafters=[DrafterInfo.of(d.name, d.strategy, d.model.describe()) for d in drafters],
        recommendations=recommendations,
        probes=[ProbeRow.of(r.drafter.name, r.harvest, r.probe) for r in runs],
        served=now,
        targets=[TargetResult(*graded) for graded in grade(rows, ar_tokens_per_s)],
        settings=settings,
    )


__all__ = ["NO_FIT", "recommend", "releases_to_plan", "served", "served_by_sglang", "build_report"]
