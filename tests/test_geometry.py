"""RoundGeometry and the geometry manifest."""

from __future__ import annotations

import json

import pytest

import sglang_dspark_plugin
from sglang_dspark_plugin import DflashCfg, DsparkHarvest, RoundGeometry, Signal, build_manifest
from sglang_dspark_plugin.census.draft_config import TIER_STRUCTURAL
from sglang_dspark_plugin.errors import GeometryError
from sglang_dspark_plugin.geometry import MANIFEST_SCHEMA, manifest_json

CONVENTIONS = list(DsparkHarvest)


@pytest.mark.parametrize("harvest", CONVENTIONS)
@pytest.mark.parametrize("b", range(1, 65))
def test_harvested_rows_are_trained_for_offsets_1_to_gamma(harvest, b):
    expected_drafts = b - 1 if harvest is DsparkHarvest.DFLASH else b
    if expected_drafts < 1:
        with pytest.raises(GeometryError):
            RoundGeometry(harvest, b)
        return
    geo = RoundGeometry(harvest, b)
    assert geo.gamma == geo.n_drafts == expected_drafts
    # The invariant: draft j is trained to predict anchor+j, for j = 1..gamma, in order.
    assert geo.trained_offsets == tuple(range(1, geo.gamma + 1))
    assert geo.verify_window == geo.gamma + 1
    # Every harvested row exists in the block of b rows.
    assert geo.harvested_rows[0] == geo.first_row
    assert geo.harvested_rows[-1] <= b - 1
    assert len(geo.harvested_rows) == geo.gamma


@pytest.mark.parametrize("b", [0, -1, -64])
def test_blocks_without_rows_are_refused_by_both(b):
    for harvest in CONVENTIONS:
        with pytest.raises(GeometryError):
            RoundGeometry(harvest, b)


def test_the_two_conventions_differ_by_one_row_and_one_draft():
    mask_fill, shifted = RoundGeometry(DsparkHarvest.DFLASH, 7), RoundGeometry(DsparkHarvest.DSPARK, 7)
    assert (mask_fill.first_row, mask_fill.gamma, mask_fill.verify_window) == (1, 6, 7)
    assert (shifted.first_row, shifted.gamma, shifted.verify_window) == (0, 7, 8)
    assert mask_fill.harvested_rows == (1, 2, 3, 4, 5, 6)
    assert shifted.harvested_rows == (0, 1, 2, 3, 4, 5, 6)


def test_to_json_names_the_geometry():
    # shifted, b = 5: rows 0..4 are drafts 1..5, verified in a window of 6.
    assert RoundGeometry(DsparkHarvest.DSPARK, 5).to_json() == {
        "harvest": "dspark",
        "block_size": 5,
        "first_row": 0,
        "n_drafts": 5,
        "gamma": 5,
        "verify_window": 6,
        "harvested_rows": [0, 1, 2, 3, 4],
        "trained_offsets": [1, 2, 3, 4, 5],
    }


def test_manifest_carries_geometry_and_provenance():
    signal = Signal("config.json:architectures[0]", "DSparkDraftModel", TIER_STRUCTURAL, "dspark")
    cfg = DflashCfg(
        path="some/ckpt",
        block_size=9,
        architecture="DSparkDraftModel",
        mask_token_id=3,
        target_layer_ids=(1, 2),
        evidence=(signal,),
        deciding_tier=TIER_STRUCTURAL,
    )
    resolution = DsparkHarvest.explain(cfg, environ={"MEMRA_DSPARK_HARVEST": "dflash"})
    geo = RoundGeometry(resolution.harvest, cfg.block_size)
    manifest = build_manifest(geo, resolution, cfg, producer="test", extra={"run": 7})
    assert manifest["schema"] == MANIFEST_SCHEMA
    assert manifest["harvest"] == "dflash" and manifest["n_drafts"] == 8 and manifest["first_row"] == 1
    assert manifest["source"] == "env" and manifest["env_value"] == "dflash"
    assert manifest["census_harvest"] == "dspark"
    assert manifest["checkpoint"] == "some/ckpt" and manifest["target_layer_ids"] == [1, 2]
    assert manifest["evidence"] == [signal.to_json()]
    assert manifest["warnings"] and "contradicts" in manifest["warnings"][0]
    assert manifest["producer"] == "test" and manifest["run"] == 7
    # the running code's own version, installed or not (a source folder on PYTHONPATH too)
    assert manifest["versions"]["sglang-dspark-plugin"] == sglang_dspark_plugin.__version__
    text = manifest_json(manifest)
    assert json.loads(text) == json.loads(json.dumps(manifest, default=str))
    assert text == manifest_json(dict(reversed(list(manifest.items()))))  # key order does not matter
