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
from sglang_dspark_plugin.census.declaration import (
    READS_MASK_FILL,
    READS_SHIFTED,
    REFUSED,
    declare,
    served_by,
)
from sglang_dspark_plugin.census.draft_config import TIER_EXPLICIT
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import DsparkHarvestError

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


def _reading(config):
    return {row["engine"]: row["serves"] for row in served_by(config)}


def test_the_engine_table_reads_each_key_where_each_release_reads_it():
    # sglang 0.5.23 DSPARK: the top level only, true when absent; 0.5.17 reads nothing
    assert _reading(_dspark()) == {
        "sglang 0.5.17 DSPARK": READS_SHIFTED,
        "sglang 0.5.23 DSPARK": READS_SHIFTED,
    }
    top = _reading(_dspark(sample_from_anchor=False))
    nested = _reading(_dspark(dflash_config={"sample_from_anchor": False}))
    assert top["sglang 0.5.23 DSPARK"] == READS_MASK_FILL and top["sglang 0.5.17 DSPARK"] == READS_SHIFTED
    assert nested["sglang 0.5.23 DSPARK"] == READS_SHIFTED  # nested is ignored there
    # DFLASH: no key in any release; the open PRs read top level or nested, and refuse or honour true
    plain = _reading(_dflash())
    assert set(plain) == {
        "sglang 0.5.17-0.5.23 DFLASH",
        "sglang DFLASH + PR 40203 (open)",
        "sglang DFLASH + PR 40181 (open)",
    }
    assert set(plain.values()) == {READS_MASK_FILL}
    shifted = _reading(_dflash(dflash_config={"query_zero_predicts_next": True}))
    assert shifted == {
        "sglang 0.5.17-0.5.23 DFLASH": READS_MASK_FILL,
        "sglang DFLASH + PR 40203 (open)": READS_SHIFTED,
        "sglang DFLASH + PR 40181 (open)": REFUSED,
    }


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
    engines = {row["engine"]: row for row in report["engines"]}
    assert engines["sglang 0.5.17 DSPARK"]["right"] is False  # 0.5.17 reads no key: still wrong
    assert engines["sglang 0.5.23 DSPARK"]["right"] is True
    assert main(["declare", str(source), "--out", str(tmp_path / "text")]) == 0
    text = capsys.readouterr().out
    assert "WRONG (trained mask-fill)" in text and "dflash_config.sample_from_anchor=false" in text
    assert main(["declare", str(source), "--out", str(tmp_path / "text")]) == 2
    assert "exists" in capsys.readouterr().err
