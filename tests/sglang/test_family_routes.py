"""A DSpark-family class the census recognises by its naming pattern is refused by both arms during
argument resolution, with a typed error: the dspark arm serves the dense classes only, and the DFlash
worker would drop or misbuild the family's DSpark head."""

from __future__ import annotations

import pytest
from checkpoints import write_checkpoint  # tests/ is on sys.path (tests/sglang/conftest.py)
from released_checkpoints import RELEASED

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.errors import UnsupportedCheckpointError
from sglang_dspark_plugin.harvest import DsparkHarvest
from sglang_dspark_plugin.serving import layout_for
from sglang_dspark_plugin.serving.servability import check_servable
from sglang_dspark_plugin.sglang_plugin import resolution


def _check(tmp_path, config_changes):
    """The plan's servability check on this sglang for the released LFM2 DSpark drafter, changed."""
    fx = RELEASED["lfm2_dspark"]
    changed = type(fx)(fx.name, {**fx.config, **config_changes}, fx.tensors, fx.expect)
    cfg = census(write_checkpoint(tmp_path, changed))
    explained = DsparkHarvest.explain(cfg, environ={})
    layout = layout_for(explained.harvest, cfg)
    return explained, lambda: check_servable(cfg, layout, explained, None, resolution.sglang_support())


@pytest.mark.parametrize(("changes", "harvest"), [({}, "dspark"), ({"sample_from_anchor": False}, "dflash")])
def test_a_pattern_family_drafter_is_refused_by_either_arm(tmp_path, changes, harvest):
    explained, check = _check(tmp_path, changes)
    assert explained.harvest.name() == harvest
    with pytest.raises(UnsupportedCheckpointError) as info:
        check()
    assert "Lfm2DSparkDraftModel" in info.value.message and info.value.kind == "unsupported"
