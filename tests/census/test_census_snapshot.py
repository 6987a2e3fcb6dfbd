"""The census verdicts over the fixture checkpoints that predate the family work, byte for byte.

``census_snapshot.json`` was written from main before families, exporter dialects and speculators
checks were added; every field of every ``DflashCfg`` (evidence and notes included), or the kind and
message of every refusal, must stay as it was. Regenerate only on purpose:

    python tests/census/test_census_snapshot.py > tests/census/census_snapshot.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from checkpoints import FIXTURES, write_checkpoint

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.errors import DsparkHarvestError

SNAPSHOT = Path(__file__).with_name("census_snapshot.json")


def verdict(folder: Path) -> dict[str, Any]:
    """The census of ``folder`` as JSON, with the folder's path replaced by ``<ckpt>``."""
    try:
        out: dict[str, Any] = {"census": census(folder).to_json()}
    except DsparkHarvestError as exc:
        out = {"refused": exc.to_json()}
    return json.loads(json.dumps(out).replace(str(folder), "<ckpt>"))


def verdicts(names: list[str]) -> dict[str, Any]:
    """``verdict`` of each named fixture, written into a fresh folder."""
    with tempfile.TemporaryDirectory() as root:
        return {name: verdict(write_checkpoint(root, name)) for name in names}


def test_existing_fixtures_keep_their_census_byte_for_byte():
    expected = json.loads(SNAPSHOT.read_text())
    assert len(expected) >= 30  # the whole set of the time, not a sample
    assert json.dumps(verdicts(list(expected)), indent=1, sort_keys=True) == json.dumps(
        expected, indent=1, sort_keys=True
    )


if __name__ == "__main__":
    sys.stdout.write(json.dumps(verdicts(list(FIXTURES)), indent=1, sort_keys=True) + "\n")
