"""The reference engine: one round by hand, the lossless property, cache consistency, the offset probe."""

from __future__ import annotations

import pytest
import torch
from tiny_target import tiny_target
from transformers import Qwen3ForCausalLM

from sglang_dspark_plugin.engine import (
    autoregressive_generate,
    offset_probe,
    prefill,
    speculative_generate,
    speculative_round,
)
from sglang_dspark_plugin.engine.drafter import DFlashDraftModel, new_draft_model
from sglang_dspark_plugin.engine.spec_decode import _rejection_sample
from sglang_dspark_plugin.errors import InvalidCheckpointError
from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.offsets import (
    ALIGNED,
    EARLY,
    INCONCLUSIVE,
    LATE,
    ProbeCounts,
    ProbeRound,
    probe_counts,
    verdict,
)
from sglang_dspark_plugin.telemetry import AcceptTelemetry, TelemetrySettings

torch.set_num_threads(1)  # tiny models: extra threads only add synchronisation

V, H, B, MASK = 48, 64, 4, 47
PROMPTS = ([3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 7], list(range(10, 40)))
DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK


def drafter_config(block_size: int = B, layer_ids: tuple[int, ...] = (1, 2)) -> dict:
    return {
        "architectures": ["DFlashDraftModel"],
        "hidden_size": H,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": V,
        "block_size": block_size,
        "num_target_layers": 4,
        "dflash_config": {"mask_token_id": MASK, "target_layer_ids": list(layer_ids)},
    }


class ScriptedDrafter(DFlashDraftModel):
    """A real drafter (its cache grows exactly as usual) whose output rows are replaced by a script.

    Row k of the block anchored at p outputs the hidden vector whose logits' argmax is
    ``script(p, k)``, so a test knows which token every row drafts.
    """

    def __init__(self, lm_head: torch.Tensor, script, block_size: int = B) -> None:
        base = new_draft_model(drafter_config(block_size))
        super().__init__(
            base.config,
            block_size=base.block_size,
            mask_token_id=base.mask_token_id,
            target_layer_ids=base.target_layer_ids,
        )
        self.lm_head_rows, self.script = lm_head, script

    def forward(self, noise_embedding, target_hidden, position_ids, cache=None):
        super().forward(noise_embedding, target_hidden, position_ids, cache)
        p = int(position_ids[0, target_hidden.shape[1]])
        rows = [self.script(p, k) for k in range(noise_embedding.shape[1])]
        return self.lm_head_rows[rows].unsqueeze(0)


def greedy(target, prompt, n) -> list[int]:
    return autoregressive_generate(target, prompt, n).tokens


def oracle(seq: list[int], shift: int, corrupt_every: int = 0):
    """Row k of the block at p drafts seq[p + k + shift]; every corrupt_every-th row is wrong."""

    def script(p: int, k: int) -> int:
        pos = p + k + shift
        token = seq[pos] if pos < len(seq) else 0
        if corrupt_every and (p + k) % corrupt_every == 0:
            token = (token + 1) % V
        return token

    return script


@pytest.fixture(scope="module")
def target() -> Qwen3ForCausalLM:
    return tiny_target()


# -- the autoregressive oracle -------------------------------------------------------------------


def test_autoregressive_matches_transformers_generate(target) -> None:
    for prompt in PROMPTS[:2]:
        ids = torch.tensor([prompt])
        ref = target.generate(
            ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, min_new_tokens=12, do_sample=False
        )
        assert greedy(target, prompt, 12) == ref[0, len(prompt) :].tolist()


# -- one round, by hand --------------------------------------------------------------------------


def _one_round(target, harvest, script):
    prompt = PROMPTS[0]
    drafter = ScriptedDrafter(target.lm_head.weight.detach(), script)
    state = prefill(target, drafter, prompt)
    result = speculative_round(target, drafter, RoundGeometry(harvest, drafter.block_size), state)
    return prompt, state, result


def test_round_by_hand_dspark_rows_under_both_harvests(target) -> None:
    prompt = PROMPTS[0]
    seq = prompt + greedy(target, prompt, 8)
    p = len(prompt)  # the first anchor: the target's first greedy token, at position len(prompt)
    g = seq[p:]  # g[0] is the anchor, g[j] the target's token at p+j
    # Rows trained the DSpark way: row k -> token at p+k+1, so rows = [g1, g2, g3, g4].
    shifted = oracle(seq, shift=1)

    # DSPARK harvest: rows 0..3 are drafts 1..4, all right; the bonus is the target's g5.
    _, state, r = _one_round(target, DSPARK, shifted)
    assert r.anchor_pos == p and r.drafts == tuple(g[1:5])
    assert (r.accepted, r.committed, r.accept_length) == (4, tuple(g[1:6]), 5)
    assert state.tokens == seq[: p + 6]

    # DFLASH harvest of the same rows: drafts = rows 1..3 = [g2, g3, g4] at positions p+1..p+3,
    # each one position late; d1 = g2 != g1 is rejected and the target's g1 is the bonus.
    assert g[1] != g[2], "the hand example needs two different first tokens"
    _, state, r = _one_round(target, DFLASH, shifted)
    assert r.drafts == tuple(g[2:5])
    assert (r.accepted, r.committed, r.accept_length) == (0, (g[1],), 1)
    assert state.tokens == seq[: p + 2]


