"""The release table is the one place per-release facts live (``releases/__init__.py``): the "from
0.5.19" of a message, the spans of releases alike, the support record of a release, each derived from the
rows, so a row that changes changes every text that names it."""

from __future__ import annotations

import dataclasses

from sglang_dspark_plugin.releases import BY_VERSION, RELEASES, first_release, spans
from sglang_dspark_plugin.serving.request import SglangSupport


def test_the_first_release_with_a_feature_is_read_from_the_rows() -> None:
    assert first_release(lambda r: r.mask_fill_dspark) == "0.5.19"
    assert first_release(lambda r: r.dspark_subfolder) == "0.5.23"
    assert first_release(lambda r: "DFLASH" in r.pd_builtins) == "0.5.20"


def test_spans_merge_adjacent_releases_alike_and_the_last_one_is_open() -> None:
    assert spans(lambda r: r.pd_builtins) == [
        ("0.5.17 to 0.5.19", ("DSPARK",)),
        ("0.5.20 on", ("DFLASH", "DSPARK")),
    ]
    assert spans(lambda r: r.mask_fill_dspark) == [("0.5.17 to 0.5.18", False), ("0.5.19 on", True)]
    assert spans(lambda r: r.version)[0] == ("0.5.17", "0.5.17")  # a span of one release names it alone
    assert len(spans(lambda r: r.version)) == len(RELEASES)


def test_a_releases_support_is_its_row() -> None:
    for release in RELEASES:
        support = SglangSupport.for_version(release.version)
        assert (support.mask_fill_dspark, support.disaggregation, support.dspark_subfolder) == (
            release.mask_fill_dspark,
            release.pd_builtins,
            release.dspark_subfolder,
        )
    # a release without a row is the newest measured one below it
    assert SglangSupport.for_version("0.5.99").disaggregation == BY_VERSION["0.5.23"].pd_builtins
    # no field of the support record has a default that would stand for a release
    defaults = [f.name for f in dataclasses.fields(SglangSupport) if f.default is not dataclasses.MISSING]
    assert defaults == ["dflash_reads_layout"]  # no release of the table reads the keys (PRs only)


def test_a_bundled_drafts_message_names_the_first_release_that_looks_in_dspark(tmp_path) -> None:
    """0.5.17 refuses a draft only in the target's dspark/ subfolder, naming the release that looks."""
    import json

    import pytest

    from sglang_dspark_plugin.errors import DsparkHarvestError
    from sglang_dspark_plugin.serving import LaunchRequest, make_plan

    target = tmp_path / "target"
    (target / "dspark").mkdir(parents=True)
    (target / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    (target / "dspark" / "config.json").write_text(json.dumps({"architectures": ["DSparkDraftModel"]}))
    with pytest.raises(DsparkHarvestError) as info:
        make_plan(LaunchRequest(draft=None, target=str(target)), SglangSupport.for_version("0.5.17"))
    assert f"serve with sglang {first_release(lambda r: r.dspark_subfolder)} or later" in info.value.message
