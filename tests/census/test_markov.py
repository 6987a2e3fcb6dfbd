"""DSpark Markov and confidence heads in the reference engine: sglang's drafting, losslessness, sampling.

Every drafter here carries a random, non-zero Markov head scaled so that its bias changes drafts. The
expected drafts are computed by the formulas of sglang's ``models/dspark.py`` written out from the
weights, independently of ``engine/markov.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
from checkpoints import FIXTURES, write_checkpoint
from safetensors.torch import save_file
from tiny_target import tiny_target
from transformers import Qwen3ForCausalLM

from sglang_dspark_plugin.engine import (
    autoregressive_generate,
    prefill,
    spec_decode,
    speculative_generate,
    speculative_round,
)
from sglang_dspark_plugin.engine.drafter import DFlashDraftModel, load_drafter, new_draft_model
from sglang_dspark_plugin.engine.markov import MARKOV_HEAD_TYPES, VanillaMarkov, draft_block
from sglang_dspark_plugin.errors import InvalidCheckpointError, UnsupportedCheckpointError
from sglang_dspark_plugin.geometry import RoundGeometry
from sglang_dspark_plugin.harvest import DsparkHarvest

torch.set_num_threads(1)

V, H, B, MASK, RANK = 48, 64, 5, 47, 8
PROMPTS = ([3, 1, 4, 1, 5, 9, 2, 6], list(range(10, 30)))
DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK


def markov_config(head_type: str, *, block_size: int = B, vocab: int = V, rank: int = RANK) -> dict:
    """A drafter config in SpecForge's sglang-normalised spelling (Markov keys at the top level)."""
    return {
        "architectures": ["Qwen3DSparkModel"],
        "model_type": "qwen3",
        "hidden_size": H,
        "intermediate_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "block_size": block_size,
        "num_target_layers": 4,
        "markov_rank": rank,
        "markov_head_type": head_type,
        "enable_confidence_head": True,
        "confidence_head_with_markov": True,
        "dflash_config": {
            "mask_token_id": vocab - 1,
            "target_layer_ids": [1, 2],
            "projector_type": "dspark",
            "markov_rank": rank,
            "markov_head_type": head_type,
        },
    }


def _strengthen(head: VanillaMarkov, seed: int, scale: float) -> None:
    """Random non-zero head weights, the bias about as large as the base logits' spread."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in head.named_parameters():
            std = 1.0 if name.startswith("markov_w") else 0.3
            p.copy_(std * torch.randn(p.shape, generator=g))
        head.markov_w2.weight.mul_(scale)


def markov_drafter(head_type: str, seed: int = 1, *, scale: float = 2.0, **kw) -> DFlashDraftModel:
    drafter = new_draft_model(markov_config(head_type, **kw), seed=seed).eval()
    _strengthen(drafter.markov_head, seed, scale)
    return drafter


class ScriptedMarkovDrafter(DFlashDraftModel):
    """A Markov drafter whose base rows are replaced by a script (row k of the block at p aims at
    ``script(p, k)`` with logit margin 16); its Markov head then biases those rows as usual."""

    def __init__(self, head_type: str, lm_head: torch.Tensor, script, scale: float) -> None:
        base = new_draft_model(markov_config(head_type))
        super().__init__(
            base.config,
            block_size=base.block_size,
            mask_token_id=base.mask_token_id,
            target_layer_ids=base.target_layer_ids,
        )
        _strengthen(self.markov_head, 5, scale)
        self.lm_head_rows, self.script = lm_head, script

    def forward(self, noise_embedding, target_hidden, position_ids, cache=None):
        super().forward(noise_embedding, target_hidden, position_ids, cache)
        p = int(position_ids[0, target_hidden.shape[1]])
        return self.lm_head_rows[[self.script(p, k) for k in range(noise_embedding.shape[1])]].unsqueeze(0)


@pytest.fixture(scope="module")
def target() -> Qwen3ForCausalLM:
    return tiny_target()


def greedy(target, prompt, n) -> list[int]:
    return autoregressive_generate(target, prompt, n).tokens


# -- sglang's formulas, written out --------------------------------------------------------------


def reference_bias(head: VanillaMarkov, prev: int, row: torch.Tensor, state):
    """sglang ``models/dspark.py``: VanillaMarkov / GatedMarkovHead / RNNHead, one step, by hand."""
    sd = {k: v.detach() for k, v in head.state_dict().items()}
    e = sd["markov_w1.weight"][prev]
    w2 = sd["markov_w2.weight"]
    if head.head_type == "vanilla":
        return w2 @ e, state
    if head.head_type == "gated":
        gate = torch.sigmoid(sd["gate_proj.weight"] @ torch.cat([row, e]) + sd["gate_proj.bias"])
        return w2 @ (gate * e), state
    s = torch.zeros(head.markov_rank) if state is None else state
    out = sd["joint_proj.weight"] @ torch.cat([s, e, row]) + sd["joint_proj.bias"]
    a, c, o = out[:RANK], out[RANK : 2 * RANK], out[2 * RANK :]
    gate = torch.sigmoid(a)
    return w2 @ torch.tanh(o), gate * s + (1 - gate) * torch.tanh(c)


def reference_logits(head: VanillaMarkov, base: torch.Tensor, rows: torch.Tensor, prevs: list[int]):
    """Row j's logits ``base[j] + bias(prevs[j])``, the recurrence (rnn) running over the rows."""
    out, state = [], None
    for j, prev in enumerate(prevs):
        bias, state = reference_bias(head, prev, rows[j], state)
        out.append(base[j] + bias)
    return torch.stack(out)


