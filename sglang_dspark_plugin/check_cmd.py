"""``dspark-harvest check``: measure a drafter under both harvests on the reference engine.

With no arguments it runs the embedded tiny target with every embedded drafter (``EMBEDDED.drafters``:
one per training strategy without a Markov head, and a SpecForge-shaped DSpark drafter with one, each
at its own block size) under each harvest, plus plain autoregressive decoding, on the embedded fixed
prompts: the postmortem in miniature (the matched harvest accepts more, every run stays exact). With
``--target PATH --draft PATH`` it does the same for any local checkpoints and recommends a harvest.

Timing is side by side: after a warm-up, every prompt is decoded by every arm in turn, so a change in
machine load hits all arms alike. Exit code 0 on success, 1 if a run was not exact (an engine bug),
2 on a refusal (a typed error naming what to fix).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from .checkpoint_files import (
    MAX_CONFIG_BYTES,
    describe,
    is_dir,
    list_dir,
    read_index,
    read_json,
    read_safetensors_header,
    regular_file,
    shard_files,
    stat_path,
)
from .errors import (
    CensusConflictError,
    DsparkHarvestError,
    InvalidCheckpointError,
    MemoryLimitError,
    UsageError,
    printable,
)
from .harvest import ENV_VAR, DsparkHarvest, Resolution

if TYPE_CHECKING:
    import torch

    from .draft_config import DflashCfg
    from .engine.drafter import DFlashDraftModel
    from .engine.probe import ProbeCounts, ProbeResult

EXIT_OK = 0
EXIT_NOT_EXACT = 1
EXIT_REFUSED = 2

DEFAULT_MAX_NEW_TOKENS = 64
WARMUP_TOKENS = 8
DTYPES = ("float32", "bfloat16", "float16")

# The issue-4 targets, printed (never asserted on timing in tests).
TARGET_RATIO, TARGET_MATCHED, TARGET_SPEEDUP = 2.0, 2.5, 1.5
DEVICE_TYPES = ("cpu", "cuda")  # what the reference engine runs on
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


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``check`` on the ``dspark-harvest`` subparsers."""
    parser = subparsers.add_parser(
        "check",
        help="measure a drafter under both harvests: accept length, probe, exactness, speed",
        description=(
            "Decode fixed prompts with the target alone and with the drafter under each harvest "
            "(dflash: rows 1..b-1, dspark: rows 0..b-1) at temperature 0, and report accept length, "
            "per-position acceptance, the offset probe, exactness against the target's own greedy "
            "output, tokens/s and speedup. No arguments: the embedded tiny target and drafters."
        ),
    )
    parser.add_argument("--target", metavar="PATH", help="target: a local Hugging Face causal-LM folder")
    parser.add_argument(
        "--draft", metavar="PATH", help="drafter: a local z-lab / SpecForge checkpoint folder"
    )
    parser.add_argument("--device", default="cpu", help="torch device, e.g. cpu or cuda (default: cpu)")
    parser.add_argument("--dtype", choices=DTYPES, default="float32", help="compute dtype (default: float32)")
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=DEFAULT_MAX_NEW_TOKENS,
        help=f"tokens generated per prompt (default: {DEFAULT_MAX_NEW_TOKENS})",
    )
    parser.add_argument(
        "--num-prompts", type=int, default=None, help="use only the first N fixed prompts (default: all)"
    )
    parser.add_argument(
        "--prompt",
        action="append",
        metavar="TEXT",
        help="a prompt to decode (repeatable; default: the embedded fixed prompts)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--plot", metavar="FILE.png", help="draw per-position acceptance with matplotlib")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: 1 for the embedded tiny models, where more threads only add "
        "synchronisation, torch's own default with --target)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.set_defaults(func=run)
    return parser


# -- loading -------------------------------------------------------------------------------------


@dataclass
class Drafter:
    """One drafter under check: its checkpoint census and its loaded model."""

    name: str
    cfg: DflashCfg
    strategy: str | None  # what the census says ("dflash" / "dspark"), None when it cannot tell
    census_note: str
    model: DFlashDraftModel
    sglang_cannot_serve: str | None = None  # why sglang cannot serve it on this target, if it cannot


