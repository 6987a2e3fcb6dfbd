"""``dspark-harvest inspect``: exit codes, the JSON schema, readable refusals, no torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from checkpoints import FIXTURES, write_checkpoint

from sglang_dspark_plugin import ENV_VAR
from sglang_dspark_plugin.cli import main

ALL = list(FIXTURES.values())
REQUIRED = {
    "harvest": str,
    "source": str,
    "block_size": int,
    "first_row": int,
    "n_drafts": int,
    "verify_window": int,
    "evidence": list,
    "manifest": dict,
}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("cli")
    return {name: write_checkpoint(root, name) for name in FIXTURES}


@pytest.fixture(autouse=True)
def _no_override(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def _run_json(capsys, *argv):
    rc = main(["inspect", *argv, "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    return rc, json.loads(captured.out)


@pytest.mark.parametrize("fx", ALL, ids=[f.name for f in ALL])
def test_json_for_every_fixture(capsys, written, fx):
    rc, out = _run_json(capsys, str(written[fx.name]))
    if fx.resolves:
        assert rc == 0
        for key, kind in REQUIRED.items():
            assert isinstance(out[key], kind), key
        assert out["harvest"] == fx.expect and out["source"] == fx.expect_source
        assert out["block_size"] == fx.block_size
        dspark = fx.expect == "dspark"
        assert out["first_row"] == (0 if dspark else 1)
        assert out["n_drafts"] == (fx.block_size if dspark else fx.block_size - 1)
        assert out["verify_window"] == out["n_drafts"] + 1
        for signal in out["evidence"]:
            assert set(signal) >= {"signal", "value", "tier", "vote"}
            assert signal["tier"] in (0, 1, 2) and signal["vote"] in (None, "dflash", "dspark")
        manifest = out["manifest"]
        assert manifest["producer"] == "inspect"
        for key in ("harvest", "block_size", "first_row", "n_drafts", "verify_window", "source"):
            assert manifest[key] == out[key], key
        assert manifest["checkpoint"] == str(written[fx.name])
    else:
        assert rc == 2
        assert set(out) == {"error"}
        assert out["error"]["kind"] == fx.expect and out["error"]["message"]


@pytest.mark.parametrize("fx", ALL, ids=[f.name for f in ALL])
def test_text_for_every_fixture(capsys, written, fx):
    rc = main(["inspect", str(written[fx.name])])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    if fx.resolves:
        assert rc == 0
        assert f"harvest        {fx.expect}  (source: {fx.expect_source}" in captured.out
        assert f"block_size     {fx.block_size}" in captured.out
    else:
        assert rc == 2
        assert captured.out.startswith(f"dspark-harvest inspect: refused ({fx.expect}): ")


def test_text_lists_each_signal_with_tier_and_vote(capsys, written):
    assert main(["inspect", str(written["dspark_sample_from_anchor_false"])]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()
    assert any("1 explicit" in r and "dflash" in r and "config.json:sample_from_anchor" in r for r in rows)
    assert any("2 structural" in r and "dspark" in r and "config.json:architectures[0]" in r for r in rows)
    assert "n_drafts       7  (rows 1..7, trained offsets +1..+7)" in out


def test_override_is_reported_with_its_warning(capsys, written, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "dflash")
    rc, out = _run_json(capsys, str(written["specforge_dspark"]))
    assert rc == 0 and out["harvest"] == "dflash" and out["source"] == "env"
    assert out["census_harvest"] == "dspark" and out["n_drafts"] == 6
    assert out["warnings"] and out["manifest"]["warnings"] == out["warnings"]
    assert main(["inspect", str(written["specforge_dspark"])]) == 0
    assert "WARNING: MEMRA_DSPARK_HARVEST='dflash' contradicts" in capsys.readouterr().out


def test_override_serves_a_conflicted_checkpoint(capsys, written, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "dspark")
    rc, out = _run_json(capsys, str(written["conflicting_flags"]))
    assert rc == 0 and out["harvest"] == "dspark" and out["n_drafts"] == 5
    assert any("contradictory" in w for w in out["warnings"])


@pytest.mark.parametrize("value", ["", "dpsark", "both"])
def test_bad_env_value_is_kind_env(capsys, written, monkeypatch, value):
    monkeypatch.setenv(ENV_VAR, value)
    rc, out = _run_json(capsys, str(written["specforge_dflash"]))
    assert rc == 2 and out["error"]["kind"] == "env" and ENV_VAR in out["error"]["message"]


def test_a_config_without_block_size_reports_its_harvest_and_an_unknown_width(capsys, tmp_path):
    # a real published DFlash config carries no block size: sglang takes it from its flag
    folder = tmp_path / "published"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["DFlashDraftModel"]}))
    rc, out = _run_json(capsys, str(folder))
    assert rc == 0 and (out["harvest"], out["source"], out["block_size"]) == ("dflash", "census", None)
    assert out["first_row"] == 1 and out["n_drafts"] is None and out["verify_window"] is None
    assert out["block_size_flag"] == "--speculative-dflash-block-size" and out["manifest"] is None
    assert main(["inspect", str(folder)]) == 0
    text = capsys.readouterr().out
    assert "block_size     unknown" in text and "--speculative-dflash-block-size" in text


def test_missing_path_is_invalid(capsys, tmp_path):
    rc, out = _run_json(capsys, str(tmp_path / "nope"))
    assert rc == 2 and out["error"]["kind"] == "invalid"


def test_real_subprocess(written):
    ok = subprocess.run(
        [sys.executable, "-m", "sglang_dspark_plugin", "inspect", str(written["zlab_dflash"]), "--json"],
        capture_output=True,
        text=True,
        env={**_clean_env(), ENV_VAR: "dspark"},
    )
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert (out["harvest"], out["source"], out["n_drafts"], out["census_harvest"]) == (
        "dspark",
        "env",
        16,
        "dflash",
    )
    refused = subprocess.run(
        [sys.executable, "-m", "sglang_dspark_plugin", "inspect", str(written["domino_under_dflash_name"])],
        capture_output=True,
        text=True,
        env=_clean_env(),
    )
    assert refused.returncode == 2
    assert "Traceback" not in refused.stdout + refused.stderr
    assert "refused (unsupported)" in refused.stdout and "third geometry" in refused.stdout


def test_inspect_never_imports_torch(written):
    code = (
        "import sys, io, contextlib\n"
        "from sglang_dspark_plugin.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main(['inspect', {str(written['specforge_dspark'])!r}, '--json'])\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in ('torch', 'sglang')]\n"
        "print(rc, sorted(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0 []"


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != ENV_VAR}