def capture_rows(drafter: DFlashDraftModel) -> tuple[list[torch.Tensor], object]:
    seen: list[torch.Tensor] = []
    handle = drafter.register_forward_hook(lambda _m, _i, out: seen.append(out[0].detach().clone()))
    return seen, handle


# -- (b) drafts use the bias exactly as sglang does ----------------------------------------------


@pytest.mark.parametrize("harvest", list(DsparkHarvest))
@pytest.mark.parametrize("head_type", MARKOV_HEAD_TYPES)
def test_greedy_drafts_follow_sglangs_semi_autoregressive_formula(target, head_type, harvest) -> None:
    drafter = markov_drafter(head_type)
    lm_head = target.lm_head.weight.detach()
    first, gamma = harvest.first_row(), harvest.n_drafts(B)
    changed = 0
    for prompt in PROMPTS:
        state = prefill(target, drafter, prompt)
        for _ in range(4):
            anchor = state.tokens[-1]
            seen, handle = capture_rows(drafter)
            try:
                result = speculative_round(target, drafter, RoundGeometry(harvest, drafter.block_size), state)
            finally:
                handle.remove()
            rows = seen[0][first : first + gamma]
            base = rows @ lm_head.T
            # greedy chain: draft 1 conditioned on the anchor, draft j on draft j-1
            expected: list[int] = []
            for j in range(gamma):
                prevs = [anchor, *expected]
                logits = reference_logits(drafter.markov_head, base[: j + 1], rows[: j + 1], prevs)
                expected.append(int(logits[j].argmax()))
            assert list(result.drafts) == expected, (head_type, harvest)
            changed += sum(int(base[j].argmax()) != expected[j] for j in range(gamma))
    assert changed > 0  # the bias changed drafts: without it these rounds would have drafted otherwise


def test_a_drafter_without_a_markov_head_drafts_exactly_as_before(target) -> None:
    cfg = markov_config("vanilla")
    for key in ("markov_rank", "markov_head_type", "enable_confidence_head", "confidence_head_with_markov"):
        cfg.pop(key)
    cfg["dflash_config"].update(markov_rank=0)
    drafter = new_draft_model(cfg, seed=3).eval()
    assert drafter.markov_head is None and drafter.confidence_head is None
    lm_head = target.lm_head.weight.detach()
    for harvest in DsparkHarvest:
        first, gamma = harvest.first_row(), harvest.n_drafts(B)
        for temperature in (0.0, 0.7):
            state = prefill(target, drafter, PROMPTS[0])
            seen, handle = capture_rows(drafter)
            gen, replay = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
            try:
                result = speculative_round(
                    target,
                    drafter,
                    RoundGeometry(harvest, drafter.block_size),
                    state,
                    temperature=temperature,
                    generator=gen,
                )
            finally:
                handle.remove()
            logits = (seen[0][first : first + gamma] @ lm_head.T).float()
            if temperature:  # all rows in one multinomial call, the same generator draws as before
                q = torch.softmax(logits / temperature, -1)
                want = torch.multinomial(q, 1, generator=replay).squeeze(-1)
            else:
                want = logits.argmax(-1)
            assert list(result.drafts) == want.tolist()


