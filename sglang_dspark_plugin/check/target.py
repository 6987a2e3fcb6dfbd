"""The target ``check`` measures on: its folder checked file by file, then loaded offline."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..checkpoint.files import (
    MAX_CONFIG_BYTES,
    describe,
    is_dir,
    list_dir,
    read_json,
    regular_file,
)
from ..checkpoint.shards import read_index, read_safetensors_header, shard_files
from ..errors import DsparkHarvestError, InvalidCheckpointError, MemoryLimitError, printable

if TYPE_CHECKING:
    import torch

# Files transformers may open in a target folder; each must be a regular file (a FIFO would block it).
TARGET_FILE_SUFFIXES = (
    ".json",
    ".safetensors",
    ".bin",
    ".pt",
    ".model",
    ".txt",
    ".jinja",
    ".tiktoken",
    ".py",
)
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "tokenizer.tiktoken",
)


def _is_out_of_memory(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()  # CPU allocation failures are plain RuntimeErrors
    return isinstance(exc, RuntimeError) and "memory" in text and "alloc" in text


@contextlib.contextmanager
def memory_guard(stage: str) -> Iterator[None]:
    """Report running out of memory as a refusal that says where, not as a traceback or ``()``."""
    try:
        yield
    except DsparkHarvestError:
        raise
    except Exception as exc:
        if not _is_out_of_memory(exc):
            raise
        raise MemoryLimitError(
            f"out of memory while {stage} ({describe(exc)}); use --dtype bfloat16, a device with more "
            "memory, or fewer --max-new-tokens / --num-prompts.",
            where=stage,
        ) from exc


def check_target_files(path: str | Path) -> Path:
    """The target folder, its files checked before transformers opens any of them.

    Every file transformers may open is a regular file (a FIFO would block it), ``config.json`` is
    bounded UTF-8 JSON, tokenizer files are present (without them transformers builds an empty
    tokenizer), and every safetensors header is valid (the shards of an index inside the folder).
    """
    shown = printable(repr(str(path)), 200)
    try:
        folder = Path(path).expanduser()
    except RuntimeError as exc:  # ~user of an unknown user
        raise InvalidCheckpointError(
            f"--target {shown}: cannot expand the leading ~ ({describe(exc)}); pass the full path.",
            where="--target",
        ) from exc
    need = "pass a local Hugging Face causal-LM folder (config.json, weights and tokenizer files)."
    if not is_dir(folder, "--target"):
        raise InvalidCheckpointError(f"--target {shown}: no folder there; {need}", where=printable(folder))
    names = list_dir(folder, "--target folder")
    fix = "remove it or replace it with the real file."
    for name in names:
        if name.endswith(TARGET_FILE_SUFFIXES):
            regular_file(folder / name, "target file", fix)
    config = read_json(folder / "config.json", "target config", MAX_CONFIG_BYTES, "fix or re-download it.")
    if config is None:
        raise InvalidCheckpointError(
            f"--target {shown}: no config.json there; {need}", where=printable(folder)
        )
    if not isinstance(config, dict):
        raise InvalidCheckpointError(
            f"--target {shown}: config.json holds a JSON {type(config).__name__}, expected an object.",
            where=printable(folder / "config.json"),
        )
    if not any(name in names for name in TOKENIZER_FILES):
        raise InvalidCheckpointError(
            f"--target {shown} has no tokenizer files (none of {', '.join(TOKENIZER_FILES)}); check "
            "encodes its prompts with the target's own tokenizer: copy them from the model's release.",
            where=printable(folder),
        )
    index = read_index(folder / "model.safetensors.index.json")
    shards = [] if index is None else shard_files(folder, index)
    for shard in sorted({*shards, *(folder / n for n in names if n.endswith(".safetensors"))}):
        read_safetensors_header(shard)
    return folder


def load_target_model(
    path: str | Path, device: torch.device, dtype: torch.dtype, *, progress: bool = False
) -> tuple[Any, Any]:
    """A local HF causal LM and its tokenizer, offline; a typed error when it cannot be loaded.

    With ``progress``, transformers' own loading bar shows on stderr (a large target takes minutes)."""
    from transformers.utils import logging as hf_logging

    if progress:
        hf_logging.enable_progress_bar()
    else:
        hf_logging.disable_progress_bar()
    folder = check_target_files(path)
    return _load(folder, path, device, dtype)


def _load(folder: Path, path: str | Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ..engine.target_sizes import preflight_target

    try:
        preflight_target(folder)  # the config against the weights, before anything is allocated
        with memory_guard("loading the target"):
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            # typed as a Module: transformers' own ``to`` wraps Module.to and loses its signature
            model: torch.nn.Module = AutoModelForCausalLM.from_pretrained(
                folder, dtype=dtype, local_files_only=True
            )
            return model.to(device).eval(), tokenizer
    except DsparkHarvestError:
        raise
    except Exception as exc:  # transformers and safetensors raise many types; all mean "cannot load it"
        raise InvalidCheckpointError(
            f"--target {printable(repr(str(path)), 200)}: transformers cannot load it offline "
            f"({describe(exc)}); the folder needs a causal-LM config, its weights and tokenizer files.",
            where=printable(folder),
        ) from exc


def encode_prompts(tokenizer: Any, prompts: list[str], vocab_size: int | None = None) -> list[list[int]]:
    """Token ids of each prompt; an empty encoding is refused (there would be no context to decode from),
    and so is a token id the target's embedding does not hold (a tokenizer larger than its model)."""
    encoded = [list(tokenizer(text)["input_ids"]) for text in prompts]
    for text, ids in zip(prompts, encoded, strict=True):
        shown = printable(repr(text), 80)
        if not ids:
            raise InvalidCheckpointError(f"prompt {shown} encodes to no token.", where="prompts")
        beyond = [i for i in ids if not 0 <= i < (vocab_size if vocab_size is not None else i + 1)]
        if beyond:
            raise InvalidCheckpointError(
                f"prompt {shown} encodes to token id {beyond[0]}, outside the target's vocabulary of "
                f"{vocab_size} embeddings: the tokenizer files are not the model's; copy the tokenizer of "
                "this target's own release, or leave that token out of --prompt.",
                where="prompts",
            )
    return encoded


__all__ = [
    "TARGET_FILE_SUFFIXES",
    "TOKENIZER_FILES",
    "memory_guard",
    "check_target_files",
    "load_target_model",
    "encode_prompts",
]
