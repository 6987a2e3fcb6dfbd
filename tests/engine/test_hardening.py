"""Bad input, one test per class: every one ends in a typed refusal that says what, where and how to fix.

Hangs (FIFOs and other non-regular files), paths outside the checkpoint, memory (decompression bombs,
absurd sizes), tracebacks (permissions, names, odd paths, devices, plots, settings, corrupt files),
loose acceptance (duplicate JSON keys, look-alike environment values, BOMs) and unhelpful messages.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import resource
import shutil
import subprocess
import sys
import threading
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

from sglang_dspark_plugin import ENV_VAR, DsparkHarvest
from sglang_dspark_plugin.census import MAX_STATE_PICKLE_BYTES, census, training_state
from sglang_dspark_plugin.census.architectures import FAMILY, SGLANG_DSPARK_ARM, family_of
from sglang_dspark_plugin.checkpoint.files import MAX_CONFIG_BYTES, describe
from sglang_dspark_plugin.cli import check as check_cmd
from sglang_dspark_plugin.cli import main
from sglang_dspark_plugin.embedded import EMBEDDED
from sglang_dspark_plugin.errors import (
    CensusConflictError,
    DsparkHarvestError,
    HarvestEnvError,
    InvalidCheckpointError,
    UsageError,
)
from sglang_dspark_plugin.serving.capture import uncapturable_layers, uncapturable_message

DRAFT = {"architectures": ["DFlashDraftModel"], "block_size": 8, "num_target_layers": 8}


def _write(folder: Path, config: Any = None, *, raw: bytes | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_bytes(raw if raw is not None else json.dumps(config or DRAFT).encode())
    return folder


def _safetensors(path: Path, names: tuple[str, ...] = ("fc.weight",)) -> None:
    save_file({n: np.zeros((2, 2), dtype=np.float16) for n in names}, str(path))


def _finishes(fn: Any, seconds: float = 20.0) -> Any:
    """Run ``fn`` in a thread; fail (instead of hanging the suite) when it does not finish in time."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{fn} blocked for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _refused(fn: Any, kind: type[DsparkHarvestError] = InvalidCheckpointError) -> DsparkHarvestError:
    with pytest.raises(kind) as info:
        _finishes(fn)
    assert info.value.message
    return info.value


@pytest.fixture
def drafter_copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(EMBEDDED.drafters["dflash"], tmp_path / "drafter"))


def _edit_config(folder: Path, **changes: Any) -> None:
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


# -- hangs: a FIFO or a directory where a file should be ----------------------------------------------


@pytest.mark.parametrize(
    "name", ["config.json", "model.safetensors", "model.safetensors.index.json", "training_state.pt"]
)
def test_a_fifo_named_like_a_checkpoint_file_is_refused_without_blocking(tmp_path, name):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    if name != "config.json":
        _write(folder)
    os.mkfifo(folder / name)
    error = _refused(lambda: census(folder))
    assert "FIFO" in error.message and name in error.message and "not a regular file" in error.message


def test_a_directory_named_config_json_is_not_called_missing(tmp_path):
    folder = tmp_path / "ckpt"
    (folder / "config.json").mkdir(parents=True)
    error = _refused(lambda: census(folder))
    assert "is a directory, not a regular file" in error.message and "missing" not in error.message


def test_the_drafter_loader_refuses_a_fifo_shard_without_blocking(tmp_path):
    from sglang_dspark_plugin.engine.preflight import weight_files

    folder = _write(tmp_path / "ckpt")
    (folder / "shards").mkdir()
    os.mkfifo(folder / "shards" / "a.safetensors")  # in a subfolder: the census never lists it
    index = {"weight_map": {"fc.weight": "shards/a.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    error = _refused(lambda: weight_files(folder))
    assert "FIFO" in error.message and "a.safetensors" in error.message


def test_the_target_loader_refuses_a_fifo_tokenizer_without_blocking(tmp_path):
    target = Path(shutil.copytree(EMBEDDED.target, tmp_path / "target"))
    (target / "tokenizer.json").unlink()
    os.mkfifo(target / "tokenizer.json")
    error = _refused(lambda: check_cmd.check_target_files(target))
    assert "FIFO" in error.message and "tokenizer.json" in error.message


# -- paths outside the checkpoint -------------------------------------------------------------------


@pytest.mark.parametrize("shard", ["../outside.safetensors", "/etc/passwd", "a/../../x.safetensors", "~/x"])
def test_index_entries_outside_the_folder_are_refused_everywhere(tmp_path, shard):
    from sglang_dspark_plugin.engine.preflight import weight_files

    folder = _write(tmp_path / "ckpt")
    _safetensors(tmp_path / "outside.safetensors")  # really there: refused by name, not by absence
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": shard}}))
    for read in (lambda: census(folder), lambda: weight_files(folder)):
        error = _refused(read)
        assert "outside the checkpoint folder" in error.message and "weight_map" in error.where


@pytest.mark.parametrize("value", [1, None, ["a.safetensors"], {"a": 1}, ""])
def test_index_values_that_are_not_file_names_are_refused(tmp_path, value):
    folder = _write(tmp_path / "ckpt")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"fc.weight": value}}))
    error = _refused(lambda: census(folder))
    assert "a shard must be a file name" in error.message and "'fc.weight'" in error.message


