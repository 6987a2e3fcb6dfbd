#!/usr/bin/env python
"""The live offset probe's match rates on the embedded models: the numbers behind its decision rule.

Decodes the embedded prompts with the reference engine, for every embedded drafter under its own
harvest and under the other one, and for a drafter with random weights under both, and replays the
rounds into a live probe as one served batch (``engine.live_feed``; each request's row as sglang's host
copy carries it, the bonus over the first rejected draft), at batch 8 and batch 1. A "constant token"
row replays the random drafter's rounds with every draft replaced by the most frequent committed
token (a drafter that knows the token distribution, not the positions). Prints, per run: the accept
length, the match rate at each offset, the drafts scored, the final verdict, and the first decisive
verdict with the drafts scored then.

    python scripts/probe_rates.py [--tokens 96] [--prompts 8] [--batch 8 --batch 1] [--json rates.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch


def _random_drafter(like: str, seed: int) -> Any:
    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import new_draft_model

    config = json.loads((EMBEDDED.drafters[like] / "config.json").read_text())
    return new_draft_model(config, seed=seed).float().eval()


def _runs() -> list[tuple[str, str, Any]]:
    """(name, harvest, drafter): every embedded drafter under both harvests, and random weights."""
    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import load_drafter

    runs = []
    for name, path in EMBEDDED.drafters.items():
        drafter = load_drafter(path)
        own = EMBEDDED.strategy(name)
        other = "dspark" if own == "dflash" else "dflash"
        runs += [(name, own, drafter), (f"{name} (forced)", other, drafter)]
    random = _random_drafter("dflash", seed=0)
    runs += [("random", "dflash", random), ("random", "dspark", random)]
    return runs


def _replay(harvest: Any, gens: list[Any], batch: int, as_served: bool = True) -> tuple[Any, Any]:
    """The probe after replaying ``gens`` in batches of ``batch``, and the first decisive replay."""
    from sglang_dspark_plugin.engine.live_feed import feed_batch
    from sglang_dspark_plugin.probe.live import LiveProbe, ProbeSettings

    probe = LiveProbe(harvest, ProbeSettings(rounds=10**9))  # every round: the rates, not the schedule
    first = None
    for start in range(0, len(gens), batch):
        fed = feed_batch(probe, gens[start : start + batch], as_served=as_served)
        first = first or (fed if fed.verdict is not None else None)
    return probe, first


def _constant(gens: list[Any]) -> list[Any]:
    """``gens`` with every draft replaced by the most frequent committed token: a drafter that knows the
    token distribution and nothing about positions."""
    from collections import Counter
    from dataclasses import replace

    counts = Counter(t for g in gens for t in g.tokens)
    token = counts.most_common(1)[0][0]
    return [replace(g, rounds=[replace(r, drafts=(token,) * len(r.drafts)) for r in g.rounds]) for g in gens]


def _row(name: str, harvest_name: str, gens: list[Any], batch: int, harvest: Any) -> dict[str, Any]:
    # the constant-token drafts never ran, so sglang's copy of them (the bonus over the first rejected
    # one) does not exist: they are replayed whole
    probe, fed = _replay(harvest, gens, batch, as_served=name != "constant token")
    full, _ = _replay(harvest, gens, batch, as_served=False)
    final = probe.assessment()
    lengths = [n for g in gens for n in g.accept_lengths]
    c = probe.counts
    return {
        "run": name,
        "harvest": harvest_name,
        "batch": batch,
        "accept_length": sum(lengths) / len(lengths),
        "rates": c.rates,
        "rates_every_draft": full.counts.rates,
        "scored": min(c.compared_own, c.compared_late, c.compared_early),
        "verdict": final.kind,
        "override": final.override,
        "decisive_kind": None if fed is None else fed.verdict.kind,
        "decisive_scored": None if fed is None else fed.at_scored,
        "message": final.message,
    }


def measure(tokens: int, n_prompts: int, batches: list[int]) -> list[dict[str, Any]]:
    """One row per run and replay batch size: accept length, rates, scored drafts, verdict, and the
    drafts scored when it first became decisive."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sglang_dspark_plugin.embedded import EMBEDDED
    from sglang_dspark_plugin.engine import speculative_generate
    from sglang_dspark_plugin.harvest import DsparkHarvest

    torch.set_num_threads(1)
    target = AutoModelForCausalLM.from_pretrained(EMBEDDED.target, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(EMBEDDED.target)
    prompts = [tokenizer(text)["input_ids"] for text in EMBEDDED.prompts[:n_prompts]]
    rows = []
    for name, harvest_name, drafter in _runs():
        harvest = DsparkHarvest.from_env_value(harvest_name)
        gens = [speculative_generate(target, drafter, p, harvest, tokens) for p in prompts]
        runs = [(name, gens)] + ([("constant token", _constant(gens))] if name == "random" else [])
        for label, replayed in runs:
            rows += [_row(label, harvest_name, replayed, b, harvest) for b in batches]
    return rows


def _three(rates: dict[str, float]) -> str:
    return f"{rates['own']:.2f}/{rates['late']:.2f}/{rates['early']:.2f}"


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'run':<26}{'harvest':<8}{'batch':>6}{'accept':>7}{'own':>7}{'late':>7}{'early':>7}{'scored':>8}"
        "  every draft    verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        rates = r["rates"]
        when = (
            f" (first decisive: {r['decisive_kind']} at {r['decisive_scored']} scored)"
            if r["decisive_kind"]
            else " (never decisive)"
        )
        lines.append(
            f"{r['run']:<26}{r['harvest']:<8}{r['batch']:>6}{r['accept_length']:>7.2f}{rates['own']:>7.3f}"
            f"{rates['late']:>7.3f}{rates['early']:>7.3f}{r['scored']:>8}  {_three(r['rates_every_draft'])}"
            f"  {r['verdict']}"
            f"{' ' + r['override'] if r['override'] else ''}{when}"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=96, help="new tokens per prompt (default 96)")
    parser.add_argument("--prompts", type=int, default=8, help="embedded prompts decoded (default 8)")
    parser.add_argument(
        "--batch", type=int, action="append", help="replay batch size (repeatable; default 8 and 1)"
    )
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = measure(args.tokens, args.prompts, args.batch or [8, 1])
    print(render(rows))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
