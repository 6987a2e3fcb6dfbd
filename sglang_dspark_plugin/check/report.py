"""The report of one ``check``: typed rows the table, the targets and the plot read, and its JSON form.

``CheckReport.to_json()`` is the ``--json`` object: ``accept_length_definition``, ``runs``,
``ar_tokens_per_s``, ``manifest``, ``manifests``, ``drafters``, ``recommendations``, ``probes``,
``served`` and ``settings``, in that order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..harvest import DsparkHarvest

if TYPE_CHECKING:
    from ..engine.probe import ProbeResult
    from .measure import Run


def _harvest(name: str) -> DsparkHarvest:
    harvest = DsparkHarvest.from_name(name)
    if harvest is None:
        raise ValueError(f"a check report names harvest {name!r}; known: dflash, dspark")
    return harvest


@dataclass(frozen=True)
class RunRow:
    """One drafter under one harvest, as measured (the run schema of ``--json``)."""

    drafter: str
    drafter_strategy: str | None  # what the census says; None when it cannot tell
    harvest: DsparkHarvest
    matched: bool
    accept_length: float
    sglang_meta_accept_length: float | None  # sglang's meta_info figure, averaged over the requests
    per_position: tuple[float, ...]
    exact_match: bool
    tokens_per_s: float
    probe_verdict: str

    @classmethod
    def of(cls, run: Run) -> RunRow:
        """The row of a measured run."""
        meta = run.meta_lengths
        return cls(
            drafter=run.drafter.name,
            drafter_strategy=run.drafter.strategy,
            harvest=run.harvest,
            matched=run.matched,
            accept_length=run.telemetry.mean_accept_length() or 1.0,
            sglang_meta_accept_length=sum(meta) / len(meta) if meta else None,
            per_position=tuple(run.telemetry.per_position_rates() or []),
            exact_match=run.exact,
            tokens_per_s=run.tokens_per_s,
            probe_verdict=run.probe.verdict,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRow:
        """A row read back from a saved ``check --json`` object (one of an older release may lack
        ``drafter_strategy``, ``sglang_meta_accept_length``, ``per_position`` or ``probe_verdict``)."""
        return cls(
            drafter=data["drafter"],
            drafter_strategy=data.get("drafter_strategy"),
            harvest=_harvest(data["harvest"]),
            matched=data["matched"],
            accept_length=data["accept_length"],
            sglang_meta_accept_length=data.get("sglang_meta_accept_length"),
            per_position=tuple(data.get("per_position") or ()),
            exact_match=data["exact_match"],
            tokens_per_s=data["tokens_per_s"],
            probe_verdict=data.get("probe_verdict", ""),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "drafter_strategy": self.drafter_strategy,
            "harvest": self.harvest.name(),
            "matched": self.matched,
            "accept_length": self.accept_length,
            "sglang_meta_accept_length": self.sglang_meta_accept_length,
            "per_position": list(self.per_position),
            "exact_match": self.exact_match,
            "tokens_per_s": self.tokens_per_s,
            "probe_verdict": self.probe_verdict,
        }


@dataclass(frozen=True)
class MarkovHeadInfo:
    type: str
    rank: int


@dataclass(frozen=True)
class ConfidenceHeadInfo:
    with_markov: bool
    input_width: int


@dataclass(frozen=True)
class DrafterInfo:
    """A drafter as loaded: what its geometry is read from, and its DSpark heads (``None`` if absent)."""

    drafter: str
    strategy: str | None
    architecture: str | None
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    markov_head: MarkovHeadInfo | None
    confidence_head: ConfidenceHeadInfo | None

    @classmethod
    def of(cls, name: str, strategy: str | None, described: Mapping[str, Any]) -> DrafterInfo:
        """From the drafter model's ``describe()``."""
        markov, confidence = described["markov_head"], described["confidence_head"]
        return cls(
            drafter=name,
            strategy=strategy,
            architecture=described["architecture"],
            block_size=described["block_size"],
            mask_token_id=described["mask_token_id"],
            target_layer_ids=tuple(described["target_layer_ids"]),
            markov_head=None if markov is None else MarkovHeadInfo(**markov),
            confidence_head=None if confidence is None else ConfidenceHeadInfo(**confidence),
        )

    def to_json(self) -> dict[str, Any]:
        markov, confidence = self.markov_head, self.confidence_head
        return {
            "drafter": self.drafter,
            "strategy": self.strategy,
            "architecture": self.architecture,
            "block_size": self.block_size,
            "mask_token_id": self.mask_token_id,
            "target_layer_ids": list(self.target_layer_ids),
            "markov_head": None if markov is None else {"type": markov.type, "rank": markov.rank},
            "confidence_head": None
            if confidence is None
            else {"with_markov": confidence.with_markov, "input_width": confidence.input_width},
        }