# -- (a) lossless --------------------------------------------------------------------------------


@pytest.mark.parametrize("head_type", MARKOV_HEAD_TYPES)
def test_lossless_with_markov_heads_under_both_harvests(target, head_type) -> None:
    n = 20
    accepted = 0
    for prompt in PROMPTS:
        ref = greedy(target, prompt, n)
        seq = prompt + ref

        def shifted(p: int, k: int, seq=seq) -> int:  # row k -> the target's token at p+k+1
            return seq[p + k + 1] if p + k + 1 < len(seq) else 0

        drafters = [
            markov_drafter(head_type, seed=2),
            ScriptedMarkovDrafter(head_type, target.lm_head.weight.detach(), shifted, scale=0.5),
        ]
        for drafter in drafters:
            for harvest in DsparkHarvest:
                gen = speculative_generate(target, drafter, prompt, harvest, n)
                assert gen.tokens == ref, (head_type, harvest, type(drafter).__name__)
                accepted += sum(r.accepted for r in gen.rounds)
    assert accepted > 0  # multi-token rounds happened, so the caches were cropped after a Markov draft


# -- (c) temperature > 0: rejection sampling against the distribution actually sampled from -------


@pytest.mark.parametrize("harvest", list(DsparkHarvest))
@pytest.mark.parametrize("head_type", MARKOV_HEAD_TYPES)
def test_rejection_sampling_compares_with_the_biased_conditional_distribution(
    target,
    head_type,
    harvest,
    monkeypatch,
) -> None:
    drafter = markov_drafter(head_type, seed=4)
    temperature = 0.9
    captured = []
    original = spec_decode._rejection_sample

    def spy(drafts, q, p, generator):
        captured.append((drafts.clone(), q.clone()))
        return original(drafts, q, p, generator)

    monkeypatch.setattr(spec_decode, "_rejection_sample", spy)
    lm_head = target.lm_head.weight.detach()
    first, gamma = harvest.first_row(), harvest.n_drafts(B)
    state = prefill(target, drafter, PROMPTS[1])
    gen = torch.Generator().manual_seed(5)
    for _ in range(3):
        anchor = state.tokens[-1]
        seen, handle = capture_rows(drafter)
        try:
            speculative_round(
                target,
                drafter,
                RoundGeometry(harvest, drafter.block_size),
                state,
                temperature=temperature,
                generator=gen,
            )
        finally:
            handle.remove()
        drafts, q = captured.pop()
        rows = seen[0][first : first + gamma]
        base = rows @ lm_head.T
        # q_j = softmax((base_j + bias(previous SAMPLED draft)) / T), the anchor before draft 1
        prevs = [anchor, *drafts[:-1].tolist()]
        want = torch.softmax(reference_logits(drafter.markov_head, base, rows, prevs) / temperature, -1)
        torch.testing.assert_close(q, want, atol=1e-5, rtol=1e-4)
        unbiased = torch.softmax(base / temperature, -1)
        assert (q - unbiased).abs().sum(-1).min() > 0.1  # the bias moved every row's distribution


def _joint(head: VanillaMarkov, base: torch.Tensor, rows: torch.Tensor, anchor: int, t: float, bias: bool):
    """The exact joint distribution of a drafted block, enumerated over every token sequence."""
    probs = {}
    for seq in itertools.product(range(base.shape[1]), repeat=base.shape[0]):
        prevs = [anchor, *seq[:-1]]
        logits = reference_logits(head, base, rows, prevs) if bias else base
        dist = torch.softmax(logits / t, -1)
        probs[seq] = float(torch.prod(dist[torch.arange(len(seq)), torch.tensor(seq)]))
    return probs


