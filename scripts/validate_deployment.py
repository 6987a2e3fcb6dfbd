"""The deployment checks of ``scripts/gpu_validate.py``: a user's target and drafter, each harvest arm
of ``DSPARK_HARVEST`` against the builtin that serves it.

Which builtin serves an arm, with which verify window and gamma flag, is the plugin's own serving plan
(``serving.make_plan``, run here for the server's sglang version): builtin DFLASH for a mask-fill
drafter, DSPARK for a shifted one, DSPARK with ``sample_from_anchor`` false and its gamma flag for a
mask-fill DSpark drafter (sglang 0.5.19 on). An arm the plan refuses must be refused by the server.

The runs, in order: ``baseline`` (no speculation); ``plugin-auto`` (the census decides) and
``builtin-<arm>``, the builtin that serves the census's arm; ``plugin-<other>``, the other arm forced by
``MEMRA_DSPARK_HARVEST`` (the wrong deployment the alarm and the probe must catch). The forced arm has
no builtin twin: a builtin reads the checkpoint as it was trained (its ``sample_from_anchor``, its
architecture), so no builtin launch serves a shifted DSpark drafter mask-fill, or a DFlash one through
DSPARK. Each run serves every prompt alone, then all of them at once (one batch).

The pass criterion: per arm, the plugin serves exactly as its builtin (tokens alone and batched, verify
rounds and accept lengths per request); the plugin's per-round log agrees with sglang's ``meta_info``
(one logged accept length per request-round, as many rounds as ``spec_verify_ct``, the tokens they
commit); the census arm resolves; the matched arm raises no alarm and its live probe says matched, the
forced other arm raises the alarm and its probe names the census arm; every plugin run runs with
``MEMRA_DSPARK_SYNC_DEBUG`` (a synchronisation the plugin adds on CUDA stops the run) and
``MEMRA_DSPARK_HOST_TIMING`` (its host time per round is reported). Exactness against the run without
speculation is reported as information: sglang does not promise bit-identical greedy output across
verify and decode kernels.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "sglang"))  # the served cases' checks
import served_cases as sc

ARMS = ("dflash", "dspark")
VALIDATION_ENV = {"MEMRA_DSPARK_SYNC_DEBUG": "1", "MEMRA_DSPARK_HOST_TIMING": "1"}
"""Set on every plugin run: the sync debug mode around the plugin's round work, and its host timing."""
HOST_COST_LINE = re.compile(
    r"dspark host cost rounds=(\d+) plugin_us_per_round=([0-9.]+) .*?plugin_fraction=([0-9.]+)"
)
NO_CUDA_LINE = "MEMRA_DSPARK_SYNC_DEBUG is on but there is no CUDA device"
ASSUMED_VERSION = "0.5.23"
"""The sglang a dry run plans for when the interpreter has none."""


@dataclass
class RunSpec:
    """One server configuration."""

    name: str
    spec_args: list[str]
    env: dict[str, str | None] = field(default_factory=dict)  # None: unset in the server's environment
    arm: str | None = None  # the harvest arm it serves
    plugin: bool = False
    refusal: str | None = None  # the plan refuses this arm: the server must refuse it too
    pd: bool = False  # served by a prefill server and a decode server (1P1D), sglang's PD disaggregation
    decode_env: dict[str, str | None] = field(default_factory=dict)  # the decode side's, over ``env``
    decode_only: bool = False  # launch the decode side alone (it must refuse before serving)
    bundled: str | None = None  # no draft path: where the plan found the draft bundled in the target


@dataclass
class RunResult:
    """What one run produced (``outcome`` None when it did not serve)."""

    outcome: sc.Outcome | None
    log: str = ""
    error: str | None = None


def request_of(draft: str | None, model_path: str | None, extra_args: str, arm: str | None) -> Any:
    """The ``LaunchRequest`` of a plugin launch with these arguments (the arm forced, or the census's)."""
    from sglang_dspark_plugin.serving import LaunchRequest

    args: dict[str, Any] = {"speculative_draft_model_path": draft, "model_path": model_path}
    words = shlex.split(extra_args)
    for i, word in enumerate(words):
        if word.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("--"):
            args[word[2:].replace("-", "_")] = words[i + 1]
    return LaunchRequest.of(args, {} if arm is None else {"MEMRA_DSPARK_HARVEST": arm})


