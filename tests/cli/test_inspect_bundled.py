"""``dspark-harvest inspect TARGET`` on a target that bundles its draft where sglang's DSPARK finds it
(a ``dspark/`` subfolder, or ``dspark_*`` keys in its config.json): the draft's census, the form and
place, and what each sglang release serves with no draft path, decided by the serving plan itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bundled_checkpoints import hub_cache, keys_target, subfolder_target

from sglang_dspark_plugin import ENV_VAR
from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.errors import DsparkHarvestError

FLAG = "--speculative-draft-model-path"


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)


def _json(capsys: pytest.CaptureFixture[str], target: str | Path) -> tuple[int, dict]:
    rc = main(["inspect", str(target), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return rc, json.loads(captured.out)


def _text(capsys: pytest.CaptureFixture[str], target: str | Path) -> str:
    assert main(["inspect", str(target)]) == 0
    return capsys.readouterr().out


def _served(out: dict) -> dict[str, tuple[str | None, bool | None]]:
    return {s["version"]: (s["builtin"], s["sample_from_anchor"]) for s in out["servability"]}


def test_a_dspark_subfolder_is_reported_as_the_draft_sglang_0523_finds(capsys, tmp_path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    rc, out = _json(capsys, target)
    assert rc == 0
    assert out["bundled"] == {
        "form": "dspark_subfolder",
        "target": str(target),
        "checkpoint": str(target / "dspark"),
        "draft_path": str(target / "dspark"),
        "found_by": ["0.5.23"],
    }
    # the same census report as the subfolder inspected by its own path
    assert (out["checkpoint"], out["architecture"], out["harvest"]) == (
        str(target / "dspark"),
        "Qwen3DSparkModel",
        "dspark",
    )
    assert (out["block_size"], out["n_drafts"], out["verify_window"]) == (7, 7, 8)
    assert out["evidence"] and out["manifest"]["checkpoint"] == str(target / "dspark")
    assert _served(out) == {"0.5.17": (None, None), "0.5.23": ("DSPARK", True)}
    old = next(s for s in out["servability"] if s["version"] == "0.5.17")
    assert "0.5.23" in old["how"] and FLAG in old["how"]  # the builtin refuses it there too
    text = _text(capsys, target)
    assert f"target         {target}" in text and "bundled        dspark_subfolder" in text
    assert f"checkpoint     {target / 'dspark'}" in text and "harvest        dspark" in text


def test_a_mask_fill_subfolder_draft_is_served_in_dsparks_mask_fill_layout(capsys, tmp_path) -> None:
    rc, out = _json(capsys, subfolder_target(tmp_path / "target", "drafter-dspark-maskfill"))
    assert rc == 0 and out["harvest"] == "dflash" and out["bundled"]["form"] == "dspark_subfolder"
    assert _served(out)["0.5.23"] == ("DSPARK", False)


def test_a_bundled_draft_only_dflash_serves_is_reported_and_needs_its_path(capsys, tmp_path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dflash")
    rc, out = _json(capsys, target)
    assert rc == 0 and out["harvest"] == "dflash" and out["bundled"]["form"] == "dspark_subfolder"
    assert not any(s["servable"] for s in out["servability"])  # only DSPARK looks in the target
    new = next(s for s in out["servability"] if s["version"] == "0.5.23")
    assert FLAG in new["how"] and str(target / "dspark") in new["how"]


@pytest.mark.parametrize("as_json", [True, False])
def test_dspark_keys_are_reported_as_the_target_serving_its_own_head(capsys, tmp_path, as_json) -> None:
    target = keys_target(tmp_path / "target")
    if not as_json:
        text = _text(capsys, target)
        assert "bundled        dspark_keys" in text and "DeepseekV4ForCausalLMDSpark" in text
        assert "cannot serve" not in text
        return
    rc, out = _json(capsys, target)
    assert rc == 0
    bundled = out["bundled"]
    assert (bundled["form"], bundled["checkpoint"], bundled["found_by"]) == (
        "dspark_keys",
        str(target),
        ["0.5.17", "0.5.23"],
    )
    assert (out["harvest"], out["block_size"], out["n_drafts"], out["verify_window"]) == ("dspark", 5, 5, 6)
    assert _served(out) == {"0.5.17": ("DSPARK", True), "0.5.23": ("DSPARK", True)}
    assert all("DeepseekV4ForCausalLMDSpark" in s["how"] for s in out["servability"])


def test_a_subfolder_beside_dspark_keys_is_named_not_served(capsys, tmp_path) -> None:
    target = keys_target(tmp_path / "target")
    donor = subfolder_target(tmp_path / "donor", "drafter-dspark-markov")
    (donor / "dspark").rename(target / "dspark")
    rc, out = _json(capsys, target)
    assert rc == 0 and out["bundled"]["form"] == "dspark_keys"
    assert any(str(target / "dspark") in w and "not served" in w for w in out["warnings"])


def test_the_harvest_override_reaches_the_bundled_plans(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(ENV_VAR, "dflash")
    rc, out = _json(capsys, keys_target(tmp_path / "target"))
    assert rc == 0 and (out["harvest"], out["source"]) == ("dflash", "env")
    assert not any(s["servable"] for s in out["servability"])  # a dspark_keys head is DSPARK's only
    assert all(ENV_VAR in s["how"] for s in out["servability"])


def test_a_hub_target_in_the_cache_is_reported_at_its_snapshot(capsys, tmp_path, monkeypatch) -> None:
    commit = "0123456789abcdef0123456789abcdef01234567"
    folder = subfolder_target(tmp_path / "main", "drafter-dspark-markov")
    root = hub_cache(tmp_path / "hub", "org/tiny-target", {"main": (commit, folder)})
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc, out = _json(capsys, "org/tiny-target")
    assert rc == 0 and out["bundled"]["target"] == "org/tiny-target"
    assert Path(out["checkpoint"]) == root / "models--org--tiny-target" / "snapshots" / commit / "dspark"
    assert _served(out)["0.5.23"] == ("DSPARK", True)


def test_a_target_without_a_bundled_draft_is_refused_as_before(capsys, tmp_path) -> None:
    target = subfolder_target(tmp_path / "target", None)
    with pytest.raises(DsparkHarvestError) as info:
        census(target)  # what inspect has always said of a target: not a drafter
    rc, out = _json(capsys, target)
    assert rc == 2 and out == {"error": info.value.to_json()}
    assert info.value.kind == "unsupported"


def test_a_draft_inspected_by_its_own_path_reports_no_bundle(capsys, tmp_path) -> None:
    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    rc, out = _json(capsys, target / "dspark")
    assert rc == 0 and out["bundled"] is None and out["checkpoint"] == str(target / "dspark")
    assert _served(out)["0.5.17"] == ("DSPARK", True)  # named by its path, 0.5.17 serves it too
    assert "bundled" not in _text(capsys, target / "dspark")


def test_inspecting_a_bundled_target_imports_neither_torch_nor_sglang(tmp_path) -> None:
    import os
    import subprocess
    import sys

    target = subfolder_target(tmp_path / "target", "drafter-dspark-markov")
    code = (
        "import sys, io, contextlib\n"
        "from sglang_dspark_plugin.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['inspect', {str(target)!r}, '--json'])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang')]\n"
        "print(rc, sorted(heavy))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 []"