@pytest.mark.parametrize("head_type", MARKOV_HEAD_TYPES)
def test_sampled_blocks_follow_the_markov_joint_distribution(head_type) -> None:
    vocab, gamma, t, n = 4, 3, 1.0, 12000
    head = new_draft_model(markov_config(head_type, vocab=vocab), seed=6).markov_head
    _strengthen(head, 6, 1.0)
    g = torch.Generator().manual_seed(7)
    base, rows, anchor = torch.randn(gamma, vocab, generator=g), torch.randn(gamma, H, generator=g), 2
    exact = _joint(head, base, rows, anchor, t, bias=True)
    counts = dict.fromkeys(exact, 0)
    with torch.no_grad():
        for _ in range(n):
            drafts, q = draft_block(head, base, rows, torch.tensor([anchor]), temperature=t, generator=g)
            counts[tuple(drafts.tolist())] += 1
    tv = 0.5 * sum(abs(counts[s] / n - p) for s, p in exact.items())
    assert tv < 0.04, tv  # sampling noise alone is about 0.02 here
    # the test can tell: the unbiased joint (rows sampled independently) is far from what was drawn
    wrong = _joint(head, base, rows, anchor, t, bias=False)
    assert 0.5 * sum(abs(counts[s] / n - p) for s, p in wrong.items()) > 0.15


def test_first_committed_token_keeps_the_target_distribution_at_temperature_one() -> None:
    """One round from the same state, many times: the first committed token is distributed as the
    target's own next-token distribution; rejection sampling against the UNbiased rows would not be."""
    vocab, temperature, n = 6, 1.0, 3000
    tgt = tiny_target(seed=1, vocab=vocab, layers=3)
    with torch.no_grad():
        tgt.lm_head.weight.mul_(0.5)  # a spread-out target distribution
    drafter = markov_drafter("vanilla", seed=8, scale=3.0, vocab=vocab)
    state = prefill(tgt, drafter, [1, 2, 3, 4])
    anchor, p0 = state.tokens[-1], len(state.tokens)
    saved = (state.context_feature, state.draft_cache.length)
    with torch.no_grad():
        logits = tgt(torch.tensor([state.tokens])).logits[0, -1].float()
    p = torch.softmax(logits / temperature, -1)
    counts = torch.zeros(vocab)
    seen, handle = capture_rows(drafter)
    gen = torch.Generator().manual_seed(9)
    try:
        for _ in range(n):
            result = speculative_round(
                tgt,
                drafter,
                RoundGeometry(DSPARK, drafter.block_size),
                state,
                temperature=temperature,
                generator=gen,
            )
            counts[result.committed[0]] += 1
            spec_decode._crop(state.target_cache, p0 - 1)  # back to the state before the round
            state.draft_cache.crop(saved[1])
            state.context_feature, state.tokens = saved[0], state.tokens[:p0]
    finally:
        handle.remove()
    tv = 0.5 * float((counts / n - p).abs().sum())
    assert tv < 0.035, tv
    # what a q that ignores the bias would give for the first token (Leviathan et al.'s formula)
    row0 = seen[0][0]
    base = row0 @ tgt.lm_head.weight.detach().T
    biased = reference_logits(drafter.markov_head, base[None], row0[None], [anchor])[0]
    q = torch.softmax(biased / temperature, -1)
    q_wrong = torch.softmax(base / temperature, -1)
    accept = torch.minimum(torch.ones(vocab), p / q_wrong)
    residual = (p - q_wrong).clamp_min(0)
    buggy = q * accept + (1 - (q * accept).sum()) * residual / residual.sum()
    assert 0.5 * float((buggy - p).abs().sum()) > 0.1  # so the test above would catch that mistake


# -- loading -------------------------------------------------------------------------------------