def test_round_by_hand_rejection_commits_the_target_token(target) -> None:
    prompt = PROMPTS[0]
    seq = prompt + greedy(target, prompt, 8)
    p, g = len(prompt), seq[len(prompt) :]
    wrong = (g[3] + 1) % V

    def script(pos: int, k: int) -> int:  # mask-fill rows [x, g1, g2, wrong]: row k -> p+k
        return wrong if k == 3 else seq[pos + k]

    _, state, r = _one_round(target, DFLASH, script)
    assert r.drafts == (g[1], g[2], wrong)
    # d1, d2 accepted; d3 rejected, replaced by the target's own g3: three tokens for one forward.
    assert (r.accepted, r.committed) == (2, (g[1], g[2], g[3]))
    # Both caches stay consistent: the target holds anchor..d2, the drafter gets those 3 rows next.
    assert state.target_cache.get_seq_length() == p + 3 == len(state.tokens) - 1
    assert state.context_feature.shape[1] == 3
    assert state.draft_cache.length == p


def test_round_runs_one_target_forward_and_one_drafter_forward(target) -> None:
    drafter = new_draft_model(drafter_config(), seed=1).eval()
    state = prefill(target, drafter, PROMPTS[0])
    calls = {"target": 0, "drafter": 0}
    hooks = [
        target.register_forward_hook(lambda *_: calls.__setitem__("target", calls["target"] + 1)),
        drafter.register_forward_hook(lambda *_: calls.__setitem__("drafter", calls["drafter"] + 1)),
    ]
    try:
        speculative_round(target, drafter, RoundGeometry(DSPARK, drafter.block_size), state)
    finally:
        for h in hooks:
            h.remove()
    assert calls == {"target": 1, "drafter": 1}


# -- lossless ------------------------------------------------------------------------------------


def _drafters(target, seq):
    rows = target.lm_head.weight.detach()
    yield "random-1", new_draft_model(drafter_config(), seed=1).eval()
    yield "random-2", new_draft_model(drafter_config(5, (0, 3)), seed=2).eval()
    yield "mask-fill oracle", ScriptedDrafter(rows, oracle(seq, 0, corrupt_every=5))
    yield "shifted oracle", ScriptedDrafter(rows, oracle(seq, 1, corrupt_every=4))


@pytest.mark.parametrize("prompt", PROMPTS)
def test_lossless_for_every_drafter_and_harvest(target, prompt) -> None:
    n = 20
    ref = greedy(target, prompt, n)
    accepted_any = 0
    for name, drafter in _drafters(target, prompt + ref):
        for harvest in DsparkHarvest:
            gen = speculative_generate(target, drafter, prompt, harvest, n)
            assert gen.tokens == ref, (name, harvest)
            assert 1 + sum(r.accept_length for r in gen.rounds) >= n  # prefill gives the first token
            accepted_any += sum(r.accepted for r in gen.rounds)
    assert accepted_any > 0  # the oracles make multi-token rounds happen, so cropping is exercised


def test_caches_stay_consistent_and_drafts_match_a_from_scratch_draft(target) -> None:
    drafter = new_draft_model(drafter_config(), seed=3).eval()
    prompt = PROMPTS[2]
    seq = prompt + greedy(target, prompt, 24)
    # swap in oracle rows after the real forward so rounds accept several tokens
    scripted = ScriptedDrafter(target.lm_head.weight.detach(), oracle(seq, 1, corrupt_every=3))
    scripted.load_state_dict(drafter.state_dict())
    state = prefill(target, scripted, prompt)
    for _ in range(6):
        speculative_round(target, scripted, RoundGeometry(DSPARK, scripted.block_size), state)
        committed_before_anchor = len(state.tokens) - 1
        assert state.target_cache.get_seq_length() == committed_before_anchor
        assert state.draft_cache.length + state.context_feature.shape[1] == committed_before_anchor
        assert state.tokens == seq[: len(state.tokens)]
    # The incrementally cached drafter sees exactly what a from-scratch pass over the committed
    # prefix gives it: same context K/V, hence the same block output.
    p = len(state.tokens) - 1
    block = torch.full((1, B), MASK)
    block[0, 0] = state.tokens[-1]
    noise = target.get_input_embeddings()(block)
    with torch.inference_mode():
        incremental = drafter(
            noise,
            state.context_feature,
            torch.arange(p - state.context_feature.shape[1], p + B)[None],
            cache=state.draft_cache,
        )
        full = target(torch.tensor([state.tokens[:-1]]), output_hidden_states=True).hidden_states
        scratch = drafter(noise, drafter.extract_context_feature(full), torch.arange(0, p + B)[None])
    torch.testing.assert_close(incremental, scratch, rtol=1e-4, atol=1e-4)


