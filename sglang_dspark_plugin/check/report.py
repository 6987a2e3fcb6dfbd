"""The report of one ``check``: typed rows the table, the targets and the plot read, and its JSON form.

``CheckReport.to_json()`` is the ``--json`` object; its JSON Schema (``report_schema()``, printed by
``check --schema``) is derived from these dataclasses' fields, so the two cannot drift apart.
``schema_version`` changes whenever a field is removed or changes meaning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..harvest import DsparkHarvest
from .confidence import Comparison
from .jsonform import json_schema
from .records import Departure, JsonRecord
from .verdicts import Verdict

if TYPE_CHECKING:
    from ..probe.offsets import ProbeResult
    from .measure import Run

SCHEMA_VERSION = 3


def _harvest(name: str) -> DsparkHarvest:
    harvest = DsparkHarvest.from_name(name)
    if harvest is None:
        raise ValueError(f"a check report names harvest {name!r}; known: dflash, dspark")
    return harvest


@dataclass(frozen=True)
class RunRow(JsonRecord):
    """One drafter under one harvest, as measured."""

    drafter: str
    drafter_strategy: str | None  # what the census says; None when it cannot tell
    harvest: DsparkHarvest
    matched: bool
    accept_length: float
    sglang_meta_accept_length: float | None  # sglang's meta_info figure, averaged over the requests
    per_position: tuple[float, ...]
    per_prompt_accepted: tuple[int, ...]  # accepted drafts per prompt: the paired samples of the interval
    per_prompt_rounds: tuple[int, ...]  # request-rounds per prompt
    exact_match: bool  # every output identical to the target's own greedy output, token for token
    departures: tuple[Departure, ...]  # where an output left it: near-tie flips and errors (exactness.py)
    tokens_per_s: float
    probe_verdict: str

    @property
    def near_ties(self) -> list[Departure]:
        """Departures within the dtype's rounding: reported, never failing the gate."""
        return [d for d in self.departures if d.near_tie]

    @property
    def errors(self) -> list[Departure]:
        """Departures by a clear margin: a verify or harvest bug."""
        return [d for d in self.departures if not d.near_tie]

    @property
    def exact_up_to_ties(self) -> bool:
        """Identical, or every departure a near-tie (a report of schema 2 or older, not exact, has no
        departures judged: it does not count as exact)."""
        return self.exact_match or (bool(self.departures) and not self.errors)

    @classmethod
    def of(cls, run: Run) -> RunRow:
        """The row of a measured run."""
        meta = run.meta_lengths
        return cls(
            drafter=run.drafter.name,
            drafter_strategy=run.drafter.strategy,
            harvest=run.harvest,
            matched=run.matched,
            accept_length=run.telemetry.counts.mean_accept_length() or 1.0,
            sglang_meta_accept_length=sum(meta) / len(meta) if meta else None,
            per_position=tuple(run.telemetry.counts.per_position_rates() or []),
            per_prompt_accepted=tuple(a for a, _ in run.per_prompt),
            per_prompt_rounds=tuple(n for _, n in run.per_prompt),
            exact_match=run.exact,
            departures=tuple(run.departures),
            tokens_per_s=run.tokens_per_s,
            probe_verdict=run.probe.verdict,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRow:
        """A row read back from a saved ``check --json`` object (one of an older release may lack the
        fields added since: ``drafter_strategy``, ``sglang_meta_accept_length``, ``per_position``,
        ``per_prompt_accepted``, ``per_prompt_rounds``, ``probe_verdict``, ``departures``)."""
        return cls(
            drafter=data["drafter"],
            drafter_strategy=data.get("drafter_strategy"),
            harvest=_harvest(data["harvest"]),
            matched=data["matched"],
            accept_length=data["accept_length"],
            sglang_meta_accept_length=data.get("sglang_meta_accept_length"),
            per_position=tuple(data.get("per_position") or ()),
            per_prompt_accepted=tuple(data.get("per_prompt_accepted") or ()),
            per_prompt_rounds=tuple(data.get("per_prompt_rounds") or ()),
            exact_match=data["exact_match"],
            departures=tuple(Departure(**d) for d in data.get("departures") or ()),
            tokens_per_s=data["tokens_per_s"],
            probe_verdict=data.get("probe_verdict", ""),
        )


@dataclass(frozen=True)
class MarkovHeadInfo(JsonRecord):
    """A drafter's Markov head: its type and rank."""

    type: str
    rank: int


@dataclass(frozen=True)
class ConfidenceHeadInfo(JsonRecord):
    """A drafter's confidence head: whether it reads the Markov features, and its input width."""

    with_markov: bool
    input_width: int


@dataclass(frozen=True)
class DrafterInfo(JsonRecord):
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


@dataclass(frozen=True)
class Recommendation(JsonRecord):
    """What to do with one drafter: its verdict, the override where one is needed, and why."""

    drafter: str
    verdict: Verdict  # serve-as-is, contradicts, inconclusive, or refused (the launch's plan refuses it)
    harvest: DsparkHarvest  # the harvest that accepted more (decided or not, see comparison)
    census: str | None  # the strategy the census says
    served: str | None  # the harvest DSPARK_HARVEST serves now; None when it would refuse
    override: str | None  # the environment setting that serves the measured harvest, when needed
    comparison: Comparison
    advice: str
    sglang_cannot_serve: str | None  # why sglang cannot serve it on this target, if it cannot


@dataclass(frozen=True)
class ProbeRow(JsonRecord):
    """The offset probe of one drafter under one harvest: matches and drafts compared by offset."""

    drafter: str
    harvest: DsparkHarvest
    verdict: str
    reason: str
    matches: dict[str, int]  # own, late, early
    compared: dict[str, int]
    rates: dict[str, float]

    @classmethod
    def of(cls, drafter: str, harvest: DsparkHarvest, result: ProbeResult) -> ProbeRow:
        c = result.counts
        return cls(
            drafter,
            harvest,
            result.verdict,
            result.reason,
            {"own": c.own, "late": c.late, "early": c.early},
            {"own": c.compared_own, "late": c.compared_late, "early": c.compared_early},
            c.rates,
        )


@dataclass(frozen=True)
class ReleaseServes(JsonRecord):
    """What one sglang release's launch serves for a drafter: the serving plan's own answer."""

    version: str
    harvest: str | None  # None: this release refuses the launch
    builtin: str | None  # the builtin it is served as (DFLASH, DSPARK)
    needs: str | None  # a flag the launch must add (the block size config.json leaves out)
    refused: str | None  # the plan's refusal


@dataclass(frozen=True)
class WouldServe(JsonRecord):
    """What ``--speculative-algorithm DSPARK_HARVEST`` would serve for a drafter now, or why it refuses:
    the serving plan of the installed sglang release, else of every tested release (``releases``)."""

    drafter: str
    env_value: str | None  # MEMRA_DSPARK_HARVEST as it is now
    harvest: str | None  # None when no release planned would serve it
    source: str | None
    refused: str | None
    releases: tuple[ReleaseServes, ...] = ()


@dataclass(frozen=True)
class TargetResult(JsonRecord):
    """One promise of the embedded models, graded (``check/goals.py``)."""

    drafter: str
    description: str
    met: bool


@dataclass(frozen=True)
class Settings(JsonRecord):
    """What was measured, where and how long it took."""

    target: str
    embedded: bool
    device: str
    dtype: str
    prompts: int
    max_new_tokens: int
    threads: int
    wall_s: float


@dataclass(frozen=True)
class CheckReport(JsonRecord):
    """Everything ``check`` measured and concluded; ``manifests`` holds one manifest per drafter."""

    schema_version: int
    verdict: Verdict  # the overall verdict, whose exit code ``check`` returns
    exit_code: int
    accept_length_definition: str
    runs: Sequence[RunRow]
    ar_tokens_per_s: float
    manifests: Sequence[dict[str, Any]]  # geometry manifests (``geometry.build_manifest``)
    drafters: Sequence[DrafterInfo]
    recommendations: Sequence[Recommendation]
    probes: Sequence[ProbeRow]
    served: Sequence[WouldServe]
    targets: Sequence[TargetResult]  # graded for every report; the text shows them for the embedded models
    settings: Settings

    @property
    def exact(self) -> bool:
        """Every speculative output equalled the target's own greedy output."""
        return all(r.exact_match for r in self.runs)

    @property
    def errors(self) -> list[tuple[RunRow, Departure]]:
        """Every departure by a clear margin, with its run: what fails the gate."""
        return [(r, d) for r in self.runs for d in r.errors]

    @property
    def near_ties(self) -> list[tuple[RunRow, Departure]]:
        """Every near-tie flip, with its run: reported only."""
        return [(r, d) for r in self.runs for d in r.near_ties]


def report_schema() -> dict[str, Any]:
    """The JSON Schema of ``check --json`` (what ``check --schema`` prints)."""
    return json_schema(CheckReport, f"dspark-harvest check --json, schema_version {SCHEMA_VERSION}")


__all__ = [
    "SCHEMA_VERSION",
    "Departure",
    "RunRow",
    "MarkovHeadInfo",
    "ConfidenceHeadInfo",
    "DrafterInfo",
    "Recommendation",
    "ProbeRow",
    "ReleaseServes",
    "WouldServe",
    "TargetResult",
    "Settings",
    "CheckReport",
    "report_schema",
]
