"""The reference speculative decoder: one DFlash-family round, and the loops around it.

A round, batch size 1, anchor = the last committed token at position p:

1. draft:   the drafter reads ``[anchor, MASK x (b-1)]`` (embedded with the target's own input
            embeddings) plus the target's context features, and returns one hidden row per input row;
2. harvest: the round's ``RoundGeometry`` (from ``DsparkHarvest``) alone says which rows are the
            drafts d1..d_gamma (draft j -> p+j), one slice; a DSpark Markov head then drafts them
            row by row, each biased by the draft before it;
3. verify:  ONE target forward over ``[anchor, d1..d_gamma]`` on the target's KV cache;
4. accept:  the longest prefix of drafts the target agrees with, then the target's own bonus token;
5. commit:  crop the target cache to the committed tokens and hand the drafter their features.

At temperature 0 the committed tokens are exactly the target's greedy tokens, whatever the drafter
drafts (lossless); the drafter only decides how many arrive per target forward.
"""

from __future__ import annotations

import functools
import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from ..geometry import RoundGeometry
from ..harvest import DsparkHarvest
from ..probe.offsets import ProbeRound
from ..telemetry import AcceptTelemetry, TelemetrySettings
from .markov import draft_block

QUIET = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0)
"""Engine telemetry records rounds for the caller and logs nothing (the check prints its own table)."""

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from .drafter import DFlashDraftModel, DraftCache


@dataclass
class DecodeState:
    """Everything one request carries between rounds."""

    tokens: list[int]  # prompt + committed output; the last one is the next anchor
    target_cache: Any  # transformers DynamicCache holding tokens[:-1]
    draft_cache: DraftCache  # drafter K/V of the context positions already fed to it
    context_feature: torch.Tensor  # [1, c, K*H]: target features of committed rows not yet in draft_cache


@dataclass(frozen=True)
class RoundResult:
    """What one round drafted, accepted and committed."""

    anchor_pos: int
    drafts: tuple[int, ...]
    accepted: int  # drafts accepted, 0..gamma
    committed: tuple[int, ...]  # accepted drafts + the bonus token

    @property
    def accept_length(self) -> int:
        """Tokens committed by this round's single target forward (accepted + 1)."""
        return self.accepted + 1


@dataclass
class Generation:
    """The output of one generation and how it was produced."""

    prompt_len: int
    tokens: list[int]  # the new tokens only, exactly max_new_tokens of them
    seconds: float
    rounds: list[RoundResult] = field(default_factory=list)
    telemetry: AcceptTelemetry | None = None  # accept length and per-position rates over the rounds

    @property
    def probe_rounds(self) -> list[ProbeRound]:
        """Each round's drafts and anchor, as the offset probe reads them."""
        return [ProbeRound(r.anchor_pos, r.drafts) for r in self.rounds]

    @property
    def accept_lengths(self) -> list[int]:
        """Tokens committed by each round (bonus included)."""
        return [r.accept_length for r in self.rounds]

    @property
    def sglang_meta_accept_length(self) -> float | None:
        """The figure sglang's per-request ``meta_info["spec_accept_length"]`` shows for this generation:
        new tokens (the prefill's first token included, the budget respected) over verify rounds."""
        return len(self.tokens) / len(self.rounds) if self.rounds else None


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device


def _crop(cache: Any, length: int) -> None:
    # A negative count ("remove this many") is the spelling every transformers release accepts.
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _new_cache(target: PreTrainedModel) -> Any:
    from transformers import DynamicCache

    try:
        return DynamicCache(config=target.config)
    except TypeError:  # transformers releases before the config argument
        return DynamicCache()


@functools.cache
def _cache_kwarg(forward: Any) -> str:
    # transformers renamed ``past_key_values`` to ``cache``; pass whichever this target's forward takes.
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _forward(target: PreTrainedModel, ids: torch.Tensor, cache: Any, hidden_states: bool = False) -> Any:
    kw = _cache_kwarg(type(target).forward)
    return target(ids, use_cache=True, output_hidden_states=hidden_states, **{kw: cache})