def test_telemetry_records_each_round(target) -> None:
    prompt = PROMPTS[0]
    seq = prompt + greedy(target, prompt, 30)
    drafter = ScriptedDrafter(target.lm_head.weight.detach(), oracle(seq, 1, corrupt_every=4))
    settings = TelemetrySettings(accept_log_level=None, summary_every=0, alarm_threshold=0)
    tel = AcceptTelemetry(DSPARK.n_drafts(B), DSPARK, "census", settings=settings)
    gen = speculative_generate(target, drafter, prompt, DSPARK, 30, telemetry=tel)
    assert tel.counts.rounds == tel.counts.request_rounds == len(gen.rounds)  # one request, every round
    assert tel.counts.accepted_drafts == sum(r.accepted for r in gen.rounds)
    assert tel.counts.mean_accept_length() == pytest.approx(sum(gen.accept_lengths) / len(gen.rounds))
    assert tel.counts.mean_accept_length() > 1.5
    # without a telemetry of its own, a generation still records its rounds
    alone = speculative_generate(target, drafter, prompt, DSPARK, 30)
    assert alone.telemetry is not None and alone.telemetry.counts.rounds == len(alone.rounds)
    assert alone.telemetry.counts.mean_accept_length() == pytest.approx(tel.counts.mean_accept_length())
    # sglang's meta_info figure: the budget-capped tokens over verify rounds, never above the
    # uncapped headline (the last round may commit more than the budget keeps)
    assert gen.sglang_meta_accept_length == pytest.approx(30 / len(gen.rounds))
    assert gen.sglang_meta_accept_length <= sum(gen.accept_lengths) / len(gen.rounds) + 1 / len(gen.rounds)


def test_max_new_tokens_is_validated(target) -> None:
    with pytest.raises(InvalidCheckpointError, match="max_new_tokens"):
        autoregressive_generate(target, PROMPTS[0], 0)


# -- temperature > 0 -----------------------------------------------------------------------------


def test_rejection_sampling_keeps_the_target_distribution() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    q = torch.tensor([[0.1, 0.6, 0.3]])
    n, counts = 10000, torch.zeros(3)
    for _ in range(n):
        draft = torch.multinomial(q[0], 1, generator=gen)
        accepted, bonus = _rejection_sample(draft, q, p, gen)
        counts[int(draft) if accepted == 1 else bonus] += 1
    torch.testing.assert_close(counts / n, p[0], atol=0.02, rtol=0)  # 4 standard deviations


def test_sampled_generation_runs_and_is_seeded(target) -> None:
    drafter = new_draft_model(drafter_config(), seed=1).eval()

    def run() -> list[int]:
        g = torch.Generator().manual_seed(7)
        return speculative_generate(
            target, drafter, PROMPTS[0], DFLASH, 12, temperature=0.8, generator=g
        ).tokens

    first = run()
    assert len(first) == 12 and first == run()


# -- the offset probe ----------------------------------------------------------------------------


def _rounds_with_offset(seq: list[int], offset: int, gamma: int = 4) -> list[ProbeRound]:
    # drafts placed at p+1..p+gamma whose tokens are those at p+1+offset..p+gamma+offset
    return [
        ProbeRound(p, tuple(seq[p + j + offset] for j in range(1, gamma + 1)))
        for p in range(2, len(seq) - gamma - 2, gamma)
    ]


SEQ = [(7 * i * i + 3 * i) % 101 for i in range(80)]  # no token repeats at neighbouring positions


def test_probe_verdicts_on_synthetic_rounds() -> None:
    assert offset_probe(_rounds_with_offset(SEQ, 0), SEQ, DSPARK).verdict == ALIGNED
    assert offset_probe(_rounds_with_offset(SEQ, 1), SEQ, DFLASH).verdict == LATE
    assert offset_probe(_rounds_with_offset(SEQ, -1), SEQ, DSPARK).verdict == EARLY
    # the same offsets under the other harvest fit neither convention, and say so
    assert "neither" in offset_probe(_rounds_with_offset(SEQ, 1), SEQ, DSPARK).verdict
    assert "neither" in offset_probe(_rounds_with_offset(SEQ, -1), SEQ, DFLASH).verdict