def _census_strategy(cfg: DflashCfg) -> tuple[str | None, str]:
    try:
        strategy = "dspark" if cfg.strategy_dspark else "dflash"
    except CensusConflictError as exc:  # a measurement is exactly what settles a conflict
        return None, f"the census is contradictory ({exc.message})"
    if cfg.deciding_tier is None:
        return strategy, "no signal in the checkpoint: the historical default (mask-fill)"
    return strategy, f"census tier {cfg.deciding_tier}"


def _torch_device(name: str) -> torch.device:
    """``--device`` as a torch device the reference engine runs on (cpu, cuda, cuda:N), checked up front."""
    import torch

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


def _threads(requested: int | None, embedded: bool) -> int | None:
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


def check_plot_path(path: str) -> None:
    """Refuse, before anything is measured, a ``--plot`` file that could not be written."""
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError as exc:
        raise UsageError(
            "--plot needs matplotlib; install it with `pip install sglang-dspark-plugin[plot]`.",
            where="--plot",
        ) from exc
    shown = printable(path, 200)
    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    target = Path(path).expanduser()
    found = stat_path(target, "--plot")
    if found is not None and is_dir(target, "--plot"):
        raise UsageError(
            f"--plot {shown} is a directory; give a file name in it, such as {shown.rstrip('/')}/check.png.",
            where="--plot",
        )
    if found is not None:
        regular_file(target, "--plot", "give a new file name or a regular file to overwrite.")
    extension = target.suffix[1:].lower()
    if extension not in formats:
        raise UsageError(
            f"--plot {shown}: {'no' if not extension else 'unknown'} file extension"
            f"{'' if not extension else ' .' + printable(extension, 20)}; end the name in one of "
            f"{', '.join('.' + f for f in formats)} (e.g. check.png).",
            where="--plot",
        )
    if not is_dir(target.parent, "--plot folder"):
        raise UsageError(
            f"--plot {shown}: the folder {printable(target.parent, 200)} does not exist; create it first.",
            where="--plot",
        )


def _check_env() -> str | None:
    """``MEMRA_DSPARK_HARVEST`` as a server would read it; garbage is refused before any model loads."""
    value = os.environ.get(ENV_VAR)
    if value is not None:
        DsparkHarvest.from_env_value(value)  # HarvestEnvError (kind env): the server would refuse it
    return value


def served_by_sglang(cfg: DflashCfg, env_value: str | None) -> dict[str, Any]:
    """What ``DSPARK_HARVEST`` would serve for this drafter with this environment, or why it refuses."""
    try:
        resolution = Resolution.of(cfg, env_value)
    except CensusConflictError as exc:
        return {"harvest": None, "source": None, "refused": exc.message}
    return {"harvest": resolution.harvest.name(), "source": resolution.source, "refused": None}


def _is_out_of_memory(exc: BaseException) -> bool:
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()  # CPU allocation failures are plain RuntimeErrors
    return isinstance(exc, RuntimeError) and "memory" in text and "alloc" in text


@contextlib.contextmanager
def _memory_guard(stage: str) -> Iterator[None]:
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


