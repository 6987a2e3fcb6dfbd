"""From the measured runs to the report: the harvest to serve, what sglang serves now, the manifests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import CensusConflictError
from ..harvest import DsparkHarvest, Resolution
from .report import CheckReport, DrafterInfo, ProbeRow, Recommendation, RunRow, Served, Settings

if TYPE_CHECKING:
    from ..draft_config import DflashCfg
    from .measure import Drafter, Run


def recommend(drafter: Drafter, runs: list[Run]) -> Recommendation:
    """The harvest that accepts more, and how it relates to what the census says."""
    mine = {r.harvest: r.telemetry.mean_accept_length() or 1.0 for r in runs if r.drafter is drafter}
    best = max(mine, key=lambda h: (mine[h], h.name() == drafter.strategy))
    other = next(h for h in mine if h is not best)
    measured = f"accept length {mine[best]:.2f} under {best.name()} vs {mine[other]:.2f} under {other.name()}"
    env = f"MEMRA_DSPARK_HARVEST={best.name()}"
    if mine[best] < 1.1:
        advice = f"neither harvest accepts ({measured}): this drafter does not fit this target"
    elif drafter.strategy == best.name():
        advice = f"serve as is: the census says {best.name()} and the measurement agrees ({measured})"
    elif drafter.strategy is None:
        advice = f"serve with {env}: {drafter.census_note}; the measurement decides ({measured})"
    else:
        advice = (
            f"the census says {drafter.strategy} but {best.name()} accepts more ({measured}); check the "
            f"checkpoint's config, and serve with {env} if it is right"
        )
    return Recommendation(drafter.name, best, drafter.strategy, advice, drafter.sglang_cannot_serve)


def served(name: str, cfg: DflashCfg, env_value: str | None) -> Served:
    """What ``DSPARK_HARVEST`` would serve for this drafter with this environment, or why it refuses."""
    try:
        resolution = Resolution.of(cfg, env_value)
    except CensusConflictError as exc:
        return Served(name, env_value, None, None, exc.message)
    return Served(name, env_value, resolution.harvest.name(), resolution.source, None)


def served_by_sglang(cfg: DflashCfg, env_value: str | None) -> dict[str, Any]:
    """``served`` as ``{"harvest", "source", "refused"}``: what ``DSPARK_HARVEST`` would serve, or why not."""
    answer = served("", cfg, env_value)
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
            "accept_length": run_.telemetry.mean_accept_length(),
            "exact_match": run_.exact,
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

    recommendations = [recommend(d, runs) for d in drafters]
    return CheckReport(
        accept_length_definition=ACCEPT_LENGTH_DEFINITION,
        runs=[RunRow.of(r) for r in runs],
        ar_tokens_per_s=ar_tokens_per_s,
        manifests=[
            _manifest(d, rec.harvest, runs, settings.target)
            for d, rec in zip(drafters, recommendations, strict=True)
        ],
        drafters=[DrafterInfo.of(d.name, d.strategy, d.model.describe()) for d in drafters],
        recommendations=recommendations,
        probes=[ProbeRow(r.drafter.name, r.harvest, r.probe) for r in runs],
        served=[served(d.name, d.cfg, env_value) for d in drafters],
        settings=settings,
    )


__all__ = ["recommend", "served", "served_by_sglang", "build_report"]
