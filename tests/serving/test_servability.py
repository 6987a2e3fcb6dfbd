"""Whether a sglang release's class lists build a draft in the layout the plan chose (sglang-free:
``servability.unbuilt_reason``, one of the plan's checks), and ``inspect``'s per-release verdicts, which
are the plan's own."""

from __future__ import annotations

import json

import pytest
from checkpoints import write_checkpoint
from released_checkpoints import RELEASED

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.releases import BY_VERSION
from sglang_dspark_plugin.releases import TESTED as SGLANG_VERSIONS
from sglang_dspark_plugin.serving.layout import MASK_FILL, MASK_FILL_DSPARK, SHIFTED
from sglang_dspark_plugin.serving.servability import unbuilt_reason

BUILDS = None


@pytest.mark.parametrize(
    ("layout", "arch", "rank", "expected"),
    [
        (SHIFTED, "Qwen3DSparkModel", 8, {"0.5.17": BUILDS, "0.5.23": BUILDS}),
        (SHIFTED, "DFlashDraftModel", 0, {"0.5.17": BUILDS, "0.5.23": BUILDS}),
        (MASK_FILL, "DFlashDraftModel", 0, {"0.5.17": BUILDS, "0.5.23": BUILDS}),
        # a mask-fill drafter keeping its Markov head: DSPARK's dense classes
        (MASK_FILL_DSPARK, "Qwen3DSparkModel", 4, {"0.5.17": BUILDS, "0.5.23": BUILDS}),
        (MASK_FILL_DSPARK, "Gemma4DSparkModel", 4, {"0.5.17": "no mask-fill", "0.5.23": "no mask-fill"}),
        # without a Markov head it loads as DFlashDraftModel on both
        (MASK_FILL, "DSparkDraftModel", 0, {"0.5.17": BUILDS, "0.5.23": BUILDS}),
        (MASK_FILL, "DSparkDraftModel", 4, {"0.5.17": "would drop", "0.5.23": "would drop"}),
        # a class only 0.5.19 and later register
        (MASK_FILL, "DFlash2DraftModel", 0, {"0.5.17": "registers no", "0.5.23": BUILDS}),
        (SHIFTED, "K3DSparkModel", 8, {"0.5.17": "registers no", "0.5.23": "registers no"}),
        (SHIFTED, None, 8, {"0.5.17": "names no architecture", "0.5.23": "names no architecture"}),
    ],
)
def test_the_build_rule(layout, arch, rank, expected):
    for version in SGLANG_VERSIONS:
        why = unbuilt_reason(layout, arch, rank, None, version)
        assert why == expected[version] if expected[version] is BUILDS else expected[version] in why


def test_a_class_sglang_builds_but_the_dspark_arm_does_not_says_so():
    assert "Lfm2DSparkDraftModel" in BY_VERSION["0.5.23"].dspark_classes
    assert "registers no" in unbuilt_reason(SHIFTED, "Lfm2DSparkDraftModel", 8, None, "0.5.17")
    assert "builds Lfm2DSparkDraftModel itself" in unbuilt_reason(
        SHIFTED, "Lfm2DSparkDraftModel", 8, None, "0.5.23"
    )


def test_an_unloadable_layout_is_never_built():
    for layout in (SHIFTED, MASK_FILL, MASK_FILL_DSPARK):
        for version in SGLANG_VERSIONS:
            assert (
                unbuilt_reason(layout, "DSparkDraftModel", 8, "speculators layout", version)
                == "speculators layout"
            )


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