def _write(folder: Path, config: dict, state: dict[str, torch.Tensor]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("head_type", MARKOV_HEAD_TYPES)
def test_a_saved_markov_drafter_loads_and_drafts_the_same(tmp_path, target, head_type) -> None:
    drafter = markov_drafter(head_type, seed=10)
    loaded = load_drafter(_write(tmp_path / head_type, markov_config(head_type), drafter.state_dict()))
    assert loaded.describe()["markov_head"] == {"type": head_type, "rank": RANK}
    assert loaded.describe()["confidence_head"] == {"with_markov": True, "input_width": H + RANK}
    for harvest in DsparkHarvest:
        a = speculative_generate(target, drafter, PROMPTS[0], harvest, 12)
        b = speculative_generate(target, loaded, PROMPTS[0], harvest, 12)
        assert [r.drafts for r in a.rounds] == [r.drafts for r in b.rounds]


def test_confidence_head_is_sglangs_predictor(target) -> None:
    drafter = markov_drafter("gated", seed=12)
    head, conf = drafter.markov_head, drafter.confidence_head
    g = torch.Generator().manual_seed(13)
    rows, drafts = torch.randn(4, H, generator=g), torch.tensor([5, 9, 2, 7])
    with torch.no_grad():
        got = conf.predict(rows, torch.tensor(3), drafts, head)
        e = head.markov_w1.weight[torch.tensor([3, 5, 9, 2])]
        want = torch.sigmoid(torch.cat([rows, e], -1) @ conf.proj.weight[0] + conf.proj.bias)
    torch.testing.assert_close(got, want)


def _saved_state(head_type: str = "vanilla") -> dict[str, torch.Tensor]:
    return dict(markov_drafter(head_type, seed=14).state_dict())


def test_a_markov_rank_without_markov_weights_is_refused(tmp_path) -> None:
    state = {k: v for k, v in _saved_state().items() if not k.startswith("markov_head.")}
    cfg = markov_config("vanilla")
    cfg["confidence_head_with_markov"] = False
    state["confidence_head.proj.weight"] = torch.zeros(1, H)
    with pytest.raises(InvalidCheckpointError, match=r"markov_rank 8 but the weights hold no markov_head"):
        load_drafter(_write(tmp_path / "nohead", cfg, state))


def test_a_head_type_that_does_not_fit_the_weights_is_refused_by_name(tmp_path) -> None:
    cfg = markov_config("vanilla")
    cfg["dflash_config"]["markov_head_type"] = "vanilla"
    with pytest.raises(InvalidCheckpointError, match=r"markov_head_type 'vanilla'.*gate_proj"):
        load_drafter(_write(tmp_path / "gated-as-vanilla", cfg, _saved_state("gated")))


def test_disagreeing_head_type_spellings_and_unknown_types_are_refused(tmp_path) -> None:
    cfg = markov_config("vanilla")
    cfg["dflash_config"]["markov_head_type"] = "rnn"
    with pytest.raises(InvalidCheckpointError, match="Markov head types disagree"):
        load_drafter(_write(tmp_path / "two-types", cfg, _saved_state()))
    cfg = markov_config("vanilla")
    cfg["markov_head_type"] = cfg["dflash_config"]["markov_head_type"] = "mixture"
    with pytest.raises(UnsupportedCheckpointError, match="'mixture' is not one sglang builds"):
        load_drafter(_write(tmp_path / "mixture", cfg, _saved_state()))


def test_a_confidence_head_of_another_width_is_refused(tmp_path) -> None:
    state = _saved_state()
    state["confidence_head.proj.weight"] = torch.zeros(1, H + 3)
    with pytest.raises(InvalidCheckpointError, match=r"confidence_head.proj.weight has shape \(1, 67\)"):
        load_drafter(_write(tmp_path / "wide", markov_config("vanilla"), state))


# -- check ---------------------------------------------------------------------------------------


def _embedded_with_markov_head(tmp_path: Path, name: str, vocab: int | None = None) -> Path:
    """The embedded DSpark drafter plus a random non-zero vanilla Markov head and a confidence head."""
    import shutil

    from safetensors.torch import load_file

    from sglang_dspark_plugin.embedded import EMBEDDED

    folder = shutil.copytree(EMBEDDED.drafters["dspark"], tmp_path / name)
    cfg = json.loads((folder / "config.json").read_text())
    vocab, hidden = vocab or cfg["vocab_size"], cfg["hidden_size"]
    cfg.update(
        vocab_size=vocab,
        markov_rank=RANK,
        markov_head_type="vanilla",
        enable_confidence_head=True,
        confidence_head_with_markov=True,
        architectures=["Qwen3DSparkModel"],
    )
    cfg["dflash_config"]["markov_rank"] = RANK
    state = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(15)
    state["markov_head.markov_w1.weight"] = torch.randn(vocab, RANK, generator=g).half()
    state["markov_head.markov_w2.weight"] = torch.randn(vocab, RANK, generator=g).half()
    state["confidence_head.proj.weight"] = torch.randn(1, hidden + RANK, generator=g).half()
    state["confidence_head.proj.bias"] = torch.zeros(1).half()
    return _write(folder, cfg, state)


def test_check_measures_a_markov_drafter_exactly_and_reports_its_heads(tmp_path, capsys) -> None:
    from sglang_dspark_plugin.cli import main
    from sglang_dspark_plugin.embedded import EMBEDDED

    draft = _embedded_with_markov_head(tmp_path, "markov-drafter")
    quick = ["--max-new-tokens", "12", "--num-prompts", "1", "--no-progress"]
    args = ["check", "--target", str(EMBEDDED.target), "--draft", str(draft), *quick]
    assert main([*args, "--json"]) == 4  # exact (else 1), and one prompt states no confidence
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "inconclusive"
    assert sorted(r["harvest"] for r in report["runs"]) == ["dflash", "dspark"]
    assert all(r["exact_match"] for r in report["runs"])
    (described,) = report["drafters"]
    assert described["drafter"] == "markov-drafter" and described["strategy"] == "dspark"
    assert described["markov_head"] == {"type": "vanilla", "rank": RANK}
    assert described["confidence_head"]["with_markov"] is True
    assert main(args) == 4
    text = capsys.readouterr().out
    assert "DSpark heads:" in text and "markov-drafter: Markov head vanilla, rank 8" in text


def test_check_refuses_a_markov_head_over_another_vocabulary(tmp_path, capsys) -> None:
    from sglang_dspark_plugin.cli import main
    from sglang_dspark_plugin.embedded import EMBEDDED

    draft = _embedded_with_markov_head(tmp_path, "other-vocab", vocab=1000)
    code = main(["check", "--json", "--target", str(EMBEDDED.target), "--draft", str(draft), "--no-progress"])
    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and error["kind"] == "invalid"
    assert "Markov head biases 1000 tokens" in error["message"] and "1536" in error["message"]


# -- (e) every spelling real exports use; (d) a rank the tensors contradict ----------------------


def _spelled(spelling: str, head_type: str) -> dict:
    """The same drafter's config in one of the spellings real exports and sglang use."""
    cfg = markov_config(head_type)
    heads = {k: cfg.pop(k) for k in ("markov_rank", "markov_head_type")}
    for k in ("markov_rank", "markov_head_type"):
        cfg["dflash_config"].pop(k)
    if spelling == "specforge-raw":  # SpecForge's own output: nested in dflash_config
        cfg["architectures"] = ["DSparkDraftModel"]
        cfg["dflash_config"].update(heads)
    elif spelling == "specforge-normalised":  # its normalize_dflash_export.py: hoisted, nested kept
        cfg["architectures"] = ["Qwen3DSparkModel"]
        cfg.update(heads)
        cfg["dflash_config"].update(heads)
    elif spelling == "top-level":
        cfg.update(heads)
    elif spelling in ("dspark_config", "text_config"):
        cfg[spelling] = dict(heads)
    elif spelling == "dspark-prefixed":  # sglang's dspark_* keys
        cfg.update(dspark_markov_rank=heads["markov_rank"], dspark_markov_head_type=heads["markov_head_type"])
    return cfg


SPELLINGS = (
    "specforge-raw",
    "specforge-normalised",
    "top-level",
    "dspark_config",
    "text_config",
    "dspark-prefixed",
)


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_every_spelling_of_the_markov_keys_is_read(tmp_path, target, spelling) -> None:
    from sglang_dspark_plugin.census import census

    drafter = markov_drafter("gated", seed=16)  # not the default type: the type must be read too
    folder = _write(tmp_path / spelling, _spelled(spelling, "gated"), drafter.state_dict())
    cfg = census(folder)
    assert cfg.markov_rank == RANK and cfg.strategy_dspark
    assert any(s.vote == "dspark" and "markov_rank" in s.signal for s in cfg.evidence), cfg.evidence
    loaded = load_drafter(folder)
    assert loaded.describe()["markov_head"] == {"type": "gated", "rank": RANK}
    a = speculative_generate(target, drafter, PROMPTS[0], DSPARK, 10)
    b = speculative_generate(target, loaded, PROMPTS[0], DSPARK, 10)
    assert [r.drafts for r in a.rounds] == [r.drafts for r in b.rounds]


@pytest.mark.parametrize("config_rank", [RANK + 4, 0])
def test_a_markov_rank_the_tensor_shapes_contradict_is_refused(tmp_path, config_rank) -> None:
    from sglang_dspark_plugin.census import census

    cfg = markov_config("vanilla")
    cfg["markov_rank"] = cfg["dflash_config"]["markov_rank"] = config_rank
    folder = _write(tmp_path / f"rank{config_rank}", cfg, _saved_state())
    for read in (census, load_drafter):
        with pytest.raises(InvalidCheckpointError) as err:
            read(folder)
        message = err.value.message
        assert f"markov_rank = {config_rank}" in message, message
        assert f"markov_head.markov_w1.weight has shape [{V}, {RANK}]" in message
        assert err.value.kind == "invalid" and err.value.where.endswith("markov_rank")  # a spelling of it


def test_markov_rank_spellings_that_disagree_are_refused(tmp_path) -> None:
    from sglang_dspark_plugin.census import census

    cfg = markov_config("vanilla")
    cfg["text_config"] = {"markov_rank": RANK * 2}
    with pytest.raises(InvalidCheckpointError, match=r"Markov ranks disagree .*text_config.markov_rank=16"):
        census(_write(tmp_path / "disagree", cfg, _saved_state()))


@pytest.mark.parametrize("flag", [{"sample_from_anchor": False}, {"dspark_bonus_anchor": True}])
def test_a_mask_fill_dspark_checkpoint_with_a_markov_head_is_measured(tmp_path, target, flag) -> None:
    """sglang 0.5.23's sample_from_anchor=false layout: drafts from rows 1..b-1, draft 1's bias from
    the bonus (anchor) token, each later one from the draft before it; the census says dflash."""
    from sglang_dspark_plugin.census import census

    drafter = markov_drafter("rnn", seed=17)
    folder = _write(tmp_path / "mask-fill", {**markov_config("rnn"), **flag}, drafter.state_dict())
    assert census(folder).strategy_dspark is False
    loaded = load_drafter(folder)
    ref = greedy(target, PROMPTS[1], 16)
    assert speculative_generate(target, loaded, PROMPTS[1], DFLASH, 16).tokens == ref
    state = prefill(target, loaded, PROMPTS[1])
    anchor = state.tokens[-1]
    seen, handle = capture_rows(loaded)
    try:
        result = speculative_round(target, loaded, RoundGeometry(DFLASH, loaded.block_size), state)
    finally:
        handle.remove()
    rows = seen[0][1:B]
    base = rows @ target.lm_head.weight.detach().T
    prevs = [anchor, *result.drafts[:-1]]
    assert list(result.drafts) == reference_logits(loaded.markov_head, base, rows, prevs).argmax(-1).tolist()


@pytest.mark.parametrize(
    ("first", "second"),
    [((), ("dspark_config",)), (("dflash_config",), ("text_config",)), ((), ("text_config",))],
)
def test_markov_head_types_that_disagree_between_spellings_are_refused(tmp_path, first, second):
    """Releases read the spellings in different orders (0.5.17 never reads ``dflash_config``): a config
    whose spellings disagree would give two releases two heads, so the census refuses it, naming both."""
    raw = json.loads(json.dumps(FIXTURES["specforge_dspark"].config))
    for section, head_type in ((first, "gated"), (second, "vanilla")):
        node = raw
        for part in section:
            node = node.setdefault(part, {})
        node["markov_head_type"] = head_type
    from sglang_dspark_plugin.census import census

    folder = write_checkpoint(tmp_path, "specforge_dspark")
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InvalidCheckpointError, match="Markov head types disagree") as refused:
        census(folder)
    assert "gated" in refused.value.message and "vanilla" in refused.value.message
