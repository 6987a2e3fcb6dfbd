"""``dspark-harvest declare``: the census's decision written in the keys other engines read, in a copy.

Every fixture (census formats and released formats) is declared: a draft the census resolves gets a
copy whose census decides the same harvest from tier 1, with the source untouched; a draft it refuses
is refused with the same kind and nothing is written. The engine table is checked on the configs that
tell its readings apart, and the plugin's own plan serves the declared embedded drafters as it serves
the sources.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from checkpoints import FIXTURES, write_checkpoint
from released_checkpoints import RELEASED

from sglang_dspark_plugin import ENV_VAR
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.declaration import READS_MASK_FILL, declare
from sglang_dspark_plugin.census.draft_config import TIER_EXPLICIT
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import DsparkHarvestError
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.releases import BY_VERSION, DFLASH, DSPARK
from sglang_dspark_plugin.releases.plain import (
    MASK_FILL,
    NO_HEAD,
    SHIFTED,
    Trained,
    engine_table,
    fix,
    plain_serve,
    plain_table,
)

ALL = {**FIXTURES, **RELEASED}
DECLARED_FLAGS = {"config.json:sample_from_anchor", "config.json:dflash_config.sample_from_anchor"}


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _census_kind(folder: Path) -> str:
    try:
        cfg = census(folder)
    except DsparkHarvestError as exc:
        return exc.kind
    if cfg.conflict:
        return "conflict"
    return "default" if cfg.verdict is None else cfg.verdict  # default: no vote at all


@pytest.mark.parametrize("name", sorted(ALL))
def test_every_fixture_is_declared_as_the_census_decides_or_refused_as_it_refuses(tmp_path, name):
    fixture = ALL[name]
    source = write_checkpoint(tmp_path / "src", fixture)
    before = _digest(source)
    out = tmp_path / "declared"
    expected = _census_kind(source)
    width = None if fixture.block_size is not None else 9
    try:
        cfg = census(source)
        declaration = declare(cfg, out, block_size=width)
    except DsparkHarvestError as exc:
        assert not out.exists() and not list(tmp_path.glob(".declared.*"))
        assert _digest(source) == before
        if expected == "default":  # resolves with the historical default: nothing to declare
            assert fixture.expect_source == "default" and exc.kind == "usage", exc
        else:
            assert exc.kind == expected, exc
        return
    assert expected in ("dflash", "dspark") and fixture.expect_source == "census"
    assert _digest(source) == before  # never modified in place
    again = census(out)
    assert again.verdict == cfg.verdict == declaration.harvest
    assert again.deciding_tier == TIER_EXPLICIT and not again.conflict
    signals = {s.signal: s for s in again.evidence}
    assert DECLARED_FLAGS <= set(signals)
    assert {signals[f].vote for f in DECLARED_FLAGS} == {cfg.verdict}
    assert again.block_size == (fixture.block_size or width)
    # every other file is the source's own, linked
    for rel in before:
        if rel != "config.json":
            assert (out / rel).is_symlink() and (out / rel).samefile(source / rel)


def test_a_source_without_block_size_needs_the_flag_and_then_carries_it(tmp_path):
    source = write_checkpoint(tmp_path, RELEASED["torchspec_dspark"])
    cfg = census(source)
    assert cfg.block_size is None
    with pytest.raises(DsparkHarvestError, match="--block-size N") as refused:
        declare(cfg, tmp_path / "a")
    assert refused.value.kind == "usage" and not (tmp_path / "a").exists()
    declaration = declare(cfg, tmp_path / "b", block_size=7)
    assert declaration.written["block_size"] == 7 and declaration.written["dflash_config.block_size"] == 7
    assert census(tmp_path / "b").block_size == 7
    with pytest.raises(DsparkHarvestError, match="contradicts"):
        declare(census(tmp_path / "b"), tmp_path / "c", block_size=8)
    with pytest.raises(DsparkHarvestError, match="2..1024"):
        declare(cfg, tmp_path / "d", block_size=1)


def test_copy_writes_files_and_an_existing_or_nested_out_is_refused(tmp_path):
    source = write_checkpoint(tmp_path, "specforge_dspark")
    cfg = census(source)
    declaration = declare(cfg, tmp_path / "copied", copy_files=True)
    tensors = tmp_path / "copied" / "model.safetensors"
    assert not tensors.is_symlink() and tensors.read_bytes() == (source / "model.safetensors").read_bytes()
    assert declaration.to_json()["files_are"] == "copied"
    for out, why in ((tmp_path / "copied", "exists"), (source / "inside", "inside the source")):
        with pytest.raises(DsparkHarvestError, match=why) as refused:
            declare(cfg, out)
        assert refused.value.kind == "usage"
    assert not (source / "inside").exists()


def test_a_conflict_is_refused_without_advising_the_launch_override(tmp_path):
    source = write_checkpoint(tmp_path, "conflicting_flags")
    with pytest.raises(DsparkHarvestError) as refused:
        declare(census(source), tmp_path / "out")
    assert refused.value.kind == "conflict"
    assert ENV_VAR not in str(refused.value) and "declare states only" in str(refused.value)


def _dspark(**extra):
    return {"architectures": ["DSparkDraftModel"], **extra}


def _dflash(**extra):
    return {"architectures": ["DFlashDraftModel"], **extra}


def _reading(config, builtin=DSPARK):
    """``{version: (layout, drafts)}`` or ``{version: refusal}`` of each release's plain builtin."""
    out = {}
    for version, release in BY_VERSION.items():
        served = plain_serve(config, release, builtin)
        out[version] = (served.layout, served.drafts) if served.starts else served.refusal
    return out


