"""``dspark-harvest inspect PATH [--json]``: the census of a checkpoint, its resolved harvest and geometry.

Reads no tensor data and never imports torch, so it is instant on a checkpoint of any size.
A refusal (conflict, unsupported, invalid, env) exits 2 with a readable message, or with
``{"error": {"kind", "message"}}`` under ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from ..census.draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL
from ..checkpoint.files import printable
from ..commands import EXIT_OK, EXIT_REFUSED, add_command, emit, refuse
from ..errors import DsparkHarvestError

TIER_NAMES = {TIER_EXPLICIT: "explicit", TIER_STRUCTURAL: "structural", TIER_INFO: "info"}


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
    """The ``--json`` report of ``path``; raises the typed errors on a refusal.

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
    from ..harvest import DsparkHarvest
    from ..serving.capture import uncapturable_message

    found = _bundled_in(path)
    if target is not None:
        _require_local_target(target, bundling=found is not None)
    cfg = census(path if found is None else found[1].folder)
    resolution = DsparkHarvest.explain(cfg, environ=environ)
    geometry_json, manifest = _geometry(cfg, resolution)
    unservable = None
    if cfg.num_target_layers is not None and cfg.target_layer_ids is not None:
        architecture = None if found is None else found[1].target_architecture
        why = uncapturable_message(
            cfg.target_layer_ids, cfg.num_target_layers, target_architecture=architecture
        )
        unservable = why or None
    from ..serving.request import LaunchRequest

    report = _report(cfg, resolution, geometry_json, manifest, unservable)
    env = _harvest_env(environ)
    if found is None:
        served, advice = _per_release(LaunchRequest(draft=cfg.path, target=target, harvest_env=env))
        bundled_json = None
    else:
        bundling, bundled = found  # a launch of the bundling target with no draft path; local: no download
        served, advice = _per_release(LaunchRequest(draft=None, target=str(bundling.folder), harvest_env=env))
        bundled_json = _bundled_json(path, bundled)
    report["warnings"] += [a for a in advice if a not in report["warnings"]]
    return {**report, "servability": [s.to_json() for s in served], "bundled": bundled_json}