@dataclass(frozen=True)
class Recommendation:
    """The harvest that accepts more for one drafter, and what to do about it."""

    drafter: str
    harvest: DsparkHarvest
    census: str | None  # the strategy the census says
    advice: str
    sglang_cannot_serve: str | None  # why sglang cannot serve it on this target, if it cannot

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "harvest": self.harvest.name(),
            "census": self.census,
            "advice": self.advice,
            "sglang_cannot_serve": self.sglang_cannot_serve,
        }


@dataclass(frozen=True)
class ProbeRow:
    """The offset probe of one drafter under one harvest."""

    drafter: str
    harvest: DsparkHarvest
    result: ProbeResult

    def to_json(self) -> dict[str, Any]:
        return {"drafter": self.drafter, "harvest": self.harvest.name(), **self.result.to_json()}


@dataclass(frozen=True)
class Served:
    """What ``--speculative-algorithm DSPARK_HARVEST`` would serve for a drafter now, or why it refuses."""

    drafter: str
    env_value: str | None  # MEMRA_DSPARK_HARVEST as it is now
    harvest: str | None  # None when a server would refuse it
    source: str | None
    refused: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "drafter": self.drafter,
            "env_value": self.env_value,
            "harvest": self.harvest,
            "source": self.source,
            "refused": self.refused,
        }


@dataclass(frozen=True)
class Settings:
    """What was measured, where and how long it took."""

    target: str
    embedded: bool
    device: str
    dtype: str
    prompts: int
    max_new_tokens: int
    threads: int
    wall_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "embedded": self.embedded,
            "device": self.device,
            "dtype": self.dtype,
            "prompts": self.prompts,
            "max_new_tokens": self.max_new_tokens,
            "threads": self.threads,
            "wall_s": self.wall_s,
        }


@dataclass(frozen=True)
class CheckReport:
    """Everything ``check`` measured and concluded; ``manifests`` holds one manifest per drafter."""

    accept_length_definition: str
    runs: Sequence[RunRow]
    ar_tokens_per_s: float
    manifests: Sequence[dict[str, Any]]  # geometry manifests (``geometry.build_manifest``)
    drafters: Sequence[DrafterInfo]
    recommendations: Sequence[Recommendation]
    probes: Sequence[ProbeRow]
    served: Sequence[Served]
    settings: Settings

    @property
    def exact(self) -> bool:
        """Every speculative output equalled the target's own greedy output."""
        return all(r.exact_match for r in self.runs)

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` object; ``manifest`` is the first drafter's manifest."""
        return {
            "accept_length_definition": self.accept_length_definition,
            "runs": [r.to_json() for r in self.runs],
            "ar_tokens_per_s": self.ar_tokens_per_s,
            "manifest": self.manifests[0],
            "manifests": list(self.manifests),
            "drafters": [d.to_json() for d in self.drafters],
            "recommendations": [r.to_json() for r in self.recommendations],
            "probes": [p.to_json() for p in self.probes],
            "served": [s.to_json() for s in self.served],
            "settings": self.settings.to_json(),
        }


__all__ = [
    "RunRow",
    "MarkovHeadInfo",
    "ConfidenceHeadInfo",
    "DrafterInfo",
    "Recommendation",
    "ProbeRow",
    "Served",
    "Settings",
    "CheckReport",
]
