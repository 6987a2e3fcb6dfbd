"""``declare``'s engine table against the installed sglang: its reading is sglang's own parse, and each
row of the installed release is proven with plain sglang launches (no plugin) on the declared copies.

The reading (``releases.plain``) is checked against sglang's own ``parse_dspark_draft_config`` /
``parse_dflash_draft_config`` (and 0.5.23's ``get_dspark_sample_from_anchor``) on every config of the
census fixtures, the released formats and the embedded drafters. The served proof declares each embedded
drafter and launches the row's builtin on the copy: a refused row's launch fails with sglang's own
reason; a started row serves the drafts per round it names (sglang's ``meta_info``: proposed drafts over
verify rounds); a right row serves the reference engine's tokens and per-request accept lengths (the
draft's trained harvest and block: what the plugin serves), and so does a wrong row launched with the
flag it names; a wrong row that nothing fixes serves something else.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import served_cases as sc
import sglang
from checkpoints import FIXTURES
from released_checkpoints import RELEASED
from served import run_engine

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.declaration import declare
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.engine import load_drafter, speculative_generate
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.releases import BY_VERSION, DFLASH, DSPARK
from sglang_dspark_plugin.releases.plain import (
    DEFAULT_DFLASH_BLOCK,
    DEFAULT_DSPARK_GAMMA,
    MASK_FILL,
    SHIFTED,
    PlainRow,
    Trained,
    plain_serve,
    plain_table,
)

VERSION = sglang.__version__
RELEASE = BY_VERSION[VERSION]


def _configs() -> dict[str, dict]:
    # the drafts declare writes a copy of: those the census resolves (it refuses the rest, Domino too)
    configs = {f"fixture {n}": f.config for n, f in {**FIXTURES, **RELEASED}.items() if f.resolves}
    configs.update({f"embedded {n}": _config(p) for n, p in EMBEDDED.drafters.items()})
    dspark = {"architectures": ["DSparkDraftModel"], "block_size": 8}
    configs.update(
        {
            "head nested only": {**dspark, "dflash_config": {"markov_rank": 4, "markov_head_type": "gated"}},
            "rank without type": {**dspark, "markov_rank": 4},
            "prefixed block": {**dspark, "dspark_block_size": 5, "markov_rank": 4, "markov_head_type": "rnn"},
            "mask-fill top": {
                **dspark,
                "sample_from_anchor": False,
                "markov_rank": 2,
                "markov_head_type": "vanilla",
            },
            "no block": {
                "architectures": ["DSparkDraftModel"],
                "markov_rank": 2,
                "markov_head_type": "vanilla",
            },
        }
    )
    return configs


def _config(folder: Path) -> dict:
    import json

    return json.loads((folder / "config.json").read_text())


def _sglang_reading(config: dict, builtin: str) -> tuple[str, int] | str:
    """What the installed sglang's own parse makes of ``config``: ``(layout, drafts)`` or its refusal."""
    from sglang.srt.speculative.dflash_utils import parse_dflash_draft_config

    config = copy.deepcopy(config)
    try:
        if builtin == DFLASH:
            block = parse_dflash_draft_config(draft_hf_config=config).block_size
            return MASK_FILL, (block or DEFAULT_DFLASH_BLOCK) - 1
        from sglang.srt.speculative.dspark_components import dspark_config

        parsed = dspark_config.parse_dspark_draft_config(draft_hf_config=config)
    except ValueError as exc:
        return str(exc)
    if not parsed.require_markov():
        return "DSPARK requires markov_rank > 0"
    anchor = getattr(dspark_config, "get_dspark_sample_from_anchor", lambda _c: True)(config)
    return SHIFTED if anchor else MASK_FILL, parsed.gamma or DEFAULT_DSPARK_GAMMA


