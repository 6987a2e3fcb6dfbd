"""The live offset probe fed from the reference engine's real rounds on the embedded models, as a served
batch feeds it (each request's row as sglang's host copy holds it): matched runs are matched, the forced
wrong harvest is named with its override, random weights match no offset and get no override."""

from __future__ import annotations

import json

import pytest
import torch

from sglang_dspark_plugin.embedded import DRAFTERS, EMBEDDED
from sglang_dspark_plugin.engine import load_drafter, new_draft_model, speculative_generate
from sglang_dspark_plugin.engine.live_feed import feed_batch
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings
from sglang_dspark_plugin.probe.offsets import ProbeCounts, probe_counts

TOKENS, PROMPTS = 48, 8  # enough for the default rule's 400 drafts (matched) and 2000 (no match)


@pytest.fixture(scope="module")
def models():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny models decode faster on one thread, and a shared machine stays fair
    target = AutoModelForCausalLM.from_pretrained(EMBEDDED.target, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED.target)
    prompts = [tokenizer(text)["input_ids"] for text in EMBEDDED.prompts[:PROMPTS]]
    yield target, prompts
    torch.set_num_threads(threads)


def _generations(models, drafter, harvest: DsparkHarvest) -> list:
    target, prompts = models
    return [speculative_generate(target, drafter, p, harvest, TOKENS) for p in prompts]


def _other(name: str) -> DsparkHarvest:
    return DsparkHarvest.DFLASH if name == "dspark" else DsparkHarvest.DSPARK


@pytest.mark.parametrize("name", DRAFTERS)
def test_each_embedded_drafter_matched_and_under_the_forced_wrong_harvest(models, name: str) -> None:
    drafter = load_drafter(EMBEDDED.drafters[name])
    strategy = EMBEDDED.strategy(name)
    own = DsparkHarvest.from_env_value(strategy)
    matched = LiveProbe(own)  # the default schedule and rule
    fed = feed_batch(matched, _generations(models, drafter, own))
    assert fed.verdict is not None and (fed.verdict.kind, fed.verdict.override) == ("matched", None)
    forced = _other(strategy)
    probe = LiveProbe(forced)
    fed = feed_batch(probe, _generations(models, drafter, forced))
    expected = "late" if strategy == "dspark" else "early"  # a shifted drafter read mask-fill drafts late
    assert fed.verdict is not None, probe.assessment().message
    assert (fed.verdict.kind, fed.verdict.override) == (expected, f"MEMRA_DSPARK_HARVEST={strategy}")
    assert probe.assessment().kind == expected  # and it stays so over the whole run


@pytest.mark.parametrize("harvest", list(DsparkHarvest))
def test_random_weights_match_no_offset(models, harvest: DsparkHarvest) -> None:
    config = json.loads((EMBEDDED.drafters["dflash"] / "config.json").read_text())
    drafter = new_draft_model(config, seed=0).float().eval()
    probe = LiveProbe(harvest)
    fed = feed_batch(probe, _generations(models, drafter, harvest))
    assert fed.verdict is not None, probe.assessment().message
    assert (fed.verdict.kind, fed.verdict.override) == ("no-match", None)
    assert "the harvest is not the cause" in fed.verdict.message


def test_every_draft_scores_as_the_offline_probe_but_for_the_anchor(models) -> None:
    drafter = load_drafter(EMBEDDED.drafters["dspark"])
    target, prompts = models
    harvest = DsparkHarvest.DFLASH  # forced: most drafts rejected, every offset busy
    gens = _generations(models, drafter, harvest)
    probe = LiveProbe(harvest, ProbeSettings(rounds=10**9), max_pending=64)
    feed_batch(probe, gens, as_served=False)
    offline, anchors, rounds = ProbeCounts(), 0, 0
    for prompt, gen in zip(prompts, gens, strict=True):
        committed = [gen.tokens[0], *(t for r in gen.rounds for t in r.committed)]
        sequence = prompt + committed  # everything committed, past the token budget too
        offline = offline + probe_counts(gen.probe_rounds, sequence)
        anchors += sum(r.drafts[0] == sequence[r.anchor_pos] for r in gen.rounds)
        rounds += len(gen.rounds)
    assert probe.counts == ProbeCounts(
        offline.own,
        offline.late,
        offline.early - anchors,
        offline.compared_own,
        offline.compared_late,
        offline.compared_early - rounds,
    )