def test_a_missing_shard_is_named_by_the_loader_but_not_by_the_census(tmp_path):
    from sglang_dspark_plugin.engine.preflight import weight_files

    folder = _write(tmp_path / "ckpt")
    index = {"weight_map": {"fc.weight": "model-00001-of-00002.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert census(folder).block_size == 8  # the census reads names; a config-only download is fine
    error = _refused(lambda: weight_files(folder))
    assert "model-00001-of-00002.safetensors is missing" in error.message


# -- memory ----------------------------------------------------------------------------------------


def _torch_zip(path: Path, state: Any, *, pickled: bytes | None = None) -> None:
    data = pickled if pickled is not None else pickle.dumps(state, protocol=2)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", data)


def test_a_small_training_state_that_unpacks_to_a_huge_pickle_is_refused(tmp_path):
    folder = _write(tmp_path / "ckpt")
    _torch_zip(
        folder / "training_state.pt", {"strategy": "dspark", "pad": b"\0" * (MAX_STATE_PICKLE_BYTES + 1)}
    )
    assert (folder / "training_state.pt").stat().st_size < 200_000  # small on disk
    error = _refused(lambda: census(folder))
    assert "unpacks to" in error.message and str(MAX_STATE_PICKLE_BYTES) in error.message


def test_a_config_json_of_gigabytes_is_refused_without_reading_it(tmp_path):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    with open(folder / "config.json", "wb") as f:
        f.truncate(2 * 2**30)  # sparse: 2 GiB on paper, nothing on disk
    error = _refused(lambda: census(folder))
    assert f"more than the {MAX_CONFIG_BYTES} bytes" in error.message and "config.json" in error.message


class _Spy:
    """Wraps the drafter class and records the device each instance was built on."""

    def __init__(self, cls: type) -> None:
        self.cls, self.devices = cls, []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        self.devices.append(torch.empty(0).device.type)
        return self.cls(*args, **kwargs)


@pytest.mark.parametrize(
    "changes, says",
    [
        ({"hidden_size": 65536}, "the weights hold"),
        ({"intermediate_size": 2**20}, "the weights hold"),
        ({"num_hidden_layers": 5000, "layer_types": ["full_attention"] * 5000}, "weights hold 1 layer"),
    ],
)
def test_config_sizes_are_compared_with_the_weights_before_anything_is_allocated(
    drafter_copy, monkeypatch, changes, says
):
    from sglang_dspark_plugin.engine import drafter

    spy = _Spy(drafter.DFlashDraftModel)
    monkeypatch.setattr(drafter, "DFlashDraftModel", spy)
    monkeypatch.setattr(drafter, "read_state_dict", _must_not_run)  # the headers are enough
    _edit_config(drafter_copy, **changes)
    error = _refused(lambda: drafter.load_drafter(drafter_copy))
    assert says in error.message and "config.json" in error.where
    assert set(spy.devices) <= {"meta"}  # at most a skeleton without memory was built


# -- tracebacks that are now refusals ----------------------------------------------------------------


def test_an_attribute_on_an_allowed_container_is_refused_except_a_state_dicts_metadata(tmp_path):
    folder = _write(tmp_path / "ckpt")
    state = OrderedDict(strategy="dspark")
    state.get = "not callable"  # pickled as BUILD state: a structure torch.save never writes
    _torch_zip(folder / "training_state.pt", state)
    error = _refused(lambda: census(folder))
    assert "training_state.pt" in error.message and "_metadata" in error.message

    state = OrderedDict(strategy="dspark")
    state._metadata = {"": {"version": 1}}  # what Module.state_dict() carries
    _torch_zip(folder / "training_state.pt", state)
    cfg = census(folder)
    assert cfg.strategy_dspark and cfg.deciding_tier == 1

    holder = _write(tmp_path / "set")
    # a set given attribute state through BUILD: sets have no __dict__ to take it
    build_on_set = b"\x80\x02c__builtin__\nset\n]\x85R}X\x01\x00\x00\x00xK\x01sb."
    _torch_zip(holder / "training_state.pt", None, pickled=build_on_set)
    error = _refused(lambda: census(holder))
    assert "training_state.pt" in error.message and "cannot be read" in error.message


def test_a_folder_without_search_permission_is_a_refusal(tmp_path, monkeypatch):
    """Tests run as root, whom permissions do not stop; the kernel's answer (EACCES on every path
    under a folder without x permission) is reproduced at the os layer the readers call."""
    folder = _write(tmp_path / "locked")
    real_stat, real_open, real_listdir = os.stat, os.open, os.listdir

    def denied(path: Any) -> None:
        if str(path).startswith(str(folder) + os.sep):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(os, "stat", lambda p, *a, **k: denied(p) or real_stat(p, *a, **k))
    monkeypatch.setattr(os, "open", lambda p, *a, **k: denied(p) or real_open(p, *a, **k))
    monkeypatch.setattr(os, "listdir", lambda p=".": denied(p) or real_listdir(p))
    error = _refused(lambda: census(folder))
    assert "Permission denied" in error.message and "search (x) permission" in error.message


def test_a_path_component_over_255_bytes_is_a_refusal(tmp_path):
    error = _refused(lambda: census(tmp_path / ("x" * 300) / "ckpt"))
    assert "255 bytes" in error.message


def test_a_tilde_user_that_does_not_exist_is_a_refusal():
    error = _refused(lambda: census("~no-such-user-dspark/ckpt"))
    assert "cannot expand the leading ~" in error.message


def test_a_shard_larger_than_the_address_space_limit_is_read_by_its_header(tmp_path):
    folder = _write(tmp_path / "ckpt")
    entry = {"dtype": "F16", "shape": [2**16, 2**19], "data_offsets": [0, 2**36]}
    header = json.dumps({"markov_head.markov_w1.weight": entry}).encode()
    with open(folder / "model.safetensors", "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header)
        f.truncate(8 + len(header) + 2**36)  # 64 GiB, sparse; mapping it breaks the 2 GiB limit below
    limit = 2 * 2**30
    code = (
        f"import resource; resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit})); "
        "from sglang_dspark_plugin.census import census; "
        f"print([s.signal for s in census({str(folder)!r}).evidence if s.vote])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "model.safetensors:markov_head.*" in out.stdout
    assert resource.getrlimit(resource.RLIMIT_AS)[0] != limit  # only the child was limited


@pytest.mark.parametrize("device", ["meta", "mps", "xpu", "hpu", "ipu", "cuda:99"])
def test_check_device_is_validated_before_any_model_loads(capsys, monkeypatch, device):
    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    assert main(["check", "--json", "--no-progress", "--device", device]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and device in error["message"] and error["where"] == "--device"


def _must_not_run(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("a usage error must be refused before anything loads or is measured")


@pytest.mark.parametrize(
    "plot, says",
    [
        ("missing-folder/check.png", "does not exist"),
        ("check.unknownext", "unknown file extension .unknownext"),
        ("check", "no file extension"),
        (".", "is a directory"),
    ],
)
def test_check_plot_is_validated_before_the_measurement(capsys, monkeypatch, tmp_path, plot, says):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    assert main(["check", "--json", "--no-progress", "--plot", plot]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and says in error["message"]
    assert not list(tmp_path.iterdir())  # in particular, no DIR.png next to a directory


@pytest.mark.parametrize(
    "key, value",
    [("head_dim", None), ("rms_norm_eps", "x"), ("num_attention_heads", "6"), ("attention_bias", "no")],
)
def test_wrongly_typed_model_settings_are_refused_by_name(drafter_copy, key, value):
    from sglang_dspark_plugin.engine.drafter import load_drafter

    _edit_config(drafter_copy, **{key: value})
    error = _refused(lambda: load_drafter(drafter_copy))
    assert f"{key} = {value!r}" in error.message and error.where.endswith(f"config.json:{key}")


def test_a_corrupt_target_safetensors_is_refused(tmp_path):
    target = Path(shutil.copytree(EMBEDDED.target, tmp_path / "target"))
    weights = target / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    error = _refused(lambda: check_cmd.check_target_files(target))
    assert "model.safetensors" in error.message and "unreadable safetensors header" in error.message


def test_absurd_threads_are_a_usage_error(capsys, monkeypatch):
    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    for threads in ("0", str(10**10)):
        assert main(["check", "--json", "--no-progress", "--threads", threads]) == 2
        error = json.loads(capsys.readouterr().out)["error"]
        assert error["kind"] == "usage" and "--threads" in error["message"]


# -- loose acceptance and unhelpful messages -----------------------------------------------------------


def test_duplicate_keys_that_disagree_are_a_conflict_and_agreeing_ones_are_fine(tmp_path):
    text = b'{"block_size": 8, "sample_from_anchor": true, "sample_from_anchor": false}'
    error = _refused(lambda: census(_write(tmp_path / "a", raw=text)), CensusConflictError)
    assert error.kind == "conflict" and "'sample_from_anchor' appears twice" in error.message
    assert "True" in error.message and "False" in error.message
    same = b'{"block_size": 8, "sample_from_anchor": true, "sample_from_anchor": true}'
    assert census(_write(tmp_path / "b", raw=same)).strategy_dspark


@pytest.mark.parametrize(
    "raw, says",
    [
        (b"\xef\xbb\xbf" + json.dumps(DRAFT).encode(), "byte-order mark"),
        (json.dumps(DRAFT).encode("utf-16"), "UTF-16"),
        (json.dumps(DRAFT).encode("utf-16-le"), "UTF-16"),
    ],
)
def test_a_bom_or_utf16_config_is_refused_as_sglang_would(tmp_path, raw, says):
    error = _refused(lambda: census(_write(tmp_path / "ckpt", raw=raw)))
    assert says in error.message and "config.json" in error.message


@pytest.mark.parametrize("value", ["dspar\u212a", "dspark\u00a0", "\uff44flash", "DFLAS\u0397"])
def test_non_ascii_look_alikes_of_a_harvest_are_refused(value):
    with pytest.raises(HarvestEnvError) as info:
        DsparkHarvest.from_env_value(value)
    assert "ASCII" in info.value.message and value not in info.value.message  # shown escaped


def test_a_huge_environment_value_is_cut_in_the_message():
    with pytest.raises(HarvestEnvError) as info:
        DsparkHarvest.from_env_value("x" * 100_000)
    assert len(info.value.message) < 400 and "(100002 characters)" in info.value.message


def test_check_validates_the_harvest_environment_before_loading(capsys, monkeypatch):
    monkeypatch.setattr("sglang_dspark_plugin.check.cli.load_target_model", _must_not_run)
    monkeypatch.setenv(ENV_VAR, "dpsark")
    assert main(["check", "--json", "--no-progress"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "env" and "dpsark" in error["message"]


def test_check_says_which_harvest_a_server_would_pick(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from checkpoints import write_checkpoint

    dspark = census(write_checkpoint(tmp_path, "specforge_dspark"))
    conflicted = census(write_checkpoint(tmp_path, "conflicting_flags"))
    assert check_cmd.served_by_sglang(dspark, None) == {
        "harvest": "dspark",
        "source": "census",
        "refused": None,
    }
    assert check_cmd.served_by_sglang(dspark, "dflash")["source"] == "env"
    refused = check_cmd.served_by_sglang(conflicted, None)
    assert refused["harvest"] is None and "disagree" in refused["refused"]


def test_a_target_without_tokenizer_files_is_named_as_such(tmp_path):
    target = Path(shutil.copytree(EMBEDDED.target, tmp_path / "target"))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (target / name).unlink()
    error = _refused(lambda: check_cmd.check_target_files(target))
    assert "has no tokenizer files" in error.message and "tokenizer.json" in error.message


def test_out_of_memory_is_named_not_printed_as_empty_parentheses(capsys, monkeypatch, tmp_path):
    assert describe(MemoryError()) == "MemoryError: ran out of memory"

    def oom(*args: Any, **kwargs: Any) -> None:
        raise MemoryError

    monkeypatch.setattr("sglang_dspark_plugin.check.target.check_target_files", lambda path: Path(path))
    monkeypatch.setattr("transformers.AutoTokenizer.from_pretrained", oom)
    assert main(["check", "--json", "--no-progress"]) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "memory" and "out of memory while loading the target" in error["message"]
    assert "()" not in error["message"]

    folder = _write(tmp_path / "ckpt")
    _torch_zip(folder / "training_state.pt", {"strategy": "dspark"})
    monkeypatch.setattr(training_state._StateUnpickler, "load", oom)
    error = _refused(lambda: census(folder))
    assert "ran out of memory" in error.message and "()" not in error.message


@pytest.mark.parametrize(
    "argv",
    [["check", "--json", "--threads", "many"], ["inspect", "--json"], ["check", "--json", "--frobnicate"]],
)
def test_usage_errors_honour_json_and_have_their_own_kind(capsys, argv):
    assert main(argv) == 2
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["kind"] == "usage" and error["message"]
    assert UsageError.kind == "usage" != InvalidCheckpointError.kind


def test_terminal_escape_codes_in_names_are_escaped(tmp_path, capsys):
    folder = _write(tmp_path / "ckpt")
    (folder / "evil\x1b[2J.safetensors").write_bytes(b"not a safetensors file")
    assert main(["inspect", str(folder)]) == 2
    out = capsys.readouterr().out
    assert "\x1b" not in out and "evil\\x1b[2J.safetensors" in out

    (folder / "evil\x1b[2J.safetensors").unlink()
    _write(folder, {"block_size": 8})
    _safetensors(folder / "shard\x1b]0;title\x07.safetensors", ("markov_head.markov_w1.weight",))
    assert main(["inspect", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "shard\\x1b]0;title\\x07.safetensors" in out


# -- one architecture table ------------------------------------------------------------------------------


def test_the_census_accepts_every_architecture_the_dspark_arm_serves(tmp_path):
    assert "LingDSparkModel" in SGLANG_DSPARK_ARM
    for i, name in enumerate(SGLANG_DSPARK_ARM):
        cfg = census(_write(tmp_path / str(i), {"architectures": [name], "block_size": 8}))
        (signal,) = [s for s in cfg.evidence if s.signal == "config.json:architectures[0]"]
        assert signal.vote == family_of(name) == FAMILY[name]
    ling = census(_write(tmp_path / "ling", {"architectures": ["LingDSparkModel"], "block_size": 8}))
    assert ling.strategy_dspark


# -- the capture rule ---------------------------------------------------------------------------------


def test_uncapturable_layers_are_the_ids_beyond_the_second_last_layer():
    assert uncapturable_layers([1, 4, 6], 8) == []
    assert uncapturable_layers([1, 4, 7], 8) == [7]
    assert uncapturable_layers([0, 8, 9], 8) == [8, 9]
    message = uncapturable_message([1, 4, 7], 8)
    assert "[7]" in message and "8 layers" in message and "target layer ids <= 6" in message
    assert uncapturable_message([1, 4, 6], 8) == ""


def test_inspect_says_when_sglang_cannot_serve_the_layers(tmp_path, capsys):
    config = {**DRAFT, "dflash_config": {"target_layer_ids": [2, 7]}}
    assert main(["inspect", str(_write(tmp_path / "last", config))]) == 0
    assert "sglang cannot serve this: target_layer_ids [2, 7] include [7]" in capsys.readouterr().out
    config = {**DRAFT, "dflash_config": {"target_layer_ids": [2, 6]}}
    assert main(["inspect", "--json", str(_write(tmp_path / "ok", config))]) == 0
    assert json.loads(capsys.readouterr().out)["sglang_cannot_serve"] is None


def test_check_measures_a_drafter_sglang_cannot_serve_and_says_so(drafter_copy):
    import torch

    target, tokenizer = check_cmd.load_target_model(EMBEDDED.target, torch.device("cpu"), torch.float32)
    n = target.config.num_hidden_layers
    ids = json.loads((drafter_copy / "config.json").read_text())["dflash_config"]["target_layer_ids"]
    verdicts = {}
    for last in (n - 1, n - 2):
        config = json.loads((drafter_copy / "config.json").read_text())
        config["dflash_config"]["target_layer_ids"] = [*range(len(ids) - 1), last]
        (drafter_copy / "config.json").write_text(json.dumps(config))
        d = check_cmd.load_drafter_for(
            "d", census(drafter_copy), target, tokenizer, torch.device("cpu"), torch.float32
        )
        verdicts[last] = d.sglang_cannot_serve
    assert f"include [{n - 1}]" in verdicts[n - 1] and f"<= {n - 2}" in verdicts[n - 1]
    assert verdicts[n - 2] is None
