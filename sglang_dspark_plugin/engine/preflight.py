"""Before a drafter is allocated: its weight files, its settings, and its sizes against its weights.

A config that claims a hidden size of 65536 or thousands of layers must be refused by comparing it
with the tensors the checkpoint really holds, not discovered by allocating it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..checkpoint.bounds import check_tensor_count
from ..checkpoint.files import describe, regular_file
from ..checkpoint.shards import read_index, read_safetensors_header, shard_files
from ..errors import InvalidCheckpointError, printable

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"

# (key, required, kind): the Qwen3 settings the drafter's layers are built from. transformers refuses a
# wrongly typed one with its own exception type; here it is a refusal that names the key.
_POSITIVE_INT, _POSITIVE_NUMBER, _BOOL = "a positive integer", "a positive number", "true or false"
MODEL_SETTINGS: tuple[tuple[str, bool, str], ...] = (
    ("hidden_size", True, _POSITIVE_INT),
    ("intermediate_size", True, _POSITIVE_INT),
    ("num_hidden_layers", True, _POSITIVE_INT),
    ("num_attention_heads", True, _POSITIVE_INT),
    ("num_key_value_heads", False, _POSITIVE_INT),
    ("head_dim", False, _POSITIVE_INT),
    ("rms_norm_eps", False, _POSITIVE_NUMBER),
    ("rope_theta", False, _POSITIVE_NUMBER),
    ("attention_bias", False, _BOOL),
)
_LAYER = re.compile(r"^layers\.(\d+)\.")


def weight_files(folder: Path) -> list[Path]:
    """The safetensors files a drafter loads: ``model.safetensors``, else the shards of its index.

    Each is a regular file inside ``folder``: an index entry with ``..`` or an absolute path is
    refused, and so is a FIFO or a directory in a file's place.
    """
    fix = "remove it or replace it with the real weights."
    single = folder / WEIGHTS_FILE
    if regular_file(single, "weights", fix) is not None:
        files = [single]
    else:
        index = read_index(folder / INDEX_FILE)
        if index is None:
            raise InvalidCheckpointError(
                f"{printable(folder)}: no {WEIGHTS_FILE} or {INDEX_FILE}; a DFlash-family checkpoint folder "
                "needs config.json plus its safetensors weights",
                where=printable(folder),
            )
        files = shard_files(folder, index)
    return files


def weight_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape, from the headers of ``weight_files`` alone (no tensor is read).

    Each header is validated, so a truncated or corrupt file is refused here.
    """
    shapes: dict[str, tuple[int, ...]] = {}
    for path in weight_files(folder):
        shapes.update({name: info.shape for name, info in read_safetensors_header(path).items()})
        check_tensor_count(len(shapes), printable(path))
    return shapes


def check_model_settings(config: Mapping[str, Any], where: str) -> None:
    """Refuse a missing or wrongly typed Qwen3 setting (``head_dim: null``, ``rms_norm_eps: "x"``)."""
    for key, required, kind in MODEL_SETTINGS:
        if key not in config:
            if required:
                raise InvalidCheckpointError(
                    f"{where}: {key} is missing; the drafter's layers are built from it. Set it to the "
                    "value the drafter was trained with.",
                    where=f"{where}:{key}",
                )
            continue
        value = config[key]
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = {
            _POSITIVE_INT: isinstance(value, int) and not isinstance(value, bool) and value >= 1,
            _POSITIVE_NUMBER: is_number and value > 0 and value != float("inf"),
            _BOOL: isinstance(value, bool),
        }[kind]
        if not ok:
            raise InvalidCheckpointError(
                f"{where}: {key} = {printable(repr(value), 80)} but it must be {kind}; set it to the value "
                "the drafter was trained with (or remove an optional key to take the Qwen3 default).",
                where=f"{where}:{key}",
            )
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", heads)
    if heads % kv:
        raise InvalidCheckpointError(
            f"{where}: num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}; set the "
            "values the drafter was trained with.",
            where=f"{where}:num_key_value_heads",
        )


MAX_LAYER_DIGITS = 6  # a layer index of a million or more is no drafter (and int() of 4300+ digits fails)


def _layer_indices(shapes: Mapping[str, tuple[int, ...]], where: str) -> set[int]:
    """The ``layers.N.`` indices the weights name; an index too long to be a layer is refused."""
    found = [(name, m.group(1)) for name in shapes if (m := _LAYER.match(name))]
    for name, digits in found:
        if len(digits) > MAX_LAYER_DIGITS:
            raise InvalidCheckpointError(
                f"{where}: the weights name tensor {printable(name, 60)} with a layer index of {len(digits)} "
                "digits; no drafter has that many layers: re-export the checkpoint.",
                where=where,
            )
    return {int(digits) for _, digits in found}


def check_sizes_before_allocating(
    build: Callable[[], nn.Module],
    config: Mapping[str, Any],
    shapes: Mapping[str, tuple[int, ...]],
    where: str,
) -> dict[str, tuple[int, ...]]:
    """Compare the model ``build`` would allocate with the weights' shapes, allocating nothing; returns
    the skeleton's parameter shapes (``weights.check_state_fits`` then compares the names).

    The layer count is compared first, also when the weights hold no layer at all (a config with
    thousands of layers is refused before even a skeleton is built); then ``build`` runs on the meta
    device, which gives every parameter's shape without memory, and each one the weights hold must
    have the weights' shape.
    """
    layers = _layer_indices(shapes, where)
    n = config["num_hidden_layers"]
    if len(layers) != n:
        held = f"layers.{min(layers)}.* to layers.{max(layers)}.*" if layers else "no layers.* tensor"
        raise InvalidCheckpointError(
            f"{where}: num_hidden_layers = {n} but the weights hold {len(layers)} layer(s) ({held}); set "
            "num_hidden_layers to the weights' count, or re-export a checkpoint with its layers.",
            where=f"{where}:num_hidden_layers",
        )
    try:
        with torch.device("meta"):
            skeleton = build()
    except InvalidCheckpointError:
        raise
    except Exception as exc:  # transformers' config validation raises its own types
        raise InvalidCheckpointError(
            f"{where}: cannot build the drafter from this config ({describe(exc)}); check its Qwen3 keys "
            "(hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
            "num_key_value_heads, head_dim, rms_norm_eps).",
            where=where,
        ) from exc
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    bad = [k for k in expected if k in shapes and tuple(shapes[k]) != expected[k]]
    if bad:
        k = bad[0]
        raise InvalidCheckpointError(
            f"{where}: the config implies tensor {printable(k, 80)} of shape {expected[k]}, the weights hold "
            f"{tuple(shapes[k])} ({len(bad)} mismatched); fix hidden_size / intermediate_size / heads / "
            "head_dim / target_layer_ids in config.json to the weights' sizes.",
            where=where,
        )
    return expected


__all__ = [
    "MODEL_SETTINGS",
    "weight_files",
    "weight_shapes",
    "check_model_settings",
    "check_sizes_before_allocating",
]
