"""``check``'s command-line arguments, each refused before anything loads or is measured."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoint.files import MAX_CONFIG_BYTES, describe, read_json
from ..errors import UsageError, printable
from ..harvest import ENV_VAR, DsparkHarvest
from ..util.figure import check_figure_path, require_matplotlib

if TYPE_CHECKING:
    import torch

DEFAULT_MAX_NEW_TOKENS = 64
DTYPES = ("float32", "bfloat16", "float16")
DTYPE_CHOICES = ("auto", *DTYPES)
DEVICE_TYPES = ("cpu", "cuda")  # what the reference engine runs on
DEVICE_HELP = (
    "torch device: auto (CUDA when this torch sees a GPU, else cpu), cpu, cuda or cuda:N (default: auto)"
)


def torch_device(name: str) -> torch.device:
    """``--device`` as a torch device the reference engine runs on (auto, cpu, cuda, cuda:N), checked."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() and torch.cuda.device_count() else "cpu")
    shown = printable(repr(name), 80)
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError, TypeError) as exc:
        raise UsageError(
            f"--device {shown} is not a torch device ({describe(exc)}); use cpu, cuda or cuda:N.",
            where="--device",
        ) from exc
    if device.type not in DEVICE_TYPES:
        raise UsageError(
            f"--device {shown}: the reference engine runs on cpu or cuda (cuda:N) only, not on "
            f"{device.type}. Use --device cpu, or --device cuda on a machine with an NVIDIA GPU.",
            where="--device",
        )
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise UsageError(
                f"--device {shown} asked for CUDA but this torch build sees no GPU; use --device cpu.",
                where="--device",
            )
        if device.index is not None and device.index >= count:
            raise UsageError(
                f"--device {shown}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}.",
                where="--device",
            )
    return device


def threads_for(requested: int | None, embedded: bool) -> int | None:
    """``--threads``: at least 1 and at most the CPUs this process may use (more only add contention)."""
    threads = requested if requested is not None else (1 if embedded else None)
    if threads is None:
        return None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not 1 <= threads <= cpus:
        raise UsageError(
            f"--threads {threads}: must be between 1 and the {cpus} CPU(s) this process may use.",
            where="--threads",
        )
    return threads


def check_plot_path(path: str, replace: bool = False) -> None:
    """Refuse, before anything is measured, a ``--plot`` file that could not or must not be written
    (``util.figure``: a link, a folder, an existing file that is not such an image)."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    check_figure_path(path, replace=True)  # a link, a folder, another kind of file
    shown = printable(path, 200)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    extension = Path(path).suffix[1:].lower()
    if extension not in formats:
        raise UsageError(
            f"--plot {shown}: {'no' if not extension else 'unknown'} file extension"
            f"{'' if not extension else ' .' + printable(extension, 20)}; end the name in one of "
            f"{', '.join('.' + f for f in formats)} (e.g. check.png).",
            where="--plot",
        )
    check_figure_path(path, replace=replace)


def check_prompt(text: str) -> None:
    """A ``--prompt`` must be text: bytes that are not UTF-8 reach Python as lone surrogates."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(
            f"--prompt {printable(repr(text), 80)} is not valid UTF-8 (byte {exc.start} of the argument); "
            "pass the prompt as UTF-8 text.",
            where="--prompt",
        ) from exc
    if not text.strip():
        raise UsageError("--prompt is empty: give the text to decode from.", where="--prompt")


def harvest_env() -> str | None:
    """``MEMRA_DSPARK_HARVEST`` as a server would read it; garbage is refused before any model loads."""
    value = os.environ.get(ENV_VAR)
    if value is not None:
        DsparkHarvest.from_env_value(value)  # HarvestEnvError (kind env): the server would refuse it
    return value


def compute_dtype(name: str, device: torch.device, target: Path | None) -> str:
    """``--dtype``: ``auto`` is the target checkpoint's dtype on CUDA (as sglang serves it), else float32
    (on a CPU, and for the embedded models, whose drafters were trained on the float32 target)."""
    if name != "auto":
        return name
    if device.type != "cuda" or target is None:
        return "float32"
    config = read_json(target / "config.json", "target config", MAX_CONFIG_BYTES, "fix or re-download it.")
    declared = (config.get("torch_dtype") or config.get("dtype")) if isinstance(config, dict) else None
    return declared if declared in DTYPES else "float32"


def resolve_target(text: str) -> Path:
    """``--target``: a local folder or a hub id in the local Hugging Face cache, as ``--draft`` takes."""
    from ..census.locate import resolve_checkpoint

    return resolve_checkpoint(text)


def check_drafts(drafts: list[str]) -> list[str]:
    """Every ``--draft``, each measured; the same checkpoint twice is refused (its runs would merge)."""
    from ..census.locate import resolve_checkpoint

    seen: dict[Path, str] = {}
    for draft in drafts:
        folder = resolve_checkpoint(draft).resolve()
        if folder in seen:
            raise UsageError(
                f"--draft {printable(repr(draft), 120)} names the checkpoint --draft "
                f"{printable(repr(seen[folder]), 120)} already names; give each drafter once.",
                where="--draft",
            )
        seen[folder] = draft
    names = [Path(d).name for d in drafts]
    if len(set(names)) < len(names):
        raise UsageError(
            f"two --draft folders share a name ({', '.join(printable(n, 60) for n in names)}); the "
            "report names each drafter by its folder: give them distinct folder names.",
            where="--draft",
        )
    return drafts


@dataclass(frozen=True)
class Checked:
    """The arguments ``check`` derives from the command line, once every one has been checked."""

    device: torch.device
    threads: int | None  # None: torch's own default
    env_value: str | None  # MEMRA_DSPARK_HARVEST as a server would read it
    drafts: list[Path]  # every --draft, in order (empty for the embedded models)


def check_arguments(args: argparse.Namespace) -> Checked:
    """Every argument first: a usage error should not cost a model load, nor a measurement."""
    if (args.target is None) != (args.draft is None):
        raise UsageError(
            "pass both --target PATH and --draft PATH (a drafter only makes sense on its own target), "
            "or neither to check the embedded models.",
            where="--target/--draft",
        )
    if args.max_new_tokens < 1:
        raise UsageError(
            f"--max-new-tokens {args.max_new_tokens}: must be at least 1.", where="--max-new-tokens"
        )
    if args.num_prompts is not None and args.num_prompts < 1:
        raise UsageError(f"--num-prompts {args.num_prompts}: must be at least 1.", where="--num-prompts")
    for prompt in args.prompt or ():
        check_prompt(prompt)
    device = torch_device(args.device)
    threads = threads_for(args.threads, embedded=args.target is None)
    if args.plot:
        check_plot_path(args.plot, args.replace_plot)
    drafts = [Path(d) for d in check_drafts(args.draft)] if args.draft else []
    return Checked(device, threads, harvest_env(), drafts)


__all__ = [
    "DEFAULT_MAX_NEW_TOKENS",
    "DTYPES",
    "DTYPE_CHOICES",
    "DEVICE_TYPES",
    "DEVICE_HELP",
    "check_drafts",
    "check_prompt",
    "compute_dtype",
    "resolve_target",
    "Checked",
    "check_arguments",
    "check_plot_path",
    "harvest_env",
    "threads_for",
    "torch_device",
]