HEAD = {"markov_rank": 4, "markov_head_type": "vanilla"}
MASK_FILL_8 = Trained(DsparkHarvest.DFLASH, 8)  # 7 drafts, window 8
SHIFTED_8 = Trained(DsparkHarvest.DSPARK, 8)  # 8 drafts, window 9


def test_plain_dspark_reads_each_key_where_each_release_reads_it():
    # the layout: anchor-first everywhere; a top-level false is read from 0.5.19 on, a nested one never
    assert set(_reading(_dspark(block_size=8, **HEAD)).values()) == {(SHIFTED, 8)}
    top = _reading(_dspark(block_size=8, sample_from_anchor=False, **HEAD))
    assert top["0.5.17"] == top["0.5.18"] == (SHIFTED, 8)
    assert top["0.5.19"] == top["0.5.23"] == (MASK_FILL, 8)  # gamma = block_size: 8 drafts, not 7
    nested = _reading(_dspark(block_size=8, dflash_config={"sample_from_anchor": False}, **HEAD))
    assert set(nested.values()) == {(SHIFTED, 8)}
    # gamma: dspark_block_size first, then dflash_config.block_size, the top level, then 7
    assert _reading(_dspark(block_size=8, dspark_block_size=5, **HEAD))["0.5.23"] == (SHIFTED, 5)
    assert _reading(_dspark(block_size=8, dflash_config={"block_size": 6}, **HEAD))["0.5.17"] == (SHIFTED, 6)
    assert _reading(_dspark(**HEAD))["0.5.23"] == (SHIFTED, 7)
    # the Markov head: none is refused by every release; one nested in dflash_config is read by 0.5.23 only
    assert all(NO_HEAD in str(r) for r in _reading(_dspark(block_size=8)).values())
    nested_head = _reading(_dspark(block_size=7, dflash_config=dict(HEAD)))
    assert nested_head["0.5.23"] == (SHIFTED, 7)
    assert all("dflash_config.markov_rank is not read" in nested_head[v] for v in ("0.5.17", "0.5.22"))
    assert "markov_head_type" in _reading(_dspark(block_size=7, markov_rank=4))["0.5.23"]
    assert (
        "registers no"
        in _reading(_dspark(block_size=7, **HEAD) | {"architectures": ["LingDSparkModel"]})["0.5.17"]
    )


def test_plain_dflash_is_mask_fill_with_the_block_it_reads():
    assert set(_reading(_dflash(block_size=8), DFLASH).values()) == {(MASK_FILL, 7)}
    assert set(_reading(_dflash(block_size=8, dflash_config={"block_size": 4}), DFLASH).values()) == {
        (MASK_FILL, 3)
    }
    assert set(_reading(_dflash(), DFLASH).values()) == {(MASK_FILL, 15)}  # sglang's default block 16
    assert set(_reading(_dflash(block_size=8, sample_from_anchor=True), DFLASH).values()) == {(MASK_FILL, 7)}
    two = _reading({"architectures": ["DFlash2DraftModel"], "block_size": 8}, DFLASH)
    assert "registers no" in two["0.5.18"] and two["0.5.19"] == (MASK_FILL, 7)


def test_each_wrong_reading_names_what_makes_it_right_or_that_nothing_does():
    mask_fill_dspark = _dspark(block_size=8, sample_from_anchor=False, **HEAD)
    assert fix(
        plain_serve(mask_fill_dspark, BY_VERSION["0.5.23"], DSPARK), MASK_FILL_8, mask_fill_dspark
    ) == ("flag: --speculative-dspark-block-size 7")
    old = fix(plain_serve(mask_fill_dspark, BY_VERSION["0.5.17"], DSPARK), MASK_FILL_8, mask_fill_dspark)
    assert old.startswith("nothing") and "0.5.19" in old  # the first release with the layout, from the table
    undeclared = _dspark(block_size=8, **HEAD)  # a mask-fill drafter with no key: the key and the flag
    assert fix(plain_serve(undeclared, BY_VERSION["0.5.23"], DSPARK), MASK_FILL_8, undeclared) == (
        'key: "sample_from_anchor": false at the top level; flag: --speculative-dspark-block-size 7'
    )
    nested_head = _dspark(block_size=8, dflash_config=dict(HEAD))
    assert fix(plain_serve(nested_head, BY_VERSION["0.5.17"], DSPARK), SHIFTED_8, nested_head) == (
        'keys: "markov_rank": 4, "markov_head_type": "vanilla" at the top level'
    )
    headless = _dspark(block_size=8)
    assert "DSPARK_HARVEST" in fix(plain_serve(headless, BY_VERSION["0.5.23"], DSPARK), SHIFTED_8, headless)
    shifted_dflash = _dflash(block_size=8)
    assert fix(
        plain_serve(shifted_dflash, BY_VERSION["0.5.23"], DFLASH), SHIFTED_8, shifted_dflash
    ).startswith("nothing: DFLASH drafts mask-fill only")
    narrow = _dflash(block_size=4)
    assert fix(plain_serve(narrow, BY_VERSION["0.5.23"], DFLASH), MASK_FILL_8, narrow) == (
        "flag: --speculative-dflash-block-size 8"
    )
    assert (
        fix(plain_serve(narrow, BY_VERSION["0.5.23"], DFLASH), Trained(DsparkHarvest.DFLASH, 4), narrow)
        == "right"
    )


