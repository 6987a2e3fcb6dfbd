"""A ``training_state.pt`` read within budgets: nested or huge claims refused before they allocate, the
gadgets a plain ``torch.save`` never writes refused, and the sparse or meta tensors it does write read."""

from __future__ import annotations

import json
import pickle
import struct
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

from sglang_dspark_plugin.census import census
from sglang_dspark_plugin.census.state_pickle import MAX_OPS, MAX_STACK
from sglang_dspark_plugin.census.training_state import MAX_STATE_DIRECTORY_BYTES
from sglang_dspark_plugin.errors import InvalidCheckpointError

DRAFT = {"architectures": ["DFlashDraftModel"], "block_size": 8}
PROTO2, STOP = b"\x80\x02", b"."


def _folder(tmp_path: Path, data: bytes | None = None, name: str = "ckpt") -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(DRAFT))
    if data is not None:
        with zipfile.ZipFile(folder / "training_state.pt", "w", compression=zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("archive/data.pkl", data)
    return folder


def _refused(folder: Path) -> str:
    with pytest.raises(InvalidCheckpointError) as info:
        census(folder)
    assert "training_state.pt" in info.value.message
    return info.value.message


def _census_under_a_cap(folder: Path, cap: int = 1 << 30) -> dict[str, Any]:
    """The census of ``folder`` in a child limited to ``cap`` bytes of address space: its peak memory,
    and its refusal's message (an allocation the cap stops would read MemoryError)."""
    code = (
        "import json, resource, sys\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({cap}, {cap}))\n"
        "from sglang_dspark_plugin.census import census\n"
        "from sglang_dspark_plugin.errors import DsparkHarvestError\n"
        "try:\n"
        f"    cfg = census({str(folder)!r}); out = {{'vote': cfg.verdict}}\n"
        "except DsparkHarvestError as exc:\n"
        "    out = {'refused': exc.message}\n"
        # VmHWM, not ru_maxrss: the latter keeps the parent's size from before the exec
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "out['peak_mb'] = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


# -- nesting and claims: refused before they allocate ------------------------------------------------


def test_lists_nested_ten_million_deep_are_refused_at_the_stack_budget(tmp_path):
    depth = 10_000_000
    folder = _folder(tmp_path, PROTO2 + b"]" * depth + b"a" * (depth - 1) + STOP)
    out = _census_under_a_cap(folder)
    assert "items on the stack" in out["refused"] and str(MAX_STACK) in out["refused"]
    assert out["peak_mb"] < 200  # the pickle itself is 20 MB; 1.06 GB before the budget


def test_lists_nested_through_the_memo_are_refused_at_the_opcode_budget(tmp_path):
    # each level: a new list, the previous one from memo 0 appended, then memoized as 0 and popped
    level = b"]" + b"h\x00" + b"a" + b"q\x00" + b"0"
    folder = _folder(tmp_path, PROTO2 + b"]q\x00" + level * (MAX_OPS // 5 + 1) + b"}" + STOP)
    message = _refused(folder)
    assert "opcodes" in message and str(MAX_OPS) in message


@pytest.mark.parametrize(
    "opcode",
    [
        b"\x8e" + struct.pack("<Q", 2**62),  # BINBYTES8
        b"\x8d" + struct.pack("<Q", 2**62),  # BINUNICODE8
        b"B" + struct.pack("<I", 2**31),  # BINBYTES
        b"\x95" + struct.pack("<Q", 2**40),  # FRAME
    ],
)
def test_a_length_claimed_beyond_the_data_is_refused_before_it_is_allocated(tmp_path, opcode):
    folder = _folder(tmp_path, b"\x80\x04" + opcode + b"tiny" + STOP)
    out = _census_under_a_cap(folder)
    assert "claims" in out["refused"] and "MemoryError" not in out["refused"]


def test_protocol_5_buffers_are_refused(tmp_path):
    folder = _folder(tmp_path, b"\x80\x05\x96" + struct.pack("<Q", 2**62) + STOP)  # BYTEARRAY8
    assert "protocol-5" in _refused(folder)


def test_a_huge_memo_index_allocates_nothing(tmp_path):
    data = PROTO2 + b"}" + b"r\xff\xff\xff\xff" + b"X\x08\x00\x00\x00strategyX\x06\x00\x00\x00dsparks" + STOP
    assert _census_under_a_cap(_folder(tmp_path, data))["vote"] == "dspark"


def test_a_zip_directory_claimed_beyond_its_bound_is_refused_before_zipfile_lists_it(tmp_path):
    folder = _folder(tmp_path)
    claimed = 2_500_000 * 46  # the directory of 2.5 million members
    path = folder / "training_state.pt"
    with open(path, "wb") as f:
        f.truncate(claimed)  # sparse
        f.seek(claimed)
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, claimed, 0, 0))
    out = _census_under_a_cap(folder)
    assert "zip directory" in out["refused"] and str(MAX_STATE_DIRECTORY_BYTES) in out["refused"]
    assert out["peak_mb"] < 100


def test_a_zip_of_many_real_members_is_refused_by_its_directory_size(tmp_path):
    folder = _folder(tmp_path)
    with zipfile.ZipFile(folder / "training_state.pt", "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"strategy": "dspark"}))
        for i in range(MAX_STATE_DIRECTORY_BYTES // 60):
            archive.writestr(f"archive/data/{i:09d}", b"")
    assert "zip directory" in _refused(folder)


# -- gadgets a plain torch.save never writes -----------------------------------------------------------


def _strategy_pickle(body: bytes) -> bytes:
    return PROTO2 + body + STOP


_ORDERED_DICT = b"ccollections\nOrderedDict\n"
_STRATEGY = b"X\x08\x00\x00\x00strategy"
_DSPARK, _DFLASH = b"X\x06\x00\x00\x00dspark", b"X\x06\x00\x00\x00dflash"


@pytest.mark.parametrize(
    "body, says",
    [
        # OrderedDict([("strategy", "dspark")]): built from arguments
        (_ORDERED_DICT + b"]" + _STRATEGY + _DSPARK + b"\x86a\x85R", "from arguments"),
        # a key set twice, last wins in a plain unpickler
        (b"}(" + _STRATEGY + _DFLASH + _STRATEGY + _DSPARK + b"u", "set twice"),
        (_ORDERED_DICT + b")R(" + _STRATEGY + _DFLASH + _STRATEGY + _DSPARK + b"u", "set twice"),
        # BUILD gives an OrderedDict an instance __setstate__, which a second BUILD would call
        (_ORDERED_DICT + b")R" + b"}X\x0c\x00\x00\x00__setstate__c__builtin__\nset\nsb}b", "_metadata"),
        # BUILD with slot state: setattr of __eq__ on the instance
        (_ORDERED_DICT + b")R" + b"N}X\x06\x00\x00\x00__eq__Ns\x86b", "_metadata"),
        # BUILD on a plain dict
        (b"}" + b"}X\x01\x00\x00\x00xK\x01sb", "cannot be read"),
    ],
)
def test_ordered_dict_and_dict_gadgets_are_refused(tmp_path, body, says):
    assert says in _refused(_folder(tmp_path, _strategy_pickle(body)))


def test_the_plain_pickles_of_the_same_states_are_read(tmp_path):
    for i, state in enumerate([{"strategy": "dspark"}, OrderedDict(strategy="dspark")]):
        for protocol in (2, 4):
            name = f"{i}-{protocol}"
            assert census(_folder(tmp_path, pickle.dumps(state, protocol=protocol), name)).verdict == "dspark"


# -- what torch.save writes: sparse, meta and other tensors -------------------------------------------


def test_training_states_with_sparse_meta_quantized_and_nested_tensors_are_read(tmp_path):
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # beta and prototype warnings of CSR and nested tensors
        tensors = {
            "coo": torch.eye(3).to_sparse(),
            "csr": torch.eye(3).to_sparse_csr(),
            "meta": torch.empty(4, 2, device="meta"),
            "qint": torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),
            "nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            "parameter": torch.nn.Parameter(torch.ones(2)),
            "state_dict": torch.nn.Linear(2, 2).state_dict(),
            "device": torch.device("cpu"),
            "dtype": torch.bfloat16,
        }
    for name, value in tensors.items():
        folder = _folder(tmp_path, name=name)
        torch.save({"strategy": "dspark", "global_step": 3, name: value}, folder / "training_state.pt")
        cfg = census(folder)
        assert cfg.verdict == "dspark" and cfg.deciding_tier == 1, name


# -- random damage: a typed refusal or a result, nothing else ---------------------------------------------


def _real_state_pickle() -> bytes:
    import io

    import torch

    layer = torch.nn.Linear(2, 2)
    buffer = io.BytesIO()
    torch.save({"strategy": "dspark", "model": layer.state_dict(), "step": 3}, buffer)
    with zipfile.ZipFile(buffer) as archive:
        return archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))


def test_damaged_torch_pickles_end_in_a_strategy_or_a_typed_refusal(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from sglang_dspark_plugin.census.training_state import read_training_strategy

    pristine = _real_state_pickle()
    path = tmp_path / "training_state.pt"
    edit = st.tuples(st.integers(0, len(pristine) - 1), st.integers(0, 255))

    @settings(max_examples=80, deadline=None, database=None)
    @given(st.lists(edit, min_size=1, max_size=4))
    def damaged(edits: list[tuple[int, int]]) -> None:
        data = bytearray(pristine)
        for at, byte in edits:
            data[at] = byte
        with zipfile.ZipFile(path, "w") as archive:
            archive.writestr("archive/data.pkl", bytes(data))
        try:
            read_training_strategy(path)
        except InvalidCheckpointError as exc:
            assert "training_state.pt" in exc.message

    damaged()