def load_target(path: str | Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """A local HF causal LM and its tokenizer, offline; a typed error when it cannot be loaded."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one progress bar (ours) on stderr
    folder = check_target_files(path)
    try:
        with _memory_guard("loading the target"):
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, local_files_only=True)
            return model.to(device).eval(), tokenizer
    except DsparkHarvestError:
        raise
    except Exception as exc:  # transformers and safetensors raise many types; all mean "cannot load it"
        raise InvalidCheckpointError(
            f"--target {printable(repr(str(path)), 200)}: transformers cannot load it offline "
            f"({describe(exc)}); the folder needs a causal-LM config, its weights and tokenizer files.",
            where=printable(folder),
        ) from exc


def load_drafter_for(
    name: str, cfg: DflashCfg, target: Any, tokenizer: Any, device: torch.device, dtype: torch.dtype
) -> Drafter:
    """Load one drafter from its census and check that it fits the target; typed errors otherwise."""
    from .engine.fit import fit_drafter

    strategy, note = _census_strategy(cfg)
    with _memory_guard(f"loading the drafter {name}"):
        fitted = fit_drafter(cfg, target, tokenizer, device=device, dtype=dtype)
    return Drafter(name, cfg, strategy, note, fitted.model, fitted.sglang_cannot_serve)


def encode_prompts(tokenizer: Any, prompts: list[str]) -> list[list[int]]:
    """Token ids of each prompt; an empty encoding is refused (there would be no context to decode from)."""
    encoded = [list(tokenizer(text)["input_ids"]) for text in prompts]
    for text, ids in zip(prompts, encoded, strict=True):
        if not ids:
            raise InvalidCheckpointError(f"prompt {text!r} encodes to no token.", where="prompts")
    return encoded


# -- measuring -----------------------------------------------------------------------------------


@dataclass
class Run:
    """One drafter under one harvest, summed over the prompts."""

    drafter: Drafter
    harvest: DsparkHarvest
    telemetry: Any
    seconds: float = 0.0
    tokens: int = 0
    exact: bool = True
    counts: ProbeCounts | None = None
    probe: ProbeResult | None = None
    outputs: list[list[int]] = field(default_factory=list)
    meta_lengths: list[float] = field(default_factory=list)  # sglang's meta_info figure, per request

    @property
    def matched(self) -> bool:
        return self.drafter.strategy == self.harvest.name()

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """Exactly the issue's run schema."""
        assert self.probe is not None
        return {
            "drafter": self.drafter.name,
            "drafter_strategy": self.drafter.strategy,
            "harvest": self.harvest.name(),
            "matched": self.matched,
            "accept_length": self.telemetry.mean_accept_length() or 1.0,
            "sglang_meta_accept_length": (
                sum(self.meta_lengths) / len(self.meta_lengths) if self.meta_lengths else None
            ),
            "per_position": self.telemetry.per_position_rates() or [],
            "exact_match": self.exact,
            "tokens_per_s": self.tokens_per_s,
            "probe_verdict": self.probe.verdict,
        }


def measure(
    target: Any,
    drafters: list[Drafter],
    prompts: list[list[int]],
    max_new_tokens: int,
    *,
    progress: bool = True,
) -> tuple[list[Run], float, float]:
    """Decode every prompt autoregressively and with every drafter x harvest, interleaved.

    Returns the runs, the autoregressive tokens/s and the wall time of the measurement.
    """
    from tqdm import tqdm

    from .engine import autoregressive_generate, speculative_generate
    from .engine.probe import ProbeCounts, probe_counts, verdict
    from .engine.spec_decode import QUIET
    from .telemetry import AcceptTelemetry

    runs = [
        Run(
            d,
            h,
            AcceptTelemetry(h.n_drafts(d.model.block_size), h, "check", settings=QUIET),
            counts=ProbeCounts(),
        )
        for d in drafters
        for h in DsparkHarvest
    ]
    # warm-up: first calls pay for allocations and kernel selection, keep them out of the timing
    autoregressive_generate(target, prompts[0], WARMUP_TOKENS)
    for d in drafters:
        for h in DsparkHarvest:
            speculative_generate(target, d.model, prompts[0], h, WARMUP_TOKENS)

    start = time.perf_counter()
    ar_seconds, ar_tokens = 0.0, 0
    bar = tqdm(
        total=len(prompts) * (1 + len(runs)), desc="check", unit="gen", disable=not progress, file=sys.stderr
    )
    for prompt in prompts:
        ref = autoregressive_generate(target, prompt, max_new_tokens)
        ar_seconds, ar_tokens = ar_seconds + ref.seconds, ar_tokens + len(ref.tokens)
        bar.update()
        for run_ in runs:
            gen = speculative_generate(
                target, run_.drafter.model, prompt, run_.harvest, max_new_tokens, telemetry=run_.telemetry
            )
            run_.seconds += gen.seconds
            run_.tokens += len(gen.tokens)
            run_.exact &= gen.tokens == ref.tokens
            run_.outputs.append(gen.tokens)
            if gen.sglang_meta_accept_length is not None:
                run_.meta_lengths.append(gen.sglang_meta_accept_length)
            run_.counts = run_.counts + probe_counts(gen.probe_rounds, prompt + ref.tokens)
            bar.update()
    bar.close()
    for run_ in runs:
        run_.probe = verdict(run_.counts, run_.harvest)
    return runs, (ar_tokens / ar_seconds if ar_seconds > 0 else 0.0), time.perf_counter() - start


# -- reporting -----------------------------------------------------------------------------------


def recommend(drafter: Drafter, runs: list[Run]) -> dict[str, Any]:
    """The harvest that accepts more, and how it relates to what the census says."""
    mine = {r.harvest: r.telemetry.mean_accept_length() or 1.0 for r in runs if r.drafter is drafter}
    best = max(mine, key=lambda h: (mine[h], h.name() == drafter.strategy))
    other = next(h for h in mine if h is not best)
    measured = f"accept length {mine[best]:.2f} under {best.name()} vs {mine[other]:.2f} under {other.name()}"
    env = f"MEMRA_DSPARK_HARVEST={best.name()}"
    if mine[best] < 1.1:
        advice = f"neither harvest accepts ({measured}): this drafter does not fit this target"
    elif drafter.strategy == best.name():
        advice = f"serve as is: the census says {best.name()} and the measurement agrees ({measured})"
    elif drafter.strategy is None:
        advice = f"serve with {env}: {drafter.census_note}; the measurement decides ({measured})"
    else:
        advice = (
            f"the census says {drafter.strategy} but {best.name()} accepts more ({measured}); check the "
            f"checkpoint's config, and serve with {env} if it is right"
        )
    return {
        "drafter": drafter.name,
        "harvest": best.name(),
        "census": drafter.strategy,
        "advice": advice,
        "sglang_cannot_serve": drafter.sglang_cannot_serve,
    }


def build_report(
    target_path: str,
    drafters: list[Drafter],
    runs: list[Run],
    ar_tps: float,
    settings: dict[str, Any],
    env_value: str | None = None,
) -> dict[str, Any]:
    """The ``--json`` object: ``runs``, ``ar_tokens_per_s``, ``manifest`` (+ context).

    ``served`` says, per drafter, what ``DSPARK_HARVEST`` would serve with ``MEMRA_DSPARK_HARVEST`` as
    it is now (``env_value``), or why it would refuse.
    """
    from .geometry import RoundGeometry, build_manifest
    from .harvest import Resolution

    recommendations = [recommend(d, runs) for d in drafters]
    manifests = []
    for d, rec in zip(drafters, recommendations, strict=True):
        best = DsparkHarvest.from_name(rec["harvest"])
        assert best is not None
        # The deployment being recommended: the census alone where it agrees, else the explicit override.
        resolution = Resolution.of(d.cfg, None if d.strategy == best.name() else best.name())
        run_ = next(r for r in runs if r.drafter is d and r.harvest is best)
        manifests.append(
            build_manifest(
                RoundGeometry(best, d.model.block_size),
                resolution,
                d.cfg,
                producer="reference-engine",
                extra={
                    "drafter": d.name,
                    "target": target_path,
                    "accept_length": run_.telemetry.mean_accept_length(),
                    "exact_match": run_.exact,
                },
            )
        )
    from .telemetry import ACCEPT_LENGTH_DEFINITION

    return {
        "accept_length_definition": ACCEPT_LENGTH_DEFINITION,
        "runs": [r.to_json() for r in runs],
        "ar_tokens_per_s": ar_tps,
        "manifest": manifests[0],
        "manifests": manifests,
        "drafters": [{"drafter": d.name, "strategy": d.strategy, **d.model.describe()} for d in drafters],
        "recommendations": recommendations,
        "probes": [
            {"drafter": r.drafter.name, "harvest": r.harvest.name(), **r.probe.to_json()}  # type: ignore[union-attr]
            for r in runs
        ],
        "served": [
            {"drafter": d.name, "env_value": env_value, **served_by_sglang(d.cfg, env_value)}
            for d in drafters
        ],
        "settings": {"target": target_path, **settings},
    }


def targets(report: dict[str, Any]) -> list[tuple[str, bool]]:
    """The issue-4 targets per drafter: (description, met)."""
    out: list[tuple[str, bool]] = []
    ar = report["ar_tokens_per_s"]
    by_drafter: dict[str, list[dict[str, Any]]] = {}
    for r in report["runs"]:
        by_drafter.setdefault(r["drafter"], []).append(r)
    for name, rs in by_drafter.items():
        matched = [r for r in rs if r["matched"]]
        mismatched = [r for r in rs if not r["matched"]]
        if len(matched) != 1 or len(mismatched) != 1:
            out.append((f"{name}: the census cannot tell its strategy, no matched run to measure", False))
            continue
        m, x = matched[0], mismatched[0]
        ratio = m["accept_length"] / x["accept_length"]
        speedup = m["tokens_per_s"] / ar if ar else 0.0
        out += [
            (
                f"{name}: matched / mismatched accept length {ratio:.2f}x >= {TARGET_RATIO}x",
                ratio >= TARGET_RATIO,
            ),
            (
                f"{name}: matched accept length {m['accept_length']:.2f} >= {TARGET_MATCHED}",
                m["accept_length"] >= TARGET_MATCHED,
            ),
            (
                f"{name}: matched speedup over autoregressive {speedup:.2f}x >= {TARGET_SPEEDUP}x",
                speedup >= TARGET_SPEEDUP,
            ),
            (f"{name}: exact in both harvests", all(r["exact_match"] for r in rs)),
        ]
    return out


def _short_verdict(verdict: str) -> str:
    # the table column is narrow: the probe's own verdicts, abbreviated
    from .engine.probe import ALIGNED, EARLY, INCONCLUSIVE, LATE

    short = {
        ALIGNED: "aligned",
        INCONCLUSIVE: "inconclusive",
        LATE: "late: looks dspark",
        EARLY: "early: looks dflash",
    }
    return short.get(verdict, "neither")


def _heads_text(drafter: dict[str, Any]) -> str:
    """One line on a drafter's DSpark heads, as ``describe()`` lists them."""
    markov, confidence = drafter["markov_head"], drafter["confidence_head"]
    text = (
        f"Markov head {markov['type']}, rank {markov['rank']}: drafts row by row, each biased by the previous"
        if markov
        else "no Markov head"
    )
    if confidence:
        features = " with the Markov features" if confidence["with_markov"] else ""
        text += f"; confidence head{features}, loaded and unused: every draft is verified"
    return text


def format_report(report: dict[str, Any]) -> str:
    """The human-readable table and notes."""
    s = report["settings"]
    ar = report["ar_tokens_per_s"]
    lines = [
        f"dspark-harvest check: target {s['target']}",
        f"  device {s['device']}, {s['dtype']}, {s['prompts']} prompts x {s['max_new_tokens']} new tokens, "
        f"{s['threads']} thread(s), temperature 0, measured in {s['wall_s']:.1f} s",
        "",
    ]
    header = (
        "drafter",
        "strategy",
        "harvest",
        "matched",
        "accept",
        "per-position acceptance",
        "probe",
        "exact",
        "tok/s",
        "speedup",
    )
    rows = []
    for r in report["runs"]:
        rows.append(
            (
                r["drafter"],
                r["drafter_strategy"] or "?",
                r["harvest"],
                "yes" if r["matched"] else "no",
                f"{r['accept_length']:.2f}",
                " ".join(f"{p:.2f}" for p in r["per_position"]),
                _short_verdict(r["probe_verdict"]),
                "yes" if r["exact_match"] else "NO",
                f"{r['tokens_per_s']:.1f}",
                f"{r['tokens_per_s'] / ar:.2f}x" if ar else "-",
            )
        )
    rows.append(("autoregressive", "", "", "", "1.00", "", "", "yes", f"{ar:.1f}", "1.00x"))
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    heads = [d for d in report.get("drafters", []) if d["markov_head"] or d["confidence_head"]]
    if heads:
        lines += ["", "DSpark heads:"] + [f"  {d['drafter']}: {_heads_text(d)}" for d in heads]
    if not all(r["exact_match"] for r in report["runs"]):
        lines += ["", "NOT EXACT: a speculative output differs from the target's own greedy output."]
        if s["dtype"] != "float32":
            lines.append(
                f"  In {s['dtype']} a several-row verify and a one-row decoding step round differently, "
                "so near-ties can flip; rerun with --dtype float32 to check exactness."
            )
        else:
            lines.append(
                "  In float32 this is a bug in the reference engine; please report it with this output."
            )
    lines += [
        "",
        "offset probe (drafts compared with the target's tokens at their own position and both neighbours):",
    ]
    for p in report["probes"]:
        lines.append(f"  {p['drafter']} / {p['harvest']} harvest: {p['verdict']} ({p['reason']})")
    lines += ["", "recommendation:"]
    for rec in report["recommendations"]:
        lines.append(f"  {rec['drafter']}: {rec['advice']}")
        if rec.get("sglang_cannot_serve"):
            lines.append(f"  {rec['drafter']}: sglang cannot serve this: {rec['sglang_cannot_serve']}")
    served = report.get("served") or []
    if served:
        env = served[0]["env_value"]
        setting = f"{ENV_VAR}={env!r}" if env is not None else f"{ENV_VAR} unset"
        lines += ["", f"served by --speculative-algorithm DSPARK_HARVEST now ({setting}):"]
        for item in served:
            what = (
                f"{item['harvest']} harvest (source: {item['source']})"
                if item["refused"] is None
                else f"refused at startup: {item['refused']}"
            )
            lines.append(f"  {item['drafter']}: {what}")
    if s.get("embedded"):  # the targets are the embedded models' promise, not a verdict on any drafter
        lines += ["", "targets:"]
        for text, ok in targets(report):
            lines.append(f"  [{'met' if ok else 'MISSED'}] {text}")
    return "\n".join(printable(line) for line in lines)


def plot(report: dict[str, Any], path: str) -> None:
    """Per-position acceptance of every run, matched solid and mismatched dashed."""
    check_plot_path(path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors: dict[str, str] = {}  # one colour per drafter, so its two harvests pair up
    for r in report["runs"]:
        color = colors.setdefault(r["drafter"], f"C{len(colors)}")
        xs = range(1, len(r["per_position"]) + 1)
        label = (
            f"{r['drafter']} ({r['drafter_strategy'] or '?'}) / {r['harvest']} harvest: "
            f"accept {r['accept_length']:.2f}"
        )
        ax.plot(xs, r["per_position"], "-o" if r["matched"] else "--x", color=color, label=label)
    ax.set_xlabel("draft position j (draft j predicts anchor + j)")
    ax.set_ylabel("acceptance rate")
    ax.set_ylim(0, 1.02)
    ax.set_title("dspark-harvest check: per-position acceptance (solid = matched harvest)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        fig.savefig(Path(path).expanduser(), dpi=120)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"--plot {printable(path, 200)}: cannot write it ({describe(exc)}).", where="--plot"
        ) from exc
    finally:
        plt.close(fig)


# -- the command ---------------------------------------------------------------------------------


def check(args: argparse.Namespace) -> dict[str, Any]:
    """Run the check described by ``args``; returns the report (raises the typed errors)."""
    import torch

    # every argument first: a usage error should not cost a model load, nor a measurement
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
    device = _torch_device(args.device)
    threads = _threads(args.threads, embedded=args.target is None)
    if args.plot:
        check_plot_path(args.plot)
    env_value = _check_env()
    if threads is not None:
        torch.set_num_threads(threads)
    dtype = getattr(torch, args.dtype)

    from .embedded import EMBEDDED

    if args.target is None:
        target_path, drafts = str(EMBEDDED.target), list(EMBEDDED.drafters.values())
    else:
        target_path, drafts = args.target, [Path(args.draft)]
    # the census first: a refused drafter should not cost a model load
    from .census import census

    cfgs = [census(str(path)) for path in drafts]
    from .engine.fit import check_engine_can_draft

    for cfg in cfgs:
        check_engine_can_draft(cfg)
    target, tokenizer = load_target(target_path, device, dtype)
    drafters = [
        load_drafter_for(Path(p).name, cfg, target, tokenizer, device, dtype)
        for p, cfg in zip(drafts, cfgs, strict=True)
    ]
    texts = (args.prompt or list(EMBEDDED.prompts))[: args.num_prompts]
    prompts = encode_prompts(tokenizer, texts)
    with _memory_guard("measuring"):
        runs, ar_tps, wall = measure(
            target, drafters, prompts, args.max_new_tokens, progress=not args.no_progress
        )
    settings = {
        "embedded": args.target is None,
        "device": str(device),
        "dtype": args.dtype,
        "prompts": len(prompts),
        "max_new_tokens": args.max_new_tokens,
        "threads": torch.get_num_threads(),
        "wall_s": wall,
    }
    return build_report(target_path, drafters, runs, ar_tps, settings, env_value)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``check``; returns the exit code (0; 1 if a run was not exact; 2 on a refusal)."""
    out = sys.stdout if out is None else out
    try:
        report = check(args)
        if args.plot:
            plot(report, args.plot)
    except DsparkHarvestError as exc:
        print(exc.render("check", as_json=args.json), file=out)
        return EXIT_REFUSED
    if args.json:
        print(json.dumps(report, indent=2, default=str), file=out)
    else:
        print(format_report(report), file=out)
        if args.plot:
            print(f"\nplot written to {args.plot}", file=out)
    return EXIT_OK if all(r["exact_match"] for r in report["runs"]) else EXIT_NOT_EXACT


__all__ = [
    "add_parser",
    "run",
    "check",
    "check_target_files",
    "check_plot_path",
    "served_by_sglang",
    "measure",
    "recommend",
    "build_report",
    "format_report",
    "plot",
]