def test_the_table_groups_releases_that_read_alike_and_adds_the_open_prs_for_dflash_classes():
    config = _dspark(block_size=8, sample_from_anchor=False, **HEAD)
    rows = plain_table(config, MASK_FILL_8, _dspark(block_size=8, **HEAD))
    assert [r.engine for r in rows] == ["sglang 0.5.17-0.5.18 DSPARK", "sglang 0.5.19-0.5.23 DSPARK"]
    assert [r.before.layout for r in rows if r.before] == [SHIFTED, SHIFTED]
    table = {
        row["engine"]: row for row in engine_table(_dflash(block_size=8), MASK_FILL_8, _dflash(block_size=8))
    }
    assert set(table) == {
        "sglang 0.5.17-0.5.23 DFLASH",
        "sglang DFLASH + PR 40203 (open)",
        "sglang DFLASH + PR 40181 (open)",
    }
    assert all(row["right"] for row in table.values())
    shifted = _dflash(block_size=8, dflash_config={"query_zero_predicts_next": True})
    table = {row["engine"]: row for row in engine_table(shifted, SHIFTED_8, shifted)}
    assert table["sglang 0.5.17-0.5.23 DFLASH"]["layout"] == MASK_FILL
    assert table["sglang DFLASH + PR 40203 (open)"]["layout"] == SHIFTED
    assert table["sglang DFLASH + PR 40181 (open)"]["starts"] is False


@pytest.mark.parametrize("drafter", sorted(EMBEDDED.drafters))
def test_the_plugin_serves_a_declared_embedded_drafter_as_it_serves_the_source(tmp_path, drafter):
    from sglang_dspark_plugin.cli.inspect import inspect_checkpoint

    source = EMBEDDED.drafters[drafter]
    declare(census(source), tmp_path / drafter)
    before, after = inspect_checkpoint(str(source)), inspect_checkpoint(str(tmp_path / drafter))
    assert after["harvest"] == before["harvest"] == EMBEDDED.strategy(drafter)
    assert after["deciding_tier"] == TIER_EXPLICIT
    served = json.dumps(after["servability"]).replace(str(tmp_path / drafter), str(source))
    assert json.loads(served) == before["servability"]


def test_the_command_prints_what_it_wrote_and_each_engine_before_and_after(tmp_path, capsys):
    source = write_checkpoint(tmp_path, "dspark_sample_from_anchor_false")
    assert main(["declare", str(source), "--out", str(tmp_path / "out"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["harvest"] == "dflash" and report["layout"] == READS_MASK_FILL
    assert report["written"] == {"dflash_config.sample_from_anchor": False, "dflash_config.block_size": 8}
    assert report["trained"] == {"layout": READS_MASK_FILL, "drafts": 7, "verify_window": 8}
    (row,) = report["engines"]  # no markov_head_type: sglang's DSpark parse refuses it in every release
    assert (row["engine"], row["starts"], row["right"]) == ("sglang 0.5.17-0.5.23 DSPARK", False, False)
    assert row["fix"].startswith('key: "markov_head_type"')
    source = EMBEDDED.drafters["dspark-maskfill"]  # the same drafter with its head type
    assert main(["declare", str(source), "--out", str(tmp_path / "typed"), "--json"]) == 0
    engines = {row["engine"]: row for row in json.loads(capsys.readouterr().out)["engines"]}
    old, new = engines["sglang 0.5.17-0.5.18 DSPARK"], engines["sglang 0.5.19-0.5.23 DSPARK"]
    assert old["right"] is False and old["layout"] == "shifted"  # no key read there: still wrong
    assert (new["right"], new["layout"], new["drafts"]) == (False, "mask-fill", 8)  # one row past the 7
    assert new["fix"] == "flag: --speculative-dspark-block-size 7"
    assert main(["declare", str(source), "--out", str(tmp_path / "text")]) == 0
    text = capsys.readouterr().out
    assert "WRONG -> flag: --speculative-dspark-block-size 7" in text
    assert "dflash_config.sample_from_anchor=false" in text
    source = write_checkpoint(tmp_path, "dspark_sample_from_anchor_false")
    assert main(["declare", str(source), "--out", str(tmp_path / "text")]) == 2
    assert "exists" in capsys.readouterr().err