def plan_arm(
    draft: str | None, model_path: str | None, extra_args: str, arm: str, version: str
) -> tuple[Any, str]:
    """The plugin's plan for ``arm`` on sglang ``version``, or ``(None, why it refuses)``."""
    from sglang_dspark_plugin.errors import DsparkHarvestError
    from sglang_dspark_plugin.serving import SglangSupport, make_plan

    try:
        return make_plan(
            request_of(draft, model_path, extra_args, arm), SglangSupport.for_version(version)
        ), ""
    except DsparkHarvestError as err:
        return None, str(err)


def builtin_args(plan: Any) -> list[str]:
    """The builtin launch that serves what ``plan`` serves: algorithm, verify window, gamma flag."""
    out = []
    for name, value in plan.declared_args.items():
        out += ["--" + name.replace("_", "-"), str(value)]
    return out


def build_runs(
    draft: str | None, model_path: str | None, extra_args: str, census_arm: str | None, version: str
) -> list[RunSpec]:
    """The configurations, in launch order (``draft`` None: the draft bundled in the target, every run
    launched without a draft path, as sglang's DSPARK serves one)."""
    runs = [RunSpec("baseline", [])]
    order = (census_arm, *(a for a in ARMS if a != census_arm)) if census_arm else ARMS
    plugin = ["--speculative-algorithm", "DSPARK_HARVEST"]
    for arm in order:
        auto = arm == census_arm
        plan, why = plan_arm(draft, model_path, extra_args, arm, version)
        env: dict[str, str | None] = {"MEMRA_DSPARK_HARVEST": None if auto else arm, **VALIDATION_ENV}
        name = "plugin-auto" if auto else f"plugin-{arm}"
        bundled = None if plan is None or plan.bundled is None else plan.bundled.describe()
        runs.append(RunSpec(name, list(plugin), env, arm, True, None if plan else why, bundled=bundled))
        if plan is not None and auto:  # a forced arm has no builtin twin: see the module's docstring
            runs.append(RunSpec(f"builtin-{arm}", builtin_args(plan), {"MEMRA_DSPARK_HARVEST": None}, arm))
    return runs


PD_MISMATCH = "plan differs from its prefill server's"
"""What a decode server whose plan differs from its prefill server's manifest says when it refuses."""


def build_pd_runs(runs: list[RunSpec], census_arm: str | None, manifest: str) -> list[RunSpec]:
    """The 1P1D pairs of the census arm: its builtin, the plugin (the decode side checks the prefill
    side's ``manifest``), and a decode server forced to the other arm against that manifest, which
    must refuse to start. None where the census decides nothing or the plan refuses its arm."""
    by_name = {r.name: r for r in runs}
    builtin, auto = by_name.get(f"builtin-{census_arm}"), by_name.get("plugin-auto")
    if census_arm is None or builtin is None or auto is None or auto.refusal is not None:
        return []
    other = next(a for a in ARMS if a != census_arm)
    peer = {"MEMRA_DSPARK_PEER_MANIFEST": manifest}
    prefill_env = {**auto.env, "MEMRA_DSPARK_MANIFEST": manifest}
    forced = {**auto.env, "MEMRA_DSPARK_HARVEST": other}
    return [
        RunSpec(f"pd-{builtin.name}", builtin.spec_args, builtin.env, census_arm, pd=True),
        RunSpec("pd-plugin-auto", auto.spec_args, prefill_env, census_arm, True, pd=True, decode_env=peer),
        RunSpec(
            f"pd-plugin-{other}-decode",
            auto.spec_args,
            forced,
            other,
            True,
            f"the decode server's plan ({other}) differs from the prefill server's manifest ({census_arm})",
            pd=True,
            decode_env=peer,
            decode_only=True,
        ),
    ]


def pd_checks(runs: list[RunSpec], results: dict[str, RunResult], census_arm: str | None) -> list[sc.Check]:
    """The 1P1D pairs: the plugin's pair serves as the builtin's (tokens alone and batched, the decode
    side's verify rounds and accept lengths), its decode log agrees with ``meta_info``, and the decode
    server forced to the other arm refuses, naming the prefill server's manifest."""
    checks: list[sc.Check] = []
    for run in (r for r in runs if r.pd):
        got = results.get(run.name)
        if got is None:
            continue
        if run.decode_only:
            said = PD_MISMATCH in got.log
            checks.append(
                _check(
                    f"{run.name}: refused, its plan differs from the prefill's",
                    said and got.outcome is None,
                    run.refusal or "",
                )
            )
        elif got.outcome is None:
            checks.append(_check(f"{run.name}: served", False, got.error or "no outcome"))
        elif run.plugin:
            builtin = results.get(f"pd-builtin-{census_arm}")
            if builtin is not None and builtin.outcome is not None:
                checks += identity_checks(f"pd {census_arm}", builtin.outcome, got.outcome)
            checks += log_checks(run.name, got.outcome, window_gamma(got.outcome.log))
    return checks