@pytest.mark.parametrize("builtin", [DFLASH, DSPARK])
def test_the_plain_reading_is_sglangs_own_parse(builtin):
    """For every config whose class the release builds for ``builtin``: started with the same layout
    and drafts per round as sglang's parse, or refused where sglang's parse (or its load) refuses."""
    compared = 0
    for name, config in _configs().items():
        names = config.get("architectures") or []
        if not names or names[0] not in RELEASE.builds[builtin]:
            continue
        ours, theirs = plain_serve(config, RELEASE, builtin), _sglang_reading(config, builtin)
        if ours.starts:
            assert (ours.layout, ours.drafts) == theirs, name
        else:
            assert isinstance(theirs, str), (name, ours.refusal, theirs)
            head = ours.refusal.split(" (")[0].split(" when")[0]
            assert head.lower() in theirs.lower() or theirs.lower() in ours.refusal.lower(), (
                name,
                ours,
                theirs,
            )
        compared += 1
    assert compared >= (5 if builtin == DSPARK else 3)


# ---------------------------------------------------------------- the rows, served


def _row(folder: Path, trained: Trained, builtin: str) -> PlainRow:
    return next(
        r for r in plain_table(_config(folder), trained) if r.builtin == builtin and VERSION in r.versions
    )


def _flags(fix: str) -> dict[str, int]:
    """The engine arguments a row's ``flag: --x-y N`` fix names."""
    out = {}
    for part in fix.split("; "):
        if part.startswith("flag: "):
            flag, value = part.removeprefix("flag: ").split()
            out[flag.removeprefix("--").replace("-", "_")] = int(value)
    return out


@pytest.mark.parametrize("drafter", sorted(EMBEDDED.drafters))
def test_each_row_of_the_installed_release_is_what_plain_sglang_serves(
    drafter, tmp_path, prompts, target, greedy
):
    declared = tmp_path / f"declared-{drafter}"
    cfg = census(EMBEDDED.drafters[drafter])
    declaration = declare(cfg, declared)
    harvest = DsparkHarvest.from_name(declaration.harvest)
    trained = Trained(harvest, declaration.config["dflash_config"]["block_size"])
    model = load_drafter(declared).eval()
    reference = [speculative_generate(target, model, p, harvest, sc.MAX_NEW_TOKENS) for p in prompts]
    builtins = [
        b for b in (DFLASH, DSPARK) if any(r.builtin == b for r in plain_table(declaration.config, trained))
    ]
    assert builtins, drafter
    for builtin in builtins:
        row = _row(declared, trained, builtin)
        args = {"model_path": str(EMBEDDED.target), "speculative_algorithm": builtin}
        args["speculative_draft_model_path"] = str(declared)
        batches = [[p] for p in prompts]
        if not row.serves.starts:
            with pytest.raises(AssertionError) as failed:
                run_engine(args, batches, sc.MAX_NEW_TOKENS)
            assert row.serves.refusal.split(" (")[0] in str(failed.value), (drafter, row.serves.refusal)
            continue
        got = run_engine(args, batches, sc.MAX_NEW_TOKENS)
        per_round = {int(m["spec_num_proposed_drafts"]) // int(m["spec_verify_ct"]) for m in got.metas}
        assert per_round == {row.serves.drafts}, (drafter, row.engine, per_round)
        assert got.outputs == greedy, (drafter, row.engine)  # lossless whatever it drafts
        run = sc.Run(f"plain-{builtin}/declared-{drafter}", builtin, drafter)
        outcome = sc.Outcome(outputs=got.outputs, metas=got.metas, log=got.log)
        ref_tokens, ref_rounds = [g.tokens for g in reference], [g.accept_lengths for g in reference]
        checks = sc.check_reference(run, outcome, ref_tokens, ref_rounds, greedy)
        if row.serves.right(trained):
            failed = [f"{c.name}: {c.detail}" for c in checks if not c.ok]
            assert not failed, (drafter, row.engine, failed)
            continue
        assert not all(c.ok for c in checks), (drafter, row.engine, "a wrong row served what was trained")
        flags = _flags(row.fix)
        if flags:  # the flag the row names makes it serve what was trained
            fixed = run_engine({**args, **flags}, batches, sc.MAX_NEW_TOKENS)
            outcome = sc.Outcome(outputs=fixed.outputs, metas=fixed.metas, log=fixed.log)
            failed = [
                f"{c.name}: {c.detail}"
                for c in sc.check_reference(run, outcome, ref_tokens, ref_rounds, greedy)
                if not c.ok
            ]
            assert not failed, (drafter, row.engine, flags, failed)
        else:
            assert row.fix.startswith("nothing"), (drafter, row.engine, row.fix)
