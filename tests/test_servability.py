"""Which sglang version serves a classified drafter, and with which builtin: a question apart from the
census, answered from sglang's class lists without importing sglang; ``inspect`` prints it."""

from __future__ import annotations

import json

import pytest
from checkpoints import write_checkpoint
from released_checkpoints import RELEASED

from sglang_dspark_plugin.architectures import SGLANG_BUILDS, SGLANG_VERSIONS
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving.servability import servability

DFLASH, DSPARK = DsparkHarvest.DFLASH, DsparkHarvest.DSPARK


def _by_version(harvest, arch, rank=0, unloadable=None):
    return {
        s.version: (s.builtin, s.sample_from_anchor) for s in servability(harvest, arch, rank, unloadable)
    }


def test_every_version_is_answered():
    assert [s.version for s in servability(DSPARK, "DSparkDraftModel", 8)] == list(SGLANG_VERSIONS)


@pytest.mark.parametrize(
    ("harvest", "arch", "rank", "expected"),
    [
        (DSPARK, "Qwen3DSparkModel", 8, {"0.5.17": ("DSPARK", True), "0.5.23": ("DSPARK", True)}),
        (DSPARK, "DFlashDraftModel", 0, {"0.5.17": ("DSPARK", True), "0.5.23": ("DSPARK", True)}),
        (DFLASH, "DFlashDraftModel", 0, {"0.5.17": ("DFLASH", None), "0.5.23": ("DFLASH", None)}),
        # a mask-fill drafter with a Markov head: 0.5.23's DSPARK mask-fill layout only
        (DFLASH, "Qwen3DSparkModel", 4, {"0.5.17": (None, None), "0.5.23": ("DSPARK", False)}),
        # without a Markov head it loads as DFlashDraftModel on both
        (DFLASH, "DSparkDraftModel", 0, {"0.5.17": ("DFLASH", None), "0.5.23": ("DFLASH", None)}),
        # a class only 0.5.23 registers
        (DFLASH, "DFlash2DraftModel", 0, {"0.5.17": (None, None), "0.5.23": ("DFLASH", None)}),
        (DSPARK, "K3DSparkModel", 8, {"0.5.17": (None, None), "0.5.23": (None, None)}),
        (DSPARK, None, 8, {"0.5.17": (None, None), "0.5.23": (None, None)}),
    ],
)
def test_servability_rule(harvest, arch, rank, expected):
    assert _by_version(harvest, arch, rank) == expected


def test_a_class_sglang_builds_but_the_dspark_arm_does_not_says_so():
    assert "Lfm2DSparkDraftModel" in SGLANG_BUILDS["0.5.23"]["DSPARK"]
    old, new = servability(DSPARK, "Lfm2DSparkDraftModel", 8)
    assert not old.servable and "registers no" in old.how
    assert not new.servable and "builds Lfm2DSparkDraftModel itself" in new.how


def test_an_unloadable_layout_is_never_served():
    assert _by_version(DSPARK, "DSparkDraftModel", 8, "speculators layout") == {
        v: (None, None) for v in SGLANG_VERSIONS
    }


def _inspect(capsys, path, *flags):
    assert main(["inspect", str(path), *flags]) == 0
    return capsys.readouterr().out


def test_inspect_reports_servability_next_to_the_harvest(capsys):
    report = json.loads(_inspect(capsys, EMBEDDED.drafters["dspark-maskfill"], "--json"))
    assert report["harvest"] == "dflash"
    served = {s["version"]: s for s in report["servability"]}
    assert served["0.5.17"]["servable"] is False and "mask-fill" in served["0.5.17"]["how"]
    assert (served["0.5.23"]["builtin"], served["0.5.23"]["sample_from_anchor"]) == ("DSPARK", False)
    text = _inspect(capsys, EMBEDDED.drafters["dspark-maskfill"])
    assert "sglang 0.5.17  cannot serve" in text and "sglang 0.5.23  DSPARK, sample_from_anchor=false" in text


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("speculators_dspark_default", "speculators-format"),
        ("torchspec_dspark", "TorchSpec-style weight names"),
        ("k3_dspark", "TorchSpec-style weight names"),
        # its dspark_* keys make it a target bundling its head: the plan says sglang loads none from it
        ("deepseek_v4_inference", "architectures[0] = None"),
    ],
)
def test_inspect_says_why_a_released_format_cannot_be_served(capsys, tmp_path, name, why):
    report = json.loads(_inspect(capsys, write_checkpoint(tmp_path, RELEASED[name]), "--json"))
    assert report["harvest"] == RELEASED[name].expect
    assert all(not s["servable"] and why in s["how"] for s in report["servability"])
