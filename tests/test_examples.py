"""The examples in README.md and docs/ are real: each generated block matches a fresh run of its command
(timings aside), and the README's exit-code table is check's own."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import examples  # noqa: E402

from sglang_dspark_plugin.check.verdicts import VERDICTS  # noqa: E402


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)


def test_every_generated_example_matches_a_real_run() -> None:
    found = examples.examples()
    commands = {ex.command.split()[1] for ex in found}
    assert {"check", "inspect"} <= commands  # the README's two main examples are generated
    assert examples.differences(found) == []


def test_the_comparison_would_catch_a_stale_example(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    command = "dspark-harvest inspect sglang_dspark_plugin/embedded/drafter-dspark"
    real = examples.run(command)
    stale = real.replace("target_layers  [1, 4, 6]", "target_layers  [1, 4, 7]")
    assert stale != real
    doc.write_text(f"{examples.MARKER}\n```text\n$ {command}\n{stale}```\n")
    assert len(examples.differences(examples.examples([doc]))) == 1


def test_the_readme_lists_every_exit_code_of_check() -> None:
    readme = (ROOT / "README.md").read_text()
    for verdict, (code, _) in VERDICTS.items():
        assert re.search(rf"^\| {code} \| `{verdict}` \|", readme, re.M), verdict


def test_the_readme_lists_every_refusal_kind_with_its_errors() -> None:
    import sglang_dspark_plugin.errors as errors

    readme = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| (.+?) \|", readme, re.M))
    for name in errors.__all__:
        cls = getattr(errors, name)
        if cls is errors.DsparkHarvestError:
            continue
        assert cls.kind in rows, f"README's refusal table has no row for kind {cls.kind!r}"
        assert f"`{name}`" in rows[cls.kind], f"README's {cls.kind!r} row omits {name}"


def test_the_examples_run_on_the_cpu_where_torch_sees_a_gpu() -> None:
    """The docs' examples are CPU runs: on a GPU machine ``--device auto`` must not make them CUDA runs."""
    from unittest import mock

    with (
        mock.patch("torch.cuda.is_available", return_value=True),
        mock.patch("torch.cuda.device_count", return_value=1),
    ):
        out = examples.run("dspark-harvest check --num-prompts 1 --max-new-tokens 4 --no-progress")
    assert "device cpu, float32" in out
