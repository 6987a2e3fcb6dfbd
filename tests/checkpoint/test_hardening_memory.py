"""Memory through what is absent: what a config implies is bounded by the tensors actually present,
entry counts are bounded before parsing, and nothing is allocated on a claim the files do not back."""

from __future__ import annotations

import json
import shutil
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.checkpoint.bounds import MAX_HEADER_TENSORS, MAX_TENSORS, METADATA_MEMBERS
from sglang_dspark_plugin.checkpoint.shards import read_index, read_safetensors_header
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import InvalidCheckpointError

DRAFT = {"architectures": ["DFlashDraftModel"], "block_size": 8}


def _must_not_run(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("refused before any tensor is read")


class _Spy:
    """Wraps the drafter class and records the device each instance was built on."""

    def __init__(self, cls: type) -> None:
        self.cls, self.devices = cls, []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        self.devices.append(torch.empty(0).device.type)
        return self.cls(*args, **kwargs)


def _drafter_without(tmp_path: Path, absent: str, **changes: Any) -> Path:
    folder = Path(shutil.copytree(EMBEDDED.drafters["dflash"], tmp_path / "drafter"))
    weights = load_file(str(folder / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if absent not in k}, str(folder / "model.safetensors"))
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize(
    "absent, changes, says",
    [
        ("layers.", {"num_hidden_layers": 2000, "layer_types": ["full_attention"] * 2000}, "0 layer(s)"),
        (".mlp.", {"intermediate_size": 3_000_000}, "mlp"),
        ("self_attn.q_proj", {}, "q_proj"),
    ],
)
def test_a_config_is_bounded_by_the_tensors_present_before_anything_is_allocated(
    tmp_path, monkeypatch, absent, changes, says
):
    from sglang_dspark_plugin.engine import drafter

    spy = _Spy(drafter.DFlashDraftModel)
    monkeypatch.setattr(drafter, "DFlashDraftModel", spy)
    monkeypatch.setattr(drafter, "read_state_dict", _must_not_run)
    folder = _drafter_without(tmp_path, absent, **changes)
    with pytest.raises(InvalidCheckpointError) as info:
        drafter.load_drafter(folder)
    assert says in info.value.message
    assert set(spy.devices) <= {"meta"}  # at most a skeleton without memory


def _traced_peak(fn: Any) -> tuple[BaseException | None, int]:
    tracemalloc.start()
    try:
        fn()
        error = None
    except InvalidCheckpointError as exc:
        error = exc
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return error, peak


def test_an_index_of_too_many_tiny_entries_is_refused_before_it_is_parsed(tmp_path):
    entries = MAX_TENSORS + METADATA_MEMBERS + 1
    path = tmp_path / "model.safetensors.index.json"
    path.write_text('{"weight_map":{' + ",".join(f'"{i:x}":"a"' for i in range(entries)) + "}}")
    error, peak = _traced_peak(lambda: read_index(path))
    assert error is not None and "JSON members" in error.message
    assert str(MAX_TENSORS + METADATA_MEMBERS) in error.message and "MAX_TENSORS" in error.message
    assert peak < 2 * path.stat().st_size  # the file's bytes, not ~250 bytes an entry


def test_an_index_at_the_bound_is_read_and_its_shards_checked_once(tmp_path, monkeypatch):
    import sglang_dspark_plugin.checkpoint.shards as files

    calls: list[str] = []
    real = files.PurePath
    monkeypatch.setattr(files, "PurePath", lambda p: calls.append(p) or real(p))
    path = tmp_path / "model.safetensors.index.json"
    weight_map = {f"w{i}": f"model-0000{i % 3}-of-00003.safetensors" for i in range(30_000)}
    path.write_text(json.dumps({"metadata": {"total_size": 1}, "weight_map": weight_map}))
    assert read_index(path) == weight_map
    assert len(calls) == 3  # one check per distinct shard, not per tensor


def test_a_header_of_too_many_tensors_is_refused_before_it_is_parsed(tmp_path):
    n = MAX_HEADER_TENSORS + METADATA_MEMBERS // 4 + 1  # four members a tensor
    raw = (
        "{" + ",".join(f'"{i:x}":{{"dtype":"U8","shape":[0],"data_offsets":[0,0]}}' for i in range(n)) + "}"
    ).encode()
    path = tmp_path / "model.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw)
    error, peak = _traced_peak(lambda: read_safetensors_header(path))
    assert error is not None and "JSON members" in error.message
    # the file is complete: the refusal names the bound it exceeds, not a truncation
    assert "MAX_HEADER_TENSORS" in error.message and str(MAX_HEADER_TENSORS) in error.message
    assert "truncated" not in error.message and "shards" in error.message
    assert peak < 2 * len(raw)


def test_the_tensors_of_all_shards_together_are_bounded(tmp_path, monkeypatch):
    import sglang_dspark_plugin.checkpoint.bounds as bounds

    monkeypatch.setattr(bounds, "MAX_TENSORS", 5)  # read at call time, so a small bound is enough here
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(DRAFT))
    for shard in range(2):
        save_file(
            {f"s{shard}.w{i}": np.zeros(1, np.float16) for i in range(3)},
            str(folder / f"{shard}.safetensors"),
        )
    with pytest.raises(InvalidCheckpointError) as info:
        census(folder)
    assert "more than 5 tensors" in info.value.message and "1.safetensors" in info.value.message


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"num_hidden_layers": 3000, "layer_types": ["full_attention"] * 3000}, "hold 8 layer(s)"),
        ({"intermediate_size": 3_000_000}, "parameters but the weights hold"),
        ({"vocab_size": 10**8}, "parameters but the weights hold"),
    ],
)
def test_a_target_config_is_bounded_by_its_weights_before_transformers_allocates(
    tmp_path, monkeypatch, changes, says
):
    import torch
    import transformers

    from sglang_dspark_plugin.cli import check as check_cmd

    target = Path(shutil.copytree(EMBEDDED.target, tmp_path / "target"))
    config = json.loads((target / "config.json").read_text())
    config.update(changes)
    (target / "config.json").write_text(json.dumps(config))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", _must_not_run)
    with pytest.raises(InvalidCheckpointError) as info:
        check_cmd.load_target_model(target, torch.device("cpu"), torch.float32)
    assert says in info.value.message and "config.json" in info.value.where
    assert "bfloat16" not in info.value.message  # the config is the problem, not the machine


