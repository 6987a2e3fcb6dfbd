"""Exactness that holds in reduced precision: a near-tie flip told apart from a real error.

At temperature 0 a speculative output must be the target's own greedy output. In float32 the several-row
verify and the one-row decoding step agree to the last token; in bfloat16 or float16 they round
differently, and where the target's two best logits are closer than that rounding can separate, the two
paths may pick different tokens. From that point on the two outputs are different texts. So the check
judges every token of a speculative output against the target's greedy choice FROM THAT OUTPUT'S OWN
PREFIX, and classifies each point where the two differ:

- ``expected``: at the first point where the output leaves the target's own greedy decoding, the
  decoding's token; after it, the target's argmax for the output's own prefix, in the run's dtype (one
  teacher-forced forward over prompt + output).
- ``margin``: the float32 logit of ``expected`` minus that of the committed token, recomputed from the same
  prefix with the target's weights upcast to float32 (exact in float32: every bfloat16 and float16 value
  is a float32 value). A verify or harvest bug commits a token the target clearly does not pick: a margin
  of whole logits. A near-tie is a margin of rounding size.
- ``tolerance``: what the run's dtype can separate at that position, measured there rather than assumed:
  ``2 * E + FLOOR_ULPS * eps(dtype) * max|logit|``, with ``E`` the largest difference between the run
  dtype's logits and the float32 logits over the whole vocabulary at that position (each path's logits
  lie about ``E`` from float32, so two of them can swap a pair of tokens whose float32 logits are up to
  ``2 E`` apart), plus a few ulps of the largest logit for what one sample of ``E`` under-reads. In float32
  ``E`` is 0 and the tolerance is those few ulps alone.

A point whose ``|margin| <= tolerance`` is a near-tie flip: reported with its position, never failing the
gate. Any other point is an error: exit 1 (``not-exact``). A measured bound rather than a bound by epsilon
alone: the error a dtype leaves in a logit grows with the model's depth and width, so a fixed multiple of
epsilon would either excuse real errors in a small model or flag near-ties in a deep one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .records import Departure

if TYPE_CHECKING:
    import torch

FLOOR_ULPS = 4
"""Ulps of the position's largest float32 logit added to the measured rounding ``2 E`` (see above)."""


@dataclass
class Output:
    """One speculative output to judge: its prompt, its tokens and the target's own greedy tokens."""

    prompt_index: int
    prompt: list[int]
    tokens: list[int]
    reference: list[int]
    departures: tuple[Departure, ...] = ()


@dataclass
class _Point:
    output: Output
    position: int
    expected: int
    run_logits: torch.Tensor  # the run dtype's logits at this position, as float32 on the CPU


def _device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _logits(target: Any, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Row j: the target's logits for new token j given prompt + tokens[:j] (one teacher-forced forward)."""
    import torch

    ids = torch.tensor([prompt + tokens[:-1]], device=_device(target))
    with torch.inference_mode():
        out = target(ids, use_cache=False)
    return out.logits[0, len(prompt) - 1 :].float()


def _points(target: Any, output: Output) -> list[_Point]:
    """The positions where ``output`` leaves the target's greedy choice, in the run's dtype (outputs of
    different lengths, a server's stopped at an end token, are compared over the common part first)."""
    pairs = zip(output.tokens, output.reference, strict=False)
    common = min(len(output.tokens), len(output.reference))
    first = next((j for j, (a, b) in enumerate(pairs) if a != b), common)
    if first >= len(output.tokens):  # a prefix of the reference: nothing it committed departed
        return []
    logits = _logits(target, output.prompt, output.tokens)
    greedy = logits.argmax(-1).tolist()
    points = [_Point(output, first, output.reference[first], logits[first].cpu())] if first < common else []
    points += [
        _Point(output, j, greedy[j], logits[j].cpu())
        for j in range(first + 1 if first < common else first, len(output.tokens))
        if greedy[j] != output.tokens[j]
    ]
    return points


def _judge(point: _Point, float32_logits: torch.Tensor, eps: float) -> Departure:
    row = float32_logits.cpu()
    token = point.output.tokens[point.position]
    margin = float(row[point.expected] - row[token])
    rounding = float((point.run_logits - row).abs().max())
    tolerance = 2 * rounding + FLOOR_ULPS * eps * float(row.abs().max())
    return Departure(
        prompt=point.output.prompt_index,
        position=point.position,
        token=token,
        expected=point.expected,
        margin=margin,
        tolerance=tolerance,
        near_tie=abs(margin) <= tolerance,
    )


def judge(target: Any, outputs: Sequence[Output]) -> None:
    """Fill each output's ``departures`` (only outputs that differ from their reference need judging).

    Upcasts the target to float32 in place for the recomputation, then restores its dtype (the round
    trip is exact): the float32 pass needs the target's float32 size in memory, once.
    """
    import torch

    differing = [o for o in outputs if o.tokens != o.reference]
    if not differing:
        return
    dtype = next(target.parameters()).dtype
    points = [p for o in differing for p in _points(target, o)]
    if dtype != torch.float32:
        target.to(torch.float32)
    try:
        eps = torch.finfo(dtype).eps
        by_output: dict[int, list[Departure]] = {}
        for o in differing:
            mine = [p for p in points if p.output is o]
            rows = _logits(target, o.prompt, o.tokens)
            by_output[id(o)] = [_judge(p, rows[p.position], eps) for p in mine]
    finally:
        target.to(dtype)
    for o in differing:
        o.departures = tuple(by_output[id(o)])


def judge_outputs(
    target: Any, prompts: Sequence[list[int]], outputs: Sequence[list[int]], references: Sequence[list[int]]
) -> list[Departure]:
    """Every departure of ``outputs`` (one per prompt, e.g. a server's) from ``references`` (the same
    prompts decoded without speculation), by the rule above; ``[]`` when every output is identical."""
    judged = [
        Output(i, list(p), list(o), list(r))
        for i, (p, o, r) in enumerate(zip(prompts, outputs, references, strict=True))
    ]
    judge(target, judged)
    return [d for o in judged for d in o.departures]


__all__ = ["FLOOR_ULPS", "Output", "judge", "judge_outputs"]
