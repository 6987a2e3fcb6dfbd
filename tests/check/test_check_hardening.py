"""``check`` on hostile checkpoint content and arguments: a typed refusal each, never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED

QUICK = ["--json", "--no-progress", "--num-prompts", "1", "--max-new-tokens", "4"]


def _refused(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, str]:
    code = main(["check", *QUICK, *args])
    captured = capsys.readouterr()
    assert code == 2, captured.out
    assert "Traceback" not in captured.out + captured.err
    return json.loads(captured.out)["error"]


def _edited_drafter(tmp_path: Path, name: str, edit: dict[str, torch.Tensor]) -> Path:
    folder = shutil.copytree(EMBEDDED.drafters[name], tmp_path / f"edited-{name}")
    state = load_file(str(folder / "model.safetensors"))
    state.update(edit)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def test_a_zero_dimensional_confidence_head_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    draft = _edited_drafter(
        tmp_path, "dspark-markov", {"confidence_head.proj.weight": torch.tensor(1.0).half()}
    )
    error = _refused(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert error["kind"] == "invalid" and "confidence_head.proj.weight" in error["message"]


def test_a_layer_index_of_thousands_of_digits_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = "layers." + "9" * 5000 + ".x"
    draft = _edited_drafter(tmp_path, "dflash", {name: torch.zeros(1).half()})
    error = _refused(capsys, "--target", str(EMBEDDED.target), "--draft", str(draft))
    assert error["kind"] == "invalid" and "5000 digits" in error["message"]
    assert len(error["message"]) < 1000  # the name is shortened, not printed whole


def test_a_prompt_token_outside_the_targets_vocabulary_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = shutil.copytree(EMBEDDED.target, tmp_path / "target")
    tokenizer = json.loads((target / "tokenizer.json").read_text())
    vocab = json.loads((target / "config.json").read_text())["vocab_size"]
    token = {"content": "<|beyond|>", "single_word": False, "lstrip": False, "rstrip": False}
    tokenizer["added_tokens"].append({"id": vocab + 10, **token, "normalized": False, "special": True})
    (target / "tokenizer.json").write_text(json.dumps(tokenizer))
    draft = str(EMBEDDED.drafters["dflash"])
    error = _refused(
        capsys, "--target", str(target), "--draft", draft, "--prompt", "def f(): <|beyond|> return"
    )
    assert error["kind"] == "invalid" and "vocabulary" in error["message"]


@pytest.mark.parametrize("prompt", ["abc\udcff", "   "], ids=["not-utf8", "blank"])
def test_a_prompt_that_is_not_text_is_refused_before_anything_loads(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, prompt: str
) -> None:
    from sglang_dspark_plugin.check import cli

    monkeypatch.setattr(cli, "load_target_model", lambda *a, **k: pytest.fail("the target was loaded"))
    error = _refused(capsys, "--prompt", prompt)
    assert error["kind"] == "usage" and "--prompt" in error["message"]