def _draft(tmp_path: Path, name: str, **changes: Any) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**DRAFT, **changes}))
    return folder


@pytest.mark.parametrize(
    "changes",
    [
        {"dflash_config": {"target_layer_ids": [1] * 300}},
        {"target_layer_ids": [2, 10**30]},
        {"dspark_target_layer_ids": list(range(5000))},
        {"aux_hidden_state_layer_ids": [4096]},
    ],
)
def test_layer_id_lists_are_bounded_before_they_are_read(tmp_path, changes):
    from sglang_dspark_plugin.checkpoint.bounds import MAX_LAYER_IDS

    with pytest.raises(InvalidCheckpointError) as info:
        census(_draft(tmp_path, "ckpt", **changes))
    assert str(MAX_LAYER_IDS) in info.value.message and "layer_ids" in info.value.where
    assert len(info.value.message) < 500


@pytest.mark.parametrize(
    "changes",
    [
        {"architectures": ["X" * 100_000], "speculators_model_type": "dflash"},  # a name, no vote
        {"shift_label": list(range(100_000))},
        {"dflash_config": {"projector_type": "p" * 100_000}},
    ],
)
def test_a_setting_of_megabytes_never_becomes_evidence_in_a_log_line(tmp_path, capsys, changes):
    from sglang_dspark_plugin.checkpoint.bounds import MAX_SIGNAL_CHARS
    from sglang_dspark_plugin.cli import main

    folder = _draft(tmp_path, "ckpt", **changes)
    with pytest.raises(InvalidCheckpointError) as info:
        census(folder)
    assert str(MAX_SIGNAL_CHARS) in info.value.message and len(info.value.message) < 500
    assert main(["inspect", "--json", str(folder)]) == 2
    assert len(capsys.readouterr().out) < 1000  # the report of a refusal, not of the value


# -- check: the decode bounded by the target's context -------------------------------------------------------


def test_check_refuses_max_new_tokens_past_the_context_before_loading(capsys, monkeypatch):
    from sglang_dspark_plugin.cli import main

    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    assert main(["check", "--json", "--no-progress", "--max-new-tokens", str(10**9)]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and error["where"] == "--max-new-tokens" and "1024" in error["message"]


def test_check_refuses_a_prompt_past_the_context_before_any_prefill(capsys, monkeypatch):
    from sglang_dspark_plugin.cli import main

    monkeypatch.setattr("sglang_dspark_plugin.check.cli.measure", _must_not_run)
    prompt = " ".join(["the cat sat on the mat"] * 2000)  # 12,000 words
    assert main(["check", "--json", "--no-progress", "--max-new-tokens", "8", "--prompt", prompt]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and error["where"] == "--prompt" and "context of 1024" in error["message"]


def test_the_context_is_read_where_transformers_configs_put_it():
    from sglang_dspark_plugin.engine.context import check_context, target_context

    assert target_context({"max_position_embeddings": 4096}) == 4096
    assert target_context({"n_positions": 1024}) == 1024
    assert (
        target_context({"text_config": {"max_position_embeddings": 8192}, "max_position_embeddings": 1})
        == 8192
    )
    assert target_context({"max_position_embeddings": True}) is None and target_context(None) is None
    check_context(1024, [1000], 8, 16)  # 1024 positions exactly: fine
    check_context(None, [10**6], 10**9, 16)  # no declared context: nothing to compare
