"""A target's config against the weights it ships, before transformers allocates the model.

transformers builds every module its config describes and fills what the weights lack with random
values, so a config claiming 3000 layers over 8 layers of weights allocates 3000 layers and then
runs out of memory, and the refusal that follows blames the machine. Here the config is compared
with the safetensors headers first: the decoder layers it claims against the layer indices the
weights name, then (on the meta device, which allocates nothing) the parameters it implies against
the elements the weights hold.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..checkpoint.bounds import check_tensor_count
from ..checkpoint.files import list_dir, printable
from ..checkpoint.shards import read_index, read_safetensors_header, shard_files
from ..errors import InvalidCheckpointError

# "model.layers.7.", "transformer.h.7.", "model.language_model.layers.7.": a layer index in a name
_LAYER = re.compile(r"^(.*?(?:^|\.)(?:layers|layer|h|blocks|block)\.)(\d{1,9})\.")
ELEMENT_FACTOR = 16
"""How many times the weights' elements the config may imply: 8 for int4 packed into int32, twice
that for an untied head and buffers; a wrong config implies hundreds of times more."""
ELEMENT_SLACK = 2**24
"""Elements a config may imply beyond that (small models: rotary tables, a few buffers)."""
MAX_LAYERS = 4096
"""Decoder layers any config may claim (the deepest published models have ~130)."""


def target_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape over the target's safetensors files (the index's shards and the folder's)."""
    index = read_index(folder / "model.safetensors.index.json")
    files = set([] if index is None else shard_files(folder, index))
    files |= {folder / n for n in list_dir(folder, "--target folder") if n.endswith(".safetensors")}
    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(files):
        shapes.update((name, info.shape) for name, info in read_safetensors_header(path).items())
        check_tensor_count(len(shapes), printable(path))
    return shapes


def weight_layers(names: Any) -> int:
    """The most layer indices any one group of names holds (``model.layers.N.``, ``h.N.``, ...)."""
    groups: dict[str, set[int]] = defaultdict(set)
    for name in names:
        if m := _LAYER.match(name):
            groups[m.group(1)].add(int(m.group(2)))
    return max((len(g) for g in groups.values()), default=0)


def _text_config(config: Any) -> Any:
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def preflight_target(folder: Path) -> None:
    """``check_target_sizes`` for a local target folder, its config read offline as transformers reads it."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder, local_files_only=True)
    check_target_sizes(folder, config, target_shapes(folder))


def check_target_sizes(folder: Path, config: Any, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Refuse a target whose ``config`` (a transformers config) implies far more than its weights hold."""
    where = printable(folder / "config.json")
    claimed = getattr(_text_config(config), "num_hidden_layers", None)
    held = weight_layers(shapes)
    if (
        isinstance(claimed, int)
        and claimed > max(held, 1)
        and (held or claimed > min(len(shapes), MAX_LAYERS))
    ):
        raise InvalidCheckpointError(
            f"{where}: num_hidden_layers = {claimed} but the weights hold {held} layer(s) "
            f"({len(shapes)} tensors); transformers would build (and randomly fill) every layer the "
            "config claims. Set num_hidden_layers to the weights' count, or re-download the target.",
            where=f"{where}:num_hidden_layers",
        )
    implied = _implied_elements(config)
    present = sum(_numel(shape) for shape in shapes.values())
    if implied is not None and implied > ELEMENT_FACTOR * present + ELEMENT_SLACK:
        raise InvalidCheckpointError(
            f"{where}: the config implies {implied} parameters but the weights hold {present} elements "
            f"({implied // max(present, 1)}x); transformers would allocate them all. Fix hidden_size / "
            "intermediate_size / vocab_size / the layer count to the weights' sizes, or re-download it.",
            where=where,
        )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _implied_elements(config: Any) -> int | None:
    """The parameters transformers would build for ``config`` (shared ones once), on the meta device;
    ``None`` when it cannot build one there (a custom or quantized class): then only the layer count
    is checked."""
    import torch
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config)
    except Exception:  # noqa: BLE001  # any failure here only means "cannot tell"
        return None
    return sum(p.numel() for p in model.parameters())


__all__ = [
    "ELEMENT_FACTOR",
    "ELEMENT_SLACK",
    "MAX_LAYERS",
    "target_shapes",
    "weight_layers",
    "preflight_target",
    "check_target_sizes",
]