# ---------------------------------------------------------------- the checks


def _check(name: str, ok: bool, detail: str = "") -> sc.Check:
    return sc.Check(name, bool(ok), detail)


def identity_checks(arm: str, builtin: sc.Outcome, plugin: sc.Outcome) -> list[sc.Check]:
    """The plugin's arm serves exactly as its builtin."""
    first = sc._first_difference
    return [
        _check(
            f"{arm}: tokens equal the builtin's",
            plugin.outputs == builtin.outputs,
            first(plugin.outputs, builtin.outputs),
        ),
        _check(
            f"{arm}: batched tokens equal the builtin's",
            plugin.concurrent_outputs == builtin.concurrent_outputs,
            first(plugin.concurrent_outputs, builtin.concurrent_outputs),
        ),
        _check(
            f"{arm}: verify rounds per request equal the builtin's",
            plugin.verify_counts() == builtin.verify_counts(),
            f"{plugin.verify_counts()} vs {builtin.verify_counts()}",
        ),
        _check(
            f"{arm}: meta_info accept lengths equal the builtin's",
            plugin.meta_accept_lengths() == builtin.meta_accept_lengths(),
            f"{plugin.meta_accept_lengths()} vs {builtin.meta_accept_lengths()}",
        ),
        _check(f"{arm}: the builtin has no plugin telemetry", not builtin.round_lines()),
    ]


def log_checks(name: str, got: sc.Outcome, gamma: int | None) -> list[sc.Check]:
    """The plugin's per-round log against sglang's ``meta_info``: every request-round logged once, and
    each request's logged accept lengths add up to its tokens after the first (which the prefill
    makes); the last round may run past ``max_new_tokens`` by at most gamma, the logged figure being
    uncapped."""
    counts = got.verify_counts()
    lines = got.round_lines()[: sum(counts)]
    per_request = got.per_request_rounds()
    tokens = [int(m.get("completion_tokens", len(o))) for m, o in zip(got.metas, got.outputs, strict=True)]
    slack = gamma if gamma is not None else 0
    sums_ok = bool(per_request) and all(  # the first token comes from the prefill, not a verify round
        t - 1 <= sum(r) <= t - 1 + slack for t, r in zip(tokens, per_request, strict=True)
    )
    checks = [
        _check(f"{name}: the plugin logs every round", bool(got.round_lines())),
        _check(
            f"{name}: one logged round per verify round of each request (meta_info spec_verify_ct)",
            len(lines) == sum(counts) and all(bs == 1 for bs, _ in lines),
            f"{len(lines)} single-request lines for {sum(counts)} verify rounds",
        ),
        _check(
            f"{name}: each request's logged accept lengths add up to its tokens",
            sums_ok,
            f"tokens {tokens} vs logged {[sum(r) for r in per_request]}",
        ),
    ]
    batched = [
        c for c in sc.check_concurrent(got, [[]] * len(got.concurrent_outputs)) if "lossless" not in c.name
    ]
    return checks + [sc.Check(f"{name}: {c.name}", c.ok, c.detail) for c in batched]


def arm_checks(run: RunSpec, got: RunResult, census_arm: str | None) -> list[sc.Check]:
    """Alarm, live probe and resolved harvest of a plugin run."""
    out = got.outcome
    assert out is not None
    checks = []
    if run.name == "plugin-auto":
        found = sc.STARTUP_LINE.search(out.log)
        seen = found.group(1) if found else None
        checks.append(_check("auto: the census's arm resolves", seen == census_arm, f"resolved {seen}"))
    if run.bundled is not None:  # the startup line names where the draft was found
        line = next((ln for ln in out.log.splitlines() if sc.STARTUP_LINE.search(ln)), "")
        checks.append(_check(f"{run.name}: serves the {run.bundled}", run.bundled in line, line[-200:]))
    if census_arm is not None:
        matched = run.arm == census_arm
        alarm = sc.ALARM_LINE in out.log
        checks.append(
            _check(
                f"{run.name}: alarm {'absent' if matched else 'raised'}",
                alarm is not matched,
                f"pooled accept length {out.pooled_accept_length():.2f}",
            )
        )
        checks.append(sc._probe_check(run.name, matched, out.log, census_arm))
    return checks