def _geometry(cfg: Any, resolution: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The round geometry's report fields and the manifest (``None`` without a block size)."""
    from ..geometry import BLOCK_SIZE_FLAGS, RoundGeometry, build_manifest

    if cfg.block_size is None:
        geometry_json: dict[str, Any] = {
            "harvest": resolution.harvest.name(),
            "block_size": None,
            "block_size_flag": BLOCK_SIZE_FLAGS[resolution.harvest],
            "first_row": resolution.harvest.first_row(),
            **dict.fromkeys(("n_drafts", "gamma", "verify_window", "harvested_rows", "trained_offsets")),
        }
        return geometry_json, None
    geometry = RoundGeometry(resolution.harvest, cfg.block_size)
    return geometry.to_json(), build_manifest(geometry, resolution, cfg, producer="inspect")


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
    from ..serving import SglangSupport
    from ..serving.releases import TESTED
    from ..serving.verdict import release_verdict

    served = tuple(release_verdict(request, SglangSupport.for_version(v)) for v in TESTED)
    advice: list[str] = []
    for verdict in served:
        advice += [a for a in verdict.advice if a not in advice]
    return served, advice


def _bundled_json(path: str, bundled: Any) -> dict[str, Any]:
    """Where the bundled draft lives and which tested releases look for it there."""
    from ..serving.bundled import KEYS
    from ..serving.releases import TESTED
    from ..serving.request import SglangSupport

    looks = [v for v in TESTED if bundled.form == KEYS or SglangSupport.for_version(v).dspark_subfolder]
    return {
        "form": bundled.form,
        "target": path,
        "checkpoint": bundled.folder,
        "draft_path": bundled.draft,
        "found_by": looks,
    }


def _report(
    cfg: Any, resolution: Any, geometry_json: dict[str, Any], manifest: Any, unservable: str | None
) -> dict[str, Any]:
    return {
        **geometry_json,
        "source": resolution.source,
        "env_value": resolution.env_value,
        "census_harvest": None if resolution.census_harvest is None else resolution.census_harvest.name(),
        "deciding_tier": cfg.deciding_tier,
        "checkpoint": cfg.path,
        "architecture": cfg.architecture,
        "mask_token_id": cfg.mask_token_id,
        "target_layer_ids": None if cfg.target_layer_ids is None else list(cfg.target_layer_ids),
        "num_target_layers": cfg.num_target_layers,
        "vocab_size": cfg.vocab_size,
        "markov_rank": cfg.markov_rank,
        "evidence": [s.to_json() for s in cfg.evidence],
        "warnings": list(resolution.warnings),
        "sglang_cannot_serve": unservable,
        "manifest": manifest,
    }


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``inspect``; returns the exit code (0, or 2 on a refusal)."""
    out = sys.stdout if out is None else out
    try:
        report = inspect_checkpoint(args.path, target=args.target)
    except DsparkHarvestError as exc:
        return refuse(exc, "inspect", args.json, out)
    emit(out, args.json, lambda: report, lambda: format_report(report))
    return EXIT_OK


def _value(value: Any, limit: int = 48) -> str:
    text = json.dumps(value, default=str)  # ensure_ascii: no raw control character reaches the terminal
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bundled_lines(bundled: dict[str, Any] | None) -> list[str]:
    """The target and where its bundled draft lives (nothing for a draft inspected by its own path)."""
    if bundled is None:
        return []
    from ..serving.bundled import DRAFT_FLAG

    where = "its config.json's dspark_* keys" if bundled["form"] == "dspark_keys" else "its dspark/ subfolder"
    found_by = f"sglang {', '.join(bundled['found_by'])}" if bundled["found_by"] else "no tested sglang"
    return [
        f"target         {bundled['target']}",
        f"bundled        {bundled['form']}: a draft in the target ({where}), found with no {DRAFT_FLAG} "
        f"by {found_by}",
    ]


def _served_line(served: dict[str, Any]) -> str:
    """``sglang 0.5.23  DSPARK, sample_from_anchor=false  (how)``: one release's verdict."""
    what = served["builtin"] or "cannot serve"
    if served["sample_from_anchor"] is False:
        what += ", sample_from_anchor=false"
    if served["needs"]:
        what += f" with {served['needs']} N"
    return f"{'sglang ' + served['version']:<14} {what}  ({served['how']})"


def format_report(report: dict[str, Any]) -> str:
    """The human-readable form of an ``inspect`` report."""
    lines = [
        *_bundled_lines(report.get("bundled")),
        f"checkpoint     {report['checkpoint']}",
        f"architecture   {report['architecture'] or '(none)'}",
        "",
        "evidence (tier 1 = explicit declaration, 2 = structural default, 0 = recorded, no vote):",
    ]
    evidence = report["evidence"]
    if evidence:
        width = max(len("signal"), *(len(s["signal"]) for s in evidence))
        lines.append(f"  {'tier':<12} {'vote':<7} {'signal':<{width}}  value")
        for s in evidence:
            tier = f"{s['tier']} {TIER_NAMES.get(s['tier'], '')}"
            line = f"  {tier:<12} {s['vote'] or '-':<7} {s['signal']:<{width}}  {_value(s['value'])}"
            lines.append(line + (f"  ({s['note']})" if s.get("note") else ""))
    else:
        lines.append("  (no signal at all)")
    source = report["source"]
    if source == "census":
        why = f"the checkpoint census, tier {report['deciding_tier']}"
    elif source == "env":
        why = f"MEMRA_DSPARK_HARVEST={report['env_value']!r}"
    else:
        why = "no signal: the historical default (mask-fill); set MEMRA_DSPARK_HARVEST if it is shifted"
    rows = report["harvested_rows"]
    offsets = report["trained_offsets"]
    lines += ["", f"harvest        {report['harvest']}  (source: {source}; {why})"]
    if report["block_size"] is None:
        flag = report["block_size_flag"]
        lines += [
            f"block_size     unknown  (the config gives none; sglang takes it from {flag})",
            f"first_row      {report['first_row']}",
        ]
    else:
        lines += [
            f"block_size     {report['block_size']}",
            f"first_row      {report['first_row']}",
            f"n_drafts       {report['n_drafts']}  (rows {rows[0]}..{rows[-1]}, trained offsets "
            f"+{offsets[0]}..+{offsets[-1]})",
            f"verify_window  {report['verify_window']}",
        ]
    lines += [
        f"mask_token_id  {report['mask_token_id']}",
        f"target_layers  {report['target_layer_ids']}",
    ]
    lines += [_served_line(served) for served in report.get("servability", ())]
    if report.get("sglang_cannot_serve"):
        lines.append(f"sglang cannot serve this: {report['sglang_cannot_serve']}")
    for warning in report["warnings"]:
        lines.append(f"WARNING: {warning}")
    return "\n".join(printable(line) for line in lines)


__all__ = ["add_parser", "run", "inspect_checkpoint", "format_report", "EXIT_OK", "EXIT_REFUSED"]
