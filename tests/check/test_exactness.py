"""Exactness in reduced precision: near-tie flips reported, real errors (a planted verify bug) failed."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from sglang_dspark_plugin.check.exactness import FLOOR_ULPS, Output, _judge, _Point
from sglang_dspark_plugin.check.report import Departure
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.engine import spec_decode

QUICK = ["--max-new-tokens", "16", "--num-prompts", "2", "--no-progress"]


def _point(run_logits: list[float], expected: int, token: int) -> _Point:
    output = Output(0, [1], [token], [expected])
    return _Point(output, 0, expected, torch.tensor(run_logits))


def test_a_margin_within_the_measured_rounding_is_a_near_tie() -> None:
    # float32: token 1 trails token 0 by 0.05; the run's dtype was 0.1 off on token 2: tolerance >= 0.2
    departure = _judge(_point([5.0, 5.0, 1.1], 0, 1), torch.tensor([5.0, 4.95, 1.0]), eps=2**-7)
    assert departure.near_tie and departure.margin == pytest.approx(0.05, rel=1e-4)
    assert departure.tolerance == pytest.approx(2 * 0.1 + FLOOR_ULPS * 2**-7 * 5.0, rel=1e-4)


def test_a_clear_margin_is_an_error_whatever_the_dtype() -> None:
    departure = _judge(_point([5.0, 3.0, 1.0], 0, 1), torch.tensor([5.0, 3.0, 1.0]), eps=2**-7)
    assert not departure.near_tie and departure.margin == pytest.approx(2.0, rel=1e-4)
    # float32: no measured rounding, a few ulps of the largest logit
    tight = _judge(_point([5.0, 4.999, 1.0], 0, 1), torch.tensor([5.0, 4.999, 1.0]), eps=2**-23)
    assert not tight.near_tie and tight.tolerance == pytest.approx(FLOOR_ULPS * 2**-23 * 5.0)


def _check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = main(["check", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def test_bfloat16_flips_are_near_ties_and_the_gate_holds(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedded models in bfloat16 on CPU: outputs flip at near-ties, the verdict is serve-as-is."""
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    code = main(["check", "--dtype", "bfloat16", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "verdict: serve-as-is (exit code 0)" in out
    assert "NOT EXACT" not in out
    counted = [line for line in out.splitlines() if line.startswith("near-tie flips: ")]
    assert len(counted) == 1, out
    flips = int(counted[0].split()[2])
    assert flips >= 1  # bfloat16 flips on this machine: what the rule must excuse
    assert out.count(" <= tolerance ") == flips and " > tolerance " not in out


class _AcceptsOneWrongDraft:
    """torch, but a verify whose accepted prefix runs one draft past the first disagreement."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def cumprod(agree: torch.Tensor, dim: int) -> torch.Tensor:
        shifted = torch.cat([torch.ones_like(agree[:1]), agree[:-1]])
        return torch.cumprod(shifted, dim=dim)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_planted_verify_bug_fails_the_gate(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, dtype: str
) -> None:
    monkeypatch.setattr(spec_decode, "torch", _AcceptsOneWrongDraft())
    code, report = _check(capsys, "--dtype", dtype, *QUICK)
    assert code == 1 and report["verdict"] == "not-exact"
    errors = [Departure(**d) for r in report["runs"] for d in r["departures"] if not d["near_tie"]]
    assert errors and all(abs(d.margin) > d.tolerance for d in errors)
    # an error is a token the target does not pick for that prefix
    assert all(d.token != d.expected for d in errors)


def test_float32_runs_have_no_departure(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = _check(capsys, *QUICK)
    assert report["settings"]["dtype"] == "float32"
    assert all(r["exact_match"] and r["departures"] == [] for r in report["runs"])
    assert code != 1


def test_outputs_of_other_lengths_are_judged_over_what_they_committed() -> None:
    """A server's output may stop at an end token: a prefix of the reference has no departure, tokens past
    the reference are judged against the target's greedy choice for their own prefix."""
    from sglang_dspark_plugin.check.exactness import judge_outputs
    from sglang_dspark_plugin.check.target import encode_prompts, load_target_model
    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import autoregressive_generate

    target, tokenizer = load_target_model(EMBEDDED.target, torch.device("cpu"), torch.float32)
    (prompt,) = encode_prompts(tokenizer, [EMBEDDED.prompts[0]])
    greedy = autoregressive_generate(target, prompt, 12).tokens
    assert judge_outputs(target, [prompt], [greedy[:6]], [greedy]) == []
    assert judge_outputs(target, [prompt], [greedy], [greedy[:6]]) == []  # greedy past the reference
    wrong = greedy[:8] + [(greedy[8] + 1) % target.config.vocab_size]
    (found,) = judge_outputs(target, [prompt], [wrong], [greedy[:6]])
    assert (found.position, found.expected, found.near_tie) == (8, greedy[8], False)