def evaluate(runs: list[RunSpec], results: dict[str, RunResult], census_arm: str | None) -> list[sc.Check]:
    """Every check, as ``served_cases.Check``."""
    checks: list[sc.Check] = []
    for run in (r for r in runs if not r.pd):
        got = results.get(run.name)
        if got is None:
            continue
        if run.refusal is not None:
            checks.append(
                _check(
                    f"{run.name}: refused, as the plan refuses it",
                    got.outcome is None and "DSPARK_HARVEST" in got.log,
                    run.refusal[:200],
                )
            )
            continue
        if got.outcome is None:
            checks.append(_check(f"{run.name}: served", False, got.error or "no outcome"))
            continue
        if run.plugin:
            builtin = results.get(f"builtin-{run.arm}")
            if builtin is not None and builtin.outcome is not None:
                checks += identity_checks(str(run.arm), builtin.outcome, got.outcome)
            checks += log_checks(run.name, got.outcome, window_gamma(got.outcome.log))
            checks += arm_checks(run, got, census_arm)
    return checks + pd_checks(runs, results, census_arm)


def window_gamma(log: str) -> int | None:
    """Drafts per round, from the plugin's startup line."""
    found = re.search(r"DSPARK_HARVEST: harvest=.*? drafts per round=(\d+)", log)
    return int(found.group(1)) if found else None


# ---------------------------------------------------------------- information


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def information(runs: list[RunSpec], results: dict[str, RunResult]) -> dict[str, Any]:
    """Exactness against no speculation (a prefix statistic), the plugin's host cost, sync debug."""
    base = results.get("baseline")
    info: dict[str, Any] = {"exact_vs_no_speculation": {}, "host_cost": {}, "sync_debug": {}}
    for run in runs:
        got = results.get(run.name)
        if got is None or got.outcome is None or run.name == "baseline":
            continue
        out = got.outcome
        if base is not None and base.outcome is not None:
            ref = base.outcome.outputs
            prefix = [common_prefix(a, b) / max(len(b), 1) for a, b in zip(out.outputs, ref, strict=False)]
            info["exact_vs_no_speculation"][run.name] = {
                "identical_requests": sum(a == b for a, b in zip(out.outputs, ref, strict=False)),
                "requests": len(ref),
                "mean_common_prefix_fraction": sum(prefix) / len(prefix) if prefix else None,
            }
        if run.plugin:
            costs = [(int(n), float(us), float(f)) for n, us, f in HOST_COST_LINE.findall(out.log)]
            rounds = sum(n for n, _, _ in costs)
            info["host_cost"][run.name] = {
                "windows": len(costs),
                "plugin_us_per_round": sum(n * us for n, us, _ in costs) / rounds if rounds else None,
                "max_plugin_fraction": max((f for _, _, f in costs), default=None),
            }
            info["sync_debug"][run.name] = (
                "not checked: no CUDA device" if NO_CUDA_LINE in out.log else "on CUDA"
            )
    return info


def departure_checks(departures: dict[str, list[dict[str, Any]]]) -> list[sc.Check]:
    """One check per judged run: no departure from the run without speculation beyond a near-tie flip
    (``check``'s rule, docs/check.md); the near-ties are counted in the detail."""
    checks = []
    for name, found in departures.items():
        errors = [d for d in found if not d["near_tie"]]
        ties = len(found) - len(errors)
        detail = (
            f"{len(errors)} clear departure(s), first {errors[0]}" if errors else f"{ties} near-tie flip(s)"
        )
        checks.append(_check(f"{name}: no departure beyond a near-tie vs no speculation", not errors, detail))
    return checks


def accept_table(runs: list[RunSpec], results: dict[str, RunResult]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        got = results.get(run.name)
        out = None if got is None else got.outcome
        metas = [] if out is None or run.name == "baseline" else out.meta_accept_lengths()
        pooled = None if out is None or not out.round_lines() else out.pooled_accept_length()
        rows.append(
            {
                "run": run.name,
                "arm": run.arm,
                "plugin_log_accept_len": pooled,
                "meta_info_accept_len": sum(metas) / len(metas) if metas else None,
                "server_info_accept_len": None if out is None else out.server_info_accept_length,
                "alarms": 0 if out is None else out.log.count(sc.ALARM_LINE),
            }
        )
    return rows


__all__ = [
    "ARMS",
    "VALIDATION_ENV",
    "RunSpec",
    "RunResult",
    "accept_table",
    "build_pd_runs",
    "build_runs",
    "departure_checks",
    "evaluate",
    "information",
    "plan_arm",
]