def test_probe_counts_by_hand() -> None:
    seq = [10, 11, 12, 13, 14, 15]
    # anchor at 1: drafts placed at 2, 3, 4; they are the tokens at 3, 3, 99
    counts = probe_counts([ProbeRound(1, (13, 13, 99))], seq)
    assert counts == ProbeCounts(own=1, late=1, early=0, compared_own=3, compared_late=3, compared_early=3)
    # past the end of the sequence nothing is compared
    assert probe_counts([ProbeRound(4, (15, 0))], seq).compared_own == 1
    total = counts + counts
    assert (total.own, total.compared_early) == (2, 6)


def test_probe_is_inconclusive_without_evidence() -> None:
    few = verdict(ProbeCounts(own=1, late=3, early=0, compared_own=40, compared_late=40, compared_early=40))
    assert few.verdict == INCONCLUSIVE and "too few matches" in few.reason
    close = verdict(
        ProbeCounts(own=20, late=24, early=0, compared_own=40, compared_late=40, compared_early=40)
    )
    assert close.verdict == INCONCLUSIVE and "stands out" in close.reason
    assert verdict(ProbeCounts(own=10, late=30, compared_own=40, compared_late=40)).verdict == LATE


def test_probe_names_the_engine_misalignment(target) -> None:
    prompt = PROMPTS[2]
    seq = prompt + greedy(target, prompt, 40)
    rows = target.lm_head.weight.detach()
    shifted = ScriptedDrafter(rows, oracle(seq, 1))
    mask_fill = ScriptedDrafter(rows, oracle(seq, 0))
    cases = [
        (shifted, DSPARK, ALIGNED),
        (shifted, DFLASH, LATE),
        (mask_fill, DFLASH, ALIGNED),
        (mask_fill, DSPARK, EARLY),
    ]
    for drafter, harvest, expected in cases:
        gen = speculative_generate(target, drafter, prompt, harvest, 40)
        assert offset_probe(gen.probe_rounds, prompt + gen.tokens, harvest).verdict == expected


# -- the trained embedded drafters ---------------------------------------------------------------


@pytest.fixture(scope="module")
def embedded():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import load_drafter

    target = AutoModelForCausalLM.from_pretrained(EMBEDDED.target, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED.target)
    prompts = [tokenizer(text)["input_ids"] for text in EMBEDDED.prompts[:2]]
    return target, prompts, {name: load_drafter(p) for name, p in EMBEDDED.drafters.items()}


def test_lossless_with_the_trained_drafters_and_the_postmortem_in_miniature(embedded) -> None:
    target, prompts, drafters = embedded
    accepted: dict[tuple[str, str], list[int]] = {}
    probes: dict[tuple[str, str], ProbeCounts] = {}
    for prompt in prompts:
        ref = greedy(target, prompt, 32)
        for name, drafter in drafters.items():
            for harvest in DsparkHarvest:
                gen = speculative_generate(target, drafter, prompt, harvest, 32)
                assert gen.tokens == ref, (name, harvest)
                key = (name, harvest.name())
                accepted.setdefault(key, []).extend(gen.accept_lengths)
                probes[key] = probes.get(key, ProbeCounts()) + probe_counts(gen.probe_rounds, prompt + ref)

    def mean(xs: list[int]) -> float:
        return sum(xs) / len(xs)

    from sglang_dspark_plugin.embedded import EMBEDDED

    # every drafter (keyed by name) accepts more under the harvest of its own training strategy, and
    # the probe finds the matched run aligned
    assert set(drafters) == {"dflash", "dspark", "dspark-markov", "dspark-maskfill"}
    for name in drafters:
        matched = DsparkHarvest.from_name(EMBEDDED.strategy(name))
        other = DFLASH if matched is DSPARK else DSPARK
        assert mean(accepted[(name, matched.name())]) > mean(accepted[(name, other.name())]), name
        assert verdict(probes[(name, matched.name())], matched).verdict == ALIGNED, name
    # and the probe names the misalignment of the mismatched runs of the drafters without a Markov
    # head (a Markov head conditions each draft on the one before, which pulls the drafts back into
    # place under the wrong harvest: that drafter's mismatched probe is not asserted)
    assert verdict(probes[("dspark", "dflash")], DFLASH).verdict == LATE
    assert verdict(probes[("dflash", "dspark")], DSPARK).verdict == EARLY
