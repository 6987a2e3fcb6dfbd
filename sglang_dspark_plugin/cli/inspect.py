"""``dspark-harvest inspect PATH [--json]``: the census of a checkpoint, its resolved harvest and geometry.

Reads no tensor data and never imports torch, so it is instant on a checkpoint of any size.
A refusal (conflict, unsupported, invalid, env) exits 2 with a readable message, or with
``{"error": {"kind", "message"}}`` under ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from typing import Any, TextIO

from ..census.draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL, DflashCfg
from ..checkpoint.files import printable
from ..commands import EXIT_OK, EXIT_REFUSED, add_command, emit, refuse
from ..errors import DsparkHarvestError
from ..geometry import BLOCK_SIZE_FLAGS, RoundGeometry
from ..harvest import Resolution
from ..serving.verdict import Servability

TIER_NAMES = {TIER_EXPLICIT: "explicit", TIER_STRUCTURAL: "structural", TIER_INFO: "info"}


def _value(value: Any, limit: int = 48) -> str:
    text = json.dumps(value, default=str)  # ensure_ascii: no raw control character reaches the terminal
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class BundledReport:
    """A draft bundled in its target: where it lives and which tested releases find it there."""

    form: str  # "dspark_keys" or "dspark_subfolder" (``serving.bundled``)
    target: str
    checkpoint: str
    draft_path: str
    found_by: tuple[str, ...]

    @classmethod
    def of(cls, path: str, bundled: Any) -> BundledReport:
        from ..releases import TESTED
        from ..serving.bundled import KEYS
        from ..serving.request import SglangSupport

        looks = [v for v in TESTED if bundled.form == KEYS or SglangSupport.for_version(v).dspark_subfolder]
        return cls(bundled.form, path, str(bundled.folder), bundled.draft, tuple(looks))

    def to_json(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "target": self.target,
            "checkpoint": self.checkpoint,
            "draft_path": self.draft_path,
            "found_by": list(self.found_by),
        }

    def lines(self) -> list[str]:
        """The target and where its bundled draft lives."""
        from ..serving.bundled import DRAFT_FLAG, KEYS

        where = "its config.json's dspark_* keys" if self.form == KEYS else "its dspark/ subfolder"
        found_by = f"sglang {', '.join(self.found_by)}" if self.found_by else "no tested sglang"
        return [
            f"target         {self.target}",
            f"bundled        {self.form}: a draft in the target ({where}), found with no {DRAFT_FLAG} "
            f"by {found_by}",
        ]


@dataclass(frozen=True)
class InspectReport:
    """What ``inspect`` found: the census, the resolution, the geometry (None without a block size),
    each tested release's verdict; ``to_json`` (``--json``) and ``text`` render it."""

    cfg: DflashCfg
    resolution: Resolution
    geometry: RoundGeometry | None
    manifest: dict[str, Any] | None
    unservable: str | None  # why sglang cannot capture the draft's target layers
    servability: tuple[Servability, ...]
    bundled: BundledReport | None
    warnings: tuple[str, ...]  # the resolution's, then the advice the plans would log

    def geometry_json(self) -> dict[str, Any]:
        """The geometry's fields; without a block size, ``null`` where the width is needed."""
        if self.geometry is not None:
            return self.geometry.to_json()
        harvest = self.resolution.harvest
        return {
            "harvest": harvest.name(),
            "block_size": None,
            "block_size_flag": BLOCK_SIZE_FLAGS[harvest],
            "first_row": harvest.first_row(),
            **dict.fromkeys(("n_drafts", "gamma", "verify_window", "harvested_rows", "trained_offsets")),
        }

    def to_json(self) -> dict[str, Any]:
        cfg, resolution = self.cfg, self.resolution
        census_harvest = resolution.census_harvest
        return {
            **self.geometry_json(),
            "source": resolution.source,
            "env_value": resolution.env_value,
            "census_harvest": None if census_harvest is None else census_harvest.name(),
            "deciding_tier": cfg.deciding_tier,
            "checkpoint": cfg.path,
            "architecture": cfg.architecture,
            "mask_token_id": cfg.mask_token_id,
            "target_layer_ids": None if cfg.target_layer_ids is None else list(cfg.target_layer_ids),
            "num_target_layers": cfg.num_target_layers,
            "vocab_size": cfg.vocab_size,
            "markov_rank": cfg.markov_rank,
            "evidence": [s.to_json() for s in cfg.evidence],
            "warnings": list(self.warnings),
            "sglang_cannot_serve": self.unservable,
            "manifest": self.manifest,
            "servability": [s.to_json() for s in self.servability],
            "bundled": None if self.bundled is None else self.bundled.to_json(),
        }

    def _evidence_lines(self) -> list[str]:
        evidence = self.cfg.evidence
        if not evidence:
            return ["  (no signal at all)"]
        width = max(len("signal"), *(len(s.signal) for s in evidence))
        lines = [f"  {'tier':<12} {'vote':<7} {'signal':<{width}}  value"]
        for s in evidence:
            tier = f"{s.tier} {TIER_NAMES.get(s.tier, '')}"
            line = f"  {tier:<12} {s.vote or '-':<7} {s.signal:<{width}}  {_value(s.value)}"
            lines.append(line + (f"  ({s.note})" if s.note else ""))
        return lines

    def _geometry_lines(self) -> list[str]:
        g, harvest = self.geometry, self.resolution.harvest
        if g is None:
            flag = BLOCK_SIZE_FLAGS[harvest]
            return [
                f"block_size     unknown  (the config gives none; sglang takes it from {flag})",
                f"first_row      {harvest.first_row()}",
            ]
        rows, offsets = g.harvested_rows, g.trained_offsets
        return [
            f"block_size     {g.block_size}",
            f"first_row      {g.first_row}",
            f"n_drafts       {g.gamma}  (rows {rows[0]}..{rows[-1]}, trained offsets "
            f"+{offsets[0]}..+{offsets[-1]})",
            f"verify_window  {g.verify_window}",
        ]

    def text(self) -> str:
        """The human-readable form, every line escaped."""
        cfg, resolution = self.cfg, self.resolution
        lines = [
            *([] if self.bundled is None else self.bundled.lines()),
            f"checkpoint     {cfg.path}",
            f"architecture   {cfg.architecture or '(none)'}",
            "",
            "evidence (tier 1 = explicit declaration, 2 = structural default, 0 = recorded, no vote):",
            *self._evidence_lines(),
        ]
        source = resolution.source
        if source == "census":
            why = f"the checkpoint census, tier {cfg.deciding_tier}"
        elif source == "env":
            why = f"MEMRA_DSPARK_HARVEST={resolution.env_value!r}"
        else:
            why = "no signal: the historical default (mask-fill); set MEMRA_DSPARK_HARVEST if it is shifted"
        lines += ["", f"harvest        {resolution.harvest.name()}  (source: {source}; {why})"]
        lines += self._geometry_lines()
        lines += [
            f"mask_token_id  {cfg.mask_token_id}",
            f"target_layers  {None if cfg.target_layer_ids is None else list(cfg.target_layer_ids)}",
        ]
        lines += [f"{'sglang ' + v.version:<14} {v.what()}  ({v.how})" for v in self.servability]
        if self.unservable:
            lines.append(f"sglang cannot serve this: {self.unservable}")
        lines += [f"WARNING: {warning}" for warning in self.warnings]
        return "\n".join(printable(line) for line in lines)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``inspect`` on the ``dspark-harvest`` subparsers."""
    parser = add_command(
        subparsers,
        "inspect",
        help="census of a draft checkpoint: evidence, resolved harvest, geometry (reads no weights)",
        description=(
            "Read a DFlash-family draft checkpoint's config.json and safetensors headers (never the "
            "tensors), list every signal of its training strategy with tier and vote, and print the "
            "harvest the plugin would serve (MEMRA_DSPARK_HARVEST overrides) and the round geometry."
        ),
        run=run,
    )
    parser.add_argument("path", metavar="PATH", help="checkpoint folder, or a hub id in the local HF cache")
    parser.add_argument(
        "--target",
        metavar="FOLDER",
        help="the launch's target (a local folder): each release's verdict then includes the checks "
        "of the draft against it (its vocabulary, the layers sglang can capture)",
    )
    return parser


def inspect_checkpoint(
    path: str, environ: dict[str, str] | None = None, target: str | None = None
) -> dict[str, Any]:
    """The ``--json`` report of ``path`` (``inspect_report(...).to_json()``); raises the typed errors
    on a refusal."""
    return inspect_report(path, environ, target).to_json()


def inspect_report(
    path: str, environ: dict[str, str] | None = None, target: str | None = None
) -> InspectReport:
    """The report of ``path``; raises the typed errors on a refusal.

    ``servability`` is what each tested sglang release serves for a launch of this draft (with
    ``target`` as ``--model-path``, a local folder): the serving plan's own decision, the same
    ``make_plan`` a launch runs (``serving.verdict``).

    A target that bundles its draft (``dspark_*`` keys in its config.json, or a ``dspark/`` subfolder)
    is reported as that draft, with ``bundled`` saying where sglang's DSPARK finds it and
    ``servability`` what each sglang release serves with no ``--speculative-draft-model-path``.
    A config without a block size still gets its harvest: the geometry fields that need the width
    are ``null`` and ``manifest`` is ``null`` (sglang takes the width from its block-size flag).
    """
    from ..census import census
    from ..geometry import RoundGeometry, build_manifest
    from ..harvest import DsparkHarvest
    from ..serving.capture import uncapturable_message
    from ..serving.request import LaunchRequest

    found = _bundled_in(path)
    if target is not None:
        _require_local_target(target, bundling=found is not None)
    cfg = census(path if found is None else found[1].folder)
    resolution = DsparkHarvest.explain(cfg, environ=environ)
    geometry = None if cfg.block_size is None else RoundGeometry(resolution.harvest, cfg.block_size)
    manifest = None if geometry is None else build_manifest(geometry, resolution, cfg, producer="inspect")
    unservable = None
    if cfg.num_target_layers is not None and cfg.target_layer_ids is not None:
        architecture = None if found is None else found[1].target_architecture
        why = uncapturable_message(
            cfg.target_layer_ids, cfg.num_target_layers, target_architecture=architecture
        )
        unservable = why or None
    env = _harvest_env(environ)
    if found is None:
        served, advice = _per_release(LaunchRequest(draft=cfg.path, target=target, harvest_env=env))
        bundled = None
    else:
        bundling, draft = found  # a launch of the bundling target with no draft path; local: no download
        served, advice = _per_release(LaunchRequest(draft=None, target=str(bundling.folder), harvest_env=env))
        bundled = BundledReport.of(path, draft)
    warnings = tuple(dict.fromkeys([*resolution.warnings, *advice]))
    return InspectReport(cfg, resolution, geometry, manifest, unservable, served, bundled, warnings)


def _bundled_in(path: str) -> tuple[Any, Any] | None:
    """``(target, bundled draft)`` when ``path`` is a target bundling its draft where sglang's DSPARK
    finds one (the newest release's rule: ``dspark_*`` keys first, then ``dspark/``); never downloads.

    A config whose ``architectures[0]`` is a DFlash-family draft class is a draft, whatever keys it
    carries: a launch names it as ``--speculative-draft-model-path``, never as the target."""
    from ..census.architectures import family_of
    from ..serving.bundled import bundled_in

    try:
        found = bundled_in(path)
    except DsparkHarvestError:
        return None  # the census says what is wrong with the folder, as for any draft
    return None if found is None or family_of(found[0].architecture) is not None else found


def _require_local_target(target: str, *, bundling: bool) -> None:
    """``--target`` names a local folder (inspect never downloads), for a draft named by its path."""
    import os

    from ..errors import UsageError

    if bundling:
        raise UsageError(
            "--target: PATH is itself a target bundling its draft; inspect it alone, or pass the draft "
            "folder as PATH.",
            where="--target",
        )
    if not os.path.isdir(target):
        raise UsageError(
            f"--target {printable(target)} is not a local folder; inspect reads no hub and downloads "
            "nothing: pass the target's local folder (its config.json is all it reads).",
            where="--target",
        )


def _harvest_env(environ: dict[str, str] | None) -> str | None:
    from ..harvest import ENV_VAR
    from ..util.validation import require_environ

    return require_environ(environ, "inspect_checkpoint(environ=...)").get(ENV_VAR)


def _per_release(request: Any) -> tuple[tuple[Any, ...], list[str]]:
    """What each tested sglang release serves for the launch ``request``: the serving plan itself
    decides (``serving.verdict``), and the advice its plans would log."""
    from ..releases import TESTED
    from ..serving import SglangSupport
    from ..serving.verdict import release_verdict

    served = tuple(release_verdict(request, SglangSupport.for_version(v)) for v in TESTED)
    advice: list[str] = []
    for verdict in served:
        advice += [a for a in verdict.advice if a not in advice]
    return served, advice


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``inspect``; returns the exit code (0, or 2 on a refusal)."""
    out = sys.stdout if out is None else out
    try:
        report = inspect_report(args.path, target=args.target)
    except DsparkHarvestError as exc:
        return refuse(exc, "inspect", args.json, out)
    emit(out, args.json, report.to_json, report.text)
    return EXIT_OK


__all__ = [
    "BundledReport",
    "EXIT_OK",
    "EXIT_REFUSED",
    "InspectReport",
    "add_parser",
    "inspect_checkpoint",
    "inspect_report",
    "run",
]