def _sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _next_token(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    if temperature > 0:
        return _sample(torch.softmax(logits.float() / temperature, -1), generator)
    return logits.argmax(-1)


@torch.inference_mode()
def prefill(
    target: PreTrainedModel,
    drafter: DFlashDraftModel,
    prompt: list[int],
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> DecodeState:
    """Run the prompt through the target; its next token becomes the first anchor."""
    device = _device(target)
    cache = _new_cache(target)
    out = _forward(target, torch.tensor([prompt], device=device), cache, hidden_states=True)
    first = int(_next_token(out.logits[0, -1], temperature, generator))
    return DecodeState(
        tokens=list(prompt) + [first],
        target_cache=cache,
        draft_cache=drafter.new_cache(),
        context_feature=drafter.extract_context_feature(out.hidden_states),
    )


def _draft(
    drafter: DFlashDraftModel,
    logits: torch.Tensor,
    rows: torch.Tensor,
    anchor: torch.Tensor,
    temperature: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The drafts of the harvested ``rows`` (their ``logits``), and at temperature > 0 the distribution
    each was sampled from (``None`` at temperature 0: the drafts are the argmax)."""
    if drafter.markov_head is not None:
        # semi-autoregressive: draft j's logits get a bias from draft j-1 (the anchor for j = 1)
        return draft_block(
            drafter.markov_head, logits, rows, anchor, temperature=temperature, generator=generator
        )
    if temperature > 0:
        q = torch.softmax(logits.float() / temperature, dim=-1)
        return _sample(q, generator), q
    return logits.float().argmax(-1), None


@torch.inference_mode()
def speculative_round(
    target: PreTrainedModel,
    drafter: DFlashDraftModel,
    geometry: RoundGeometry,
    state: DecodeState,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> RoundResult:
    """One round of ``geometry`` (built once per generation): draft, harvest, verify, accept, commit.

    Mutates ``state``.
    """
    device, b = _device(target), geometry.block_size
    anchor_pos, anchor = len(state.tokens) - 1, state.tokens[-1]

    # draft: [anchor, MASK x (b-1)] at positions p..p+b-1, after the c new context rows
    block = torch.full((1, b), drafter.mask_token_id, dtype=torch.long, device=device)
    block[0, 0] = anchor
    noise = target.get_input_embeddings()(block)
    c = state.context_feature.shape[1]
    positions = torch.arange(anchor_pos - c, anchor_pos + b, device=device).unsqueeze(0)
    hidden = drafter(noise, state.context_feature, positions, cache=state.draft_cache)

    # harvest: the convention's single say in the round; draft j is row first_row + j - 1
    rows = hidden[0, geometry.draft_rows]
    logits = target.get_output_embeddings()(rows)
    drafts, q = _draft(drafter, logits, rows, block[0, :1], temperature, generator)

    # verify: one target forward over [anchor, d1..d_gamma] (positions p..p+gamma)
    verify_ids = torch.cat([block[0, :1], drafts]).unsqueeze(0)
    out = _forward(target, verify_ids, state.target_cache, hidden_states=True)
    target_logits = out.logits[0].float()  # row i predicts position p+i+1

    # accept: the longest agreeing prefix, then one token from the target itself
    if q is not None:  # sampled drafts: rejection sampling against the distribution they came from
        accepted, bonus = _rejection_sample(
            drafts, q, torch.softmax(target_logits / temperature, -1), generator
        )
    else:
        target_argmax = target_logits.argmax(-1)
        accepted = int(torch.cumprod(drafts == target_argmax[:-1], dim=0).sum())
        bonus = int(target_argmax[accepted])

    # commit: the target cache keeps anchor..d_accepted; the drafter gets those rows' features
    draft_list = drafts.tolist()
    committed = tuple(draft_list[:accepted]) + (bonus,)
    _crop(state.target_cache, anchor_pos + accepted + 1)
    state.context_feature = drafter.extract_context_feature(out.hidden_states)[:, : accepted + 1]
    state.tokens.extend(committed)
    return RoundResult(anchor_pos, tuple(draft_list), accepted, committed)


def _rejection_sample(
    drafts: torch.Tensor, q: torch.Tensor, p: torch.Tensor, generator: torch.Generator | None
) -> tuple[int, int]:
    """Speculative sampling: keeps the target's distribution exactly (Leviathan et al., 2023)."""
    gamma = drafts.shape[0]
    idx = torch.arange(gamma, device=drafts.device)
    # accept d_j with probability min(1, p(d_j) / q(d_j))
    ratio = p[idx, drafts] / q[idx, drafts]
    u = torch.rand(gamma, device=drafts.device, generator=generator)
    rejected = (u > ratio).nonzero()
    if rejected.numel() == 0:
        return gamma, int(_sample(p[gamma], generator))
    j = int(rejected[0, 0])
    # on rejection, resample from the part of p that q under-covers: max(p - q, 0), renormalised
    residual = (p[j] - q[j]).clamp_min(0)
    return j, int(_sample(residual / residual.sum(), generator))


@torch.inference_mode()
def speculative_generate(
    target: PreTrainedModel,
    drafter: DFlashDraftModel,
    prompt: list[int],
    harvest: DsparkHarvest,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
    telemetry: AcceptTelemetry | None = None,
) -> Generation:
    """Speculative decoding of ``max_new_tokens`` tokens after ``prompt`` (token ids).

    Each round is recorded in ``telemetry`` (a quiet one of its own when none is given), as the served
    plugin records it; pass one telemetry to several calls to aggregate over prompts.
    """
    _check_max_new_tokens(max_new_tokens)
    geometry = RoundGeometry(harvest, drafter.block_size)
    if telemetry is None:
        telemetry = AcceptTelemetry(geometry.gamma, harvest, "engine", settings=QUIET)
    start = time.perf_counter()
    state = prefill(target, drafter, prompt, temperature=temperature, generator=generator)
    gen = Generation(prompt_len=len(prompt), tokens=[], seconds=0.0, telemetry=telemetry)
    while len(state.tokens) - len(prompt) < max_new_tokens:
        result = speculative_round(
            target, drafter, geometry, state, temperature=temperature, generator=generator
        )
        gen.rounds.append(result)
        telemetry.on_verify_complete([result.accepted])
    gen.tokens = state.tokens[len(prompt) : len(prompt) + max_new_tokens]
    gen.seconds = time.perf_counter() - start
    return gen


@torch.inference_mode()
def autoregressive_generate(
    target: PreTrainedModel,
    prompt: list[int],
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    generator: torch.Generator | None = None,
) -> Generation:
    """Plain decoding with the same target: one forward per token (the baseline and the oracle)."""
    _check_max_new_tokens(max_new_tokens)
    start = time.perf_counter()
    device = _device(target)
    cache = _new_cache(target)
    next_input = torch.tensor([prompt], device=device)
    tokens: list[int] = []
    while len(tokens) < max_new_tokens:
        token = _next_token(_forward(target, next_input, cache).logits[0, -1], temperature, generator).view(
            1, 1
        )
        tokens.append(int(token))
        next_input = token
    return Generation(prompt_len=len(prompt), tokens=tokens, seconds=time.perf_counter() - start)


def _check_max_new_tokens(n: int) -> None:
    from ..errors import InvalidCheckpointError

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidCheckpointError(
            f"max_new_tokens must be a positive integer, got {n!r}; pass a count >= 1, e.g. 64.",
            where="max_new_tokens",
        )


__all__ = [
    "DecodeState",
    "RoundResult",
    "Generation",
    "prefill",
    "speculative_round",
    "speculative_generate",
    "autoregressive_generate",
]
