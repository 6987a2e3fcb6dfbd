"""The measurement: every drafter under each harvest, and the target alone, decoded side by side.

Timing is side by side: after a warm-up, every prompt is decoded by every arm in turn, so a change in
machine load hits all arms alike.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import CensusConflictError
from ..harvest import DsparkHarvest
from .exactness import Output
from .target import memory_guard

if TYPE_CHECKING:
    import torch

    from ..census.draft_config import DflashCfg
    from ..engine.drafter import DFlashDraftModel
    from ..engine.spec_decode import Generation
    from ..probe.offsets import ProbeCounts, ProbeResult
    from ..telemetry import AcceptTelemetry
    from .records import Departure

WARMUP_TOKENS = 8


@dataclass
class Drafter:
    """One drafter under check: its checkpoint census and its loaded model."""

    name: str
    cfg: DflashCfg
    strategy: str | None  # what the census says ("dflash" / "dspark"), None when it cannot tell
    census_note: str
    model: DFlashDraftModel
    sglang_cannot_serve: str | None = None  # why sglang cannot serve it on this target, if it cannot


def census_strategy(cfg: DflashCfg) -> tuple[str | None, str]:
    """The strategy the census says (``None`` when its evidence is contradictory), and why."""
    try:
        strategy = "dspark" if cfg.strategy_dspark else "dflash"
    except CensusConflictError as exc:  # a measurement is exactly what settles a conflict
        return None, f"the census is contradictory ({exc.message})"
    if cfg.deciding_tier is None:
        return strategy, "no signal in the checkpoint: the historical default (mask-fill)"
    return strategy, f"census tier {cfg.deciding_tier}"


def load_drafter_for(
    name: str, cfg: DflashCfg, target: Any, tokenizer: Any, device: torch.device, dtype: torch.dtype
) -> Drafter:
    """Load one drafter from its census and check that it fits the target; typed errors otherwise."""
    from ..engine.fit import fit_drafter

    strategy, note = census_strategy(cfg)
    with memory_guard(f"loading the drafter {name}"):
        fitted = fit_drafter(cfg, target, tokenizer, device=device, dtype=dtype)
    return Drafter(name, cfg, strategy, note, fitted.model, fitted.sglang_cannot_serve)


def _no_counts() -> ProbeCounts:
    from ..probe.offsets import ProbeCounts

    return ProbeCounts()


@dataclass
class Run:
    """One drafter under one harvest, summed over the prompts."""

    drafter: Drafter
    harvest: DsparkHarvest
    telemetry: AcceptTelemetry
    seconds: float = 0.0
    tokens: int = 0
    exact: bool = True  # every output identical to the target's own greedy output
    checked: list[Output] = field(default_factory=list)  # every output, for the judge of departures
    counts: ProbeCounts = field(default_factory=_no_counts)
    outputs: list[list[int]] = field(default_factory=list)
    meta_lengths: list[float] = field(default_factory=list)  # sglang's meta_info figure, per request
    per_prompt: list[tuple[int, int]] = field(default_factory=list)  # (accepted drafts, rounds) per prompt
    _counted: tuple[int, int] = (0, 0)  # the telemetry's (request rounds, accepted drafts) so far

    @property
    def matched(self) -> bool:
        return self.drafter.strategy == self.harvest.name()

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def departures(self) -> list[Departure]:
        """Where the outputs left the target's greedy choice (filled by ``exactness.judge``)."""
        return [d for o in self.checked for d in o.departures]

    @property
    def probe(self) -> ProbeResult:
        """The offset probe's verdict on every draft counted so far."""
        from ..probe.offsets import verdict

        return verdict(self.counts, self.harvest)

    def add(self, gen: Generation, reference: list[int], prompt: list[int]) -> None:
        """Count one generation against the target's own greedy tokens ``reference``."""
        from ..probe.offsets import probe_counts

        self.seconds += gen.seconds
        self.tokens += len(gen.tokens)
        self.exact &= gen.tokens == reference
        self.checked.append(Output(len(self.outputs), prompt, gen.tokens, reference))
        self.outputs.append(gen.tokens)
        if gen.sglang_meta_accept_length is not None:
            self.meta_lengths.append(gen.sglang_meta_accept_length)
        self.counts = self.counts + probe_counts(gen.probe_rounds, prompt + reference)
        # this prompt's accept length: what the shared telemetry counted during this generation
        accept = self.telemetry.counts
        rounds, accepted = accept.request_rounds, accept.accepted_drafts
        new_rounds, new_accepted = rounds - self._counted[0], accepted - self._counted[1]
        self.per_prompt.append((new_accepted, new_rounds))
        self._counted = (rounds, accepted)


def _new_runs(drafters: list[Drafter]) -> list[Run]:
    from ..engine.spec_decode import QUIET
    from ..telemetry import AcceptTelemetry

    return [
        Run(d, h, AcceptTelemetry(h.n_drafts(d.model.block_size), h, "check", settings=QUIET))
        for d in drafters
        for h in DsparkHarvest
    ]


def measure(
    target: Any,
    drafters: list[Drafter],
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    progress: bool = True,
) -> tuple[list[Run], float, float]:
    """Decode every prompt autoregressively and with every drafter x harvest, interleaved.

    Returns the runs, the autoregressive tokens/s and the wall time of the measurement.
    """
    from tqdm import tqdm  # type: ignore[import-untyped]

    from ..engine import autoregressive_generate, speculative_generate

    runs = _new_runs(drafters)
    # warm-up: first calls pay for allocations and kernel selection, keep them out of the timing
    autoregressive_generate(target, prompts[0], WARMUP_TOKENS)
    for d in drafters:
        for h in DsparkHarvest:
            speculative_generate(target, d.model, prompts[0], h, WARMUP_TOKENS)

    start = time.perf_counter()
    ar_seconds, ar_tokens = 0.0, 0
    bar = tqdm(
        total=len(prompts) * (1 + len(runs)), desc="check", unit="gen", disable=not progress, file=sys.stderr
    )
    for prompt in prompts:
        ref = autoregressive_generate(target, prompt, max_new_tokens)
        ar_seconds, ar_tokens = ar_seconds + ref.seconds, ar_tokens + len(ref.tokens)
        bar.update()
        for run_ in runs:
            gen = speculative_generate(
                target, run_.drafter.model, prompt, run_.harvest, max_new_tokens, telemetry=run_.telemetry
            )
            run_.add(gen, ref.tokens, prompt)
            bar.update()
    bar.close()
    return runs, (ar_tokens / ar_seconds if ar_seconds > 0 else 0.0), time.perf_counter() - start


__all__ = ["WARMUP_TOKENS", "Drafter", "Run", "census_strategy", "load_drafter_for", "measure"]
