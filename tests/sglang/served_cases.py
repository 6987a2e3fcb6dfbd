"""The served cases: one definition for the CPU served tests and for ``scripts/gpu_validate.py``.

A *run* is one server configuration (algorithm, drafter, forced harvest); a *case* is a check over one
or more runs. ``tests/sglang/test_served.py`` starts each run with sglang's real engine on CPU (with
test-side CPU patches); ``scripts/gpu_validate.py --embedded`` launches the same runs on a GPU server.
Both read this file, so the two cannot drift. Nothing here imports sglang or torch.

Drafters are named by key: the embedded ones (``dflash``: mask-fill; ``dspark``: shifted, no Markov
head; ``dspark-markov``: shifted, SpecForge-shaped with a Markov head; ``dspark-maskfill``: the same
architecture and heads trained mask-fill, declared ``sample_from_anchor: false``), and
``dspark-zero-markov``: the embedded shifted drafter with a zero rank-1 vanilla Markov head added
(``zero_markov_variant``), which sglang's builtin DSPARK can load, so the dspark arm can be compared
with the builtin on the same weights; ``dflash-random``: the mask-fill drafter's config with freshly
initialised weights (``random_weights_variant``), a drafter that fits no offset of the target.

A *bundled* run names no draft: its drafter rides in the ``dspark/`` subfolder of a copy of the embedded
target (``bundled_target``), where sglang 0.5.23's DSPARK finds it (``launch_paths``).

Cases with ``min_sglang`` need a layout older sglang lacks (``cases_for``): the mask-fill DSPARK layout
exists from sglang 0.5.23 on; older versions refuse such drafters at argument time (tested there).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLUGIN = "DSPARK_HARVEST"
MAX_NEW_TOKENS = 64
CONCURRENT_REQUESTS = 8
ALARM_ENV = {"MEMRA_DSPARK_ALARM_WARMUP": "64", "MEMRA_DSPARK_ALARM_WINDOW": "64"}
"""A shorter alarm warm-up and window than the defaults (100 and 500 rounds): 8 prompts x 64 tokens raise
it under the wrong harvest (about 460 rounds near 1.1); under the matched harvest the hardest prompt
(about 40 rounds near 1.5) never fills a window on its own."""

MATCHED = {
    "dflash": "dflash",
    "dspark": "dspark",
    "dspark-zero-markov": "dspark",
    "dspark-markov": "dspark",
    "dspark-maskfill": "dflash",
    "dspark-maskfill-tensors-head": "dflash",
    "dflash-random": "dflash",  # the census reads its mask-fill config; its weights fit no harvest
    "dspark-as-dflash": "dspark",  # its config says mask-fill; its weights were trained shifted
}
"""The harvest each drafter was trained for (for ``dflash-random``: the one its config declares)."""
RANDOM = "dflash-random"
MISLABELLED = "dspark-as-dflash"
"""The shifted drafter's weights under a mask-fill config: served by builtin DFLASH, acceptance collapses
(the builtins' logs read by ``report``, tests/sglang/test_served.py)."""
"""The drafter with random weights: the probe must find no offset, and advise no override."""
MASK_FILL_DSPARK = "dspark-maskfill"
"""The mask-fill drafter with a DSpark architecture and a Markov head: DSPARK serves it with
``sample_from_anchor`` false, its gamma (b-1) given by ``--speculative-dspark-block-size``."""
MASK_FILL_TENSORS_HEAD = "dspark-maskfill-tensors-head"
"""The same drafter, its Markov head declared only by its ``markov_head.*`` tensors."""
MASK_FILL_DSPARK_SGLANG = "0.5.23"
"""The first sglang whose DSPARK has the mask-fill layout."""
BUNDLED_SUBFOLDER_SGLANG = "0.5.23"
"""The first sglang whose DSPARK finds a draft in the target's ``dspark/`` subfolder."""


@dataclass(frozen=True)
class Run:
    """One server configuration."""

    name: str
    algorithm: str
    drafter: str
    harvest: str | None = None  # MEMRA_DSPARK_HARVEST, None = the census decides
    concurrent: bool = False  # also serve all prompts at once (overlap scheduler on)
    extra_args: tuple[tuple[str, Any], ...] = ()  # further server arguments (name, value)
    bundled: bool = False  # no draft path: the drafter rides in the target's dspark/ subfolder
    queue_thread: bool = False  # MEMRA_DSPARK_QUEUE_THREAD=1: the queue's runs off the scheduler's thread

    @property
    def plugin(self) -> bool:
        return self.algorithm == PLUGIN

    @property
    def served_harvest(self) -> str:
        """The harvest this run serves: the forced one, the census's, or the builtin's own."""
        if self.harvest is not None:
            return self.harvest
        if self.algorithm == "DFLASH":
            return "dflash"
        if self.algorithm == "DSPARK":
            return "dflash" if self.drafter == MASK_FILL_DSPARK else "dspark"
        return MATCHED[self.drafter]

    @property
    def matched(self) -> bool:
        return self.served_harvest == MATCHED[self.drafter]

    def env(self) -> dict[str, str]:
        """Environment of the server processes."""
        if not self.plugin:
            return {}
        env = dict(ALARM_ENV)
        if self.harvest is not None:
            env["MEMRA_DSPARK_HARVEST"] = self.harvest
        if self.queue_thread:
            env["MEMRA_DSPARK_QUEUE_THREAD"] = "1"
        return env


NARROW_DFLASH = (("speculative_dflash_block_size", 4),)
"""DFLASH's block of 4 for the block-8 mask-fill drafter: 3 drafts from rows 1..3, window 4."""
NARROW_DSPARK = (("speculative_dspark_block_size", 4),)
"""DSPARK's gamma of 4 for the block-7 shifted drafter: 4 drafts from rows 0..3, window 5."""

RUNS: dict[str, Run] = {
    r.name: r
    for r in (
        Run("builtin-DFLASH/dflash", "DFLASH", "dflash"),
        Run("plugin/dflash", PLUGIN, "dflash", concurrent=True),
        Run("plugin/dflash-queue-thread", PLUGIN, "dflash", concurrent=True, queue_thread=True),
        Run("builtin-DSPARK/dspark-zero-markov", "DSPARK", "dspark-zero-markov"),
        Run("plugin/dspark-zero-markov", PLUGIN, "dspark-zero-markov"),
        Run("plugin/dspark", PLUGIN, "dspark", concurrent=True),
        Run("builtin-DSPARK/dspark-markov", "DSPARK", "dspark-markov"),
        Run("plugin/dspark-markov", PLUGIN, "dspark-markov"),
        # sglang reads a mask-fill DSpark config's block_size b as b drafts plus a query row; the
        # drafter was trained for b-1 drafts: the builtin needs its gamma flag, the plugin sets it
        Run(
            "builtin-DSPARK/dspark-maskfill",
            "DSPARK",
            MASK_FILL_DSPARK,
            extra_args=(("speculative_dspark_block_size", 7),),
        ),
        Run("plugin/dspark-maskfill", PLUGIN, MASK_FILL_DSPARK),
        Run("plugin/dspark-maskfill-tensors-head", PLUGIN, MASK_FILL_TENSORS_HEAD),
        # a narrower window than the drafter was trained for: the same aligned rows, fewer of them
        Run("builtin-DFLASH/dflash-block-4", "DFLASH", "dflash", extra_args=NARROW_DFLASH),
        Run("plugin/dflash-block-4", PLUGIN, "dflash", extra_args=NARROW_DFLASH),
        Run("builtin-DSPARK/dspark-markov-gamma-4", "DSPARK", "dspark-markov", extra_args=NARROW_DSPARK),
        Run("plugin/dspark-markov-gamma-4", PLUGIN, "dspark-markov", extra_args=NARROW_DSPARK),
        # no draft path: the shifted drafter in the target's dspark/ subfolder, found by DSPARK itself
        Run("builtin-DSPARK/bundled-dspark-markov", "DSPARK", "dspark-markov", bundled=True),
        Run("plugin/bundled-dspark-markov", PLUGIN, "dspark-markov", bundled=True),
        Run("plugin-forced-dspark/dflash", PLUGIN, "dflash", harvest="dspark"),
        Run("plugin-forced-dflash/dspark", PLUGIN, "dspark", harvest="dflash"),
        Run("plugin/dflash-random", PLUGIN, RANDOM),
        # no case: its log is what report reads of a builtin's collapse (test_served.py)
        Run("builtin-DFLASH/dspark-as-dflash", "DFLASH", MISLABELLED),
    )
}


@dataclass(frozen=True)
class Case:
    """A check over runs. ``kind``: identical | reference | collapse | concurrent | no-match."""

    name: str
    kind: str
    runs: tuple[str, ...]
    what: str = field(default="", compare=False)
    min_sglang: str | None = None  # the first sglang version the case applies to
    window: int | None = None  # the verify window the plugin's run must serve (and log) when narrowed


CASES: tuple[Case, ...] = (
    Case(
        "dflash-arm-is-builtin-DFLASH",
        "identical",
        ("builtin-DFLASH/dflash", "plugin/dflash"),
        "census -> dflash arm: the same tokens and per-request accept lengths as sglang's DFLASH",
    ),
    Case(
        "dspark-arm-is-builtin-DSPARK",
        "identical",
        ("builtin-DSPARK/dspark-zero-markov", "plugin/dspark-zero-markov"),
        "census -> dspark arm on a Markov-head drafter: the same tokens and accept lengths as DSPARK",
    ),
    Case(
        "dspark-arm-is-builtin-DSPARK-with-a-trained-Markov-head",
        "identical",
        ("builtin-DSPARK/dspark-markov", "plugin/dspark-markov"),
        "the SpecForge-shaped drafter (vanilla Markov head, confidence head, block 7): same as DSPARK",
    ),
    Case(
        "narrower-DFLASH-block-is-builtin-DFLASH",
        "identical",
        ("builtin-DFLASH/dflash-block-4", "plugin/dflash-block-4"),
        "--speculative-dflash-block-size 4 on the block-8 drafter: served narrower, as the builtin",
        window=4,
    ),
    Case(
        "narrower-DSPARK-gamma-is-builtin-DSPARK",
        "identical",
        ("builtin-DSPARK/dspark-markov-gamma-4", "plugin/dspark-markov-gamma-4"),
        "--speculative-dspark-block-size 4 on the block-7 shifted drafter: served narrower, as the builtin",
        window=5,
    ),
    Case(
        "mask-fill-DSpark-drafter-is-builtin-DSPARK-sample-from-anchor-false",
        "identical",
        ("builtin-DSPARK/dspark-maskfill", "plugin/dspark-maskfill"),
        "census -> dflash harvest on a DSpark drafter with a Markov head: served by DSPARK with "
        "sample_from_anchor=false (7 drafts, window 8), the same as the builtin with that gamma",
        min_sglang=MASK_FILL_DSPARK_SGLANG,
    ),
    Case(
        "mask-fill-DSpark-head-declared-by-tensors-only-is-builtin-DSPARK",
        "identical",
        ("builtin-DSPARK/dspark-maskfill", "plugin/dspark-maskfill-tensors-head"),
        "the same weights with no markov_rank in config.json and sample_from_anchor nested: the plan's "
        "head answers sglang's parse in every scheduler; the same rounds as the builtin",
        min_sglang=MASK_FILL_DSPARK_SGLANG,
    ),
    Case(
        "bundled-dspark-subfolder-is-builtin-DSPARK",
        "identical",
        ("builtin-DSPARK/bundled-dspark-markov", "plugin/bundled-dspark-markov"),
        "no --speculative-draft-model-path: the SpecForge-shaped shifted drafter in the target's dspark/ "
        "subfolder; the plan censuses the folder sglang's DSPARK finds there, the same rounds as DSPARK",
        min_sglang=BUNDLED_SUBFOLDER_SGLANG,
    ),
    Case(
        "mask-fill-DSpark-served-equals-reference",
        "reference",
        ("plugin/dspark-maskfill", "builtin-DSPARK/dspark-maskfill"),
        "the mask-fill DSpark drafter: tokens = reference engine = target greedy, the same accept "
        "lengths (rows 1..b-1 drafted with the Markov chain from the anchor)",
        min_sglang=MASK_FILL_DSPARK_SGLANG,
    ),
    Case(
        "served-equals-reference",
        "reference",
        (
            "plugin/dflash",
            "plugin/dflash-queue-thread",
            "plugin/dspark",
            "plugin/dspark-zero-markov",
            "builtin-DSPARK/dspark-zero-markov",
            "plugin/dspark-markov",
            "builtin-DSPARK/dspark-markov",
        ),
        "every drafter under its matched harvest: tokens = reference engine = target greedy; the "
        "per-request accept lengths equal the reference engine's (the zero-head route included, and the "
        "queue's runs on a thread of their own: every round's line, in order)",
    ),
    Case(
        "forced-harvest-collapse",
        "collapse",
        ("plugin/dflash", "plugin-forced-dspark/dflash", "plugin/dspark", "plugin-forced-dflash/dspark"),
        "both drafters under the census's harvest and under the other one forced: matched >= 2x "
        "mismatched, all lossless; the alarm fires in the mismatched runs only",
    ),
    Case(
        "random-weights-match-no-offset",
        "no-match",
        ("plugin/dflash-random",),
        "a drafter with random weights, the census deciding: lossless, the alarm raised, the live probe "
        "says no offset matches and no ALARM or probe line advises a harvest override",
    ),
    Case(
        "concurrent-requests",
        "concurrent",
        ("plugin/dflash", "plugin/dspark", "plugin/dflash-queue-thread"),
        f"{CONCURRENT_REQUESTS} requests at once, overlap scheduler on: lossless, per-round batch sizes "
        "consistent with the requests served",
    ),
)


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def cases_for(sglang_version: str, cases: tuple[Case, ...] = CASES) -> tuple[Case, ...]:
    """The cases that apply to this sglang version."""
    return tuple(
        c for c in cases if c.min_sglang is None or _version(sglang_version) >= _version(c.min_sglang)
    )


def runs_of(cases: tuple[Case, ...] = CASES) -> list[Run]:
    """Every run the cases need, each once, in definition order."""
    wanted = {name for case in cases for name in case.runs}
    return [run for name, run in RUNS.items() if name in wanted]


def zero_markov_variant(shifted_drafter: Path, out: Path) -> Path:
    """Copy a no-Markov shifted drafter and give it a zero rank-1 vanilla Markov head.

    sglang's DSPARK then loads it (it requires ``markov_rank > 0``) and drafts exactly as the drafter
    without a head: the vanilla bias is ``markov_w2(markov_w1[prev])``, 0 when both weights are 0.
    """
    import torch
    from safetensors.torch import load_file, save_file

    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((shifted_drafter / "config.json").read_text())
    cfg["markov_rank"] = 1
    cfg["markov_head_type"] = "vanilla"
    if isinstance(cfg.get("dflash_config"), dict) and "markov_rank" in cfg["dflash_config"]:
        cfg["dflash_config"]["markov_rank"] = 1
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    weights = load_file(str(shifted_drafter / "model.safetensors"))
    vocab = int(cfg["vocab_size"])
    dtype = next(iter(weights.values())).dtype
    weights["markov_head.markov_w1.weight"] = torch.zeros(vocab, 1, dtype=dtype)
    weights["markov_head.markov_w2.weight"] = torch.zeros(vocab, 1, dtype=dtype)
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def tensors_head_variant(mask_fill_drafter: Path, out: Path) -> Path:
    """Copy the mask-fill DSpark drafter with every Markov-rank and head-type key removed from its
    config.json (its ``markov_head.*`` tensors alone declare the head) and ``sample_from_anchor``
    moved into ``dflash_config``: the same weights, in spellings only the census reads."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((mask_fill_drafter / "config.json").read_text())
    markov_keys = ("markov_rank", "markov_head_type")
    nested = {k: v for k, v in cfg.get("dflash_config", {}).items() if k not in markov_keys}
    nested["sample_from_anchor"] = cfg.pop("sample_from_anchor")
    cfg = {k: v for k, v in cfg.items() if k not in markov_keys}
    cfg["dflash_config"] = nested
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    shutil.copyfile(mask_fill_drafter / "model.safetensors", out / "model.safetensors")
    return out


def mislabelled_variant(shifted_drafter: Path, mask_fill_drafter: Path, out: Path) -> Path:
    """The shifted drafter's weights under the mask-fill drafter's config.json (same tensor names and
    shapes): a DSpark-trained checkpoint exported with a DFlash config, the postmortem's case. sglang's
    builtin DFLASH loads it and harvests rows 1..b-1 from a drafter trained on rows 0..b-1."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(mask_fill_drafter / "config.json", out / "config.json")
    shutil.copyfile(shifted_drafter / "model.safetensors", out / "model.safetensors")
    return out


def random_weights_variant(drafter: Path, out: Path, seed: int = 0) -> Path:
    """Copy ``drafter``'s config.json with freshly initialised weights of the same names and shapes
    (the reference engine's own initialisation, seeded): a checkpoint the census reads as ``drafter``,
    whose drafts fit no offset of the target."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from sglang_dspark_plugin.engine import new_draft_model

    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(drafter / "config.json", out / "config.json")
    trained = load_file(str(drafter / "model.safetensors"))
    model = new_draft_model(json.loads((drafter / "config.json").read_text()), seed=seed)
    state = {k: v.detach().to(trained[k].dtype).contiguous() for k, v in model.state_dict().items()}
    if {k: tuple(v.shape) for k, v in state.items()} != {k: tuple(v.shape) for k, v in trained.items()}:
        raise ValueError(f"{drafter}: the reference engine's drafter does not have the checkpoint's tensors")
    if all(torch.equal(state[k], trained[k]) for k in state):
        raise ValueError(f"{drafter}: the fresh weights equal the trained ones")
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def bundled_target(target: Path, drafter: Path, out: Path) -> Path:
    """A copy of ``target`` with ``drafter`` in its ``dspark/`` subfolder (a draft bundled in the target)."""
    import shutil

    out.mkdir(parents=True, exist_ok=True)
    for f in target.iterdir():
        shutil.copyfile(f, out / f.name)
    shutil.copytree(drafter, out / "dspark", dirs_exist_ok=True)
    return out


def bundled_key(drafter: str) -> str:
    """The ``drafter_folders`` key of the target that bundles ``drafter``."""
    return f"target-bundling-{drafter}"


def launch_paths(run: Run, target: Path, folders: dict[str, Path]) -> tuple[Path, Path | None]:
    """A run's ``--model-path`` and ``--speculative-draft-model-path`` (``None``: bundled, none passed)."""
    if run.bundled:
        return folders[bundled_key(run.drafter)], None
    return target, folders[run.drafter]


def drafter_folders(embedded_root: Path, workdir: Path) -> dict[str, Path]:
    """Every drafter key -> a folder (the variants are written under ``workdir``), and the targets the
    bundled runs serve (``bundled_key``)."""
    embedded = ("dflash", "dspark", "dspark-markov", MASK_FILL_DSPARK)
    folders = {key: embedded_root / f"drafter-{key}" for key in embedded}
    folders["dspark-zero-markov"] = zero_markov_variant(
        folders["dspark"], workdir / "drafter-dspark-zero-markov"
    )
    folders[MASK_FILL_TENSORS_HEAD] = tensors_head_variant(
        folders[MASK_FILL_DSPARK], workdir / f"drafter-{MASK_FILL_TENSORS_HEAD}"
    )
    folders[RANDOM] = random_weights_variant(folders["dflash"], workdir / f"drafter-{RANDOM}")
    folders[MISLABELLED] = mislabelled_variant(
        folders["dspark"], folders["dflash"], workdir / f"drafter-{MISLABELLED}"
    )
    for drafter in sorted({run.drafter for run in RUNS.values() if run.bundled}):
        key = bundled_key(drafter)
        folders[key] = bundled_target(embedded_root / "target", folders[drafter], workdir / key)
    return folders


# ---------------------------------------------------------------- what a run produced, and the checks

ROUND_LINE = re.compile(r"dspark accept round=(\d+) bs=(\d+) accept_len=\[([0-9,]*)\]")
ALARM_LINE = "dspark accept ALARM"
PROBE_LINE = re.compile(
    r"dspark probe: (matched|drafts one position (?:late|early)[^\n]*?set (MEMRA_DSPARK_HARVEST=\w+))"
)
"""The live probe's verdict line: matched, or the measured misalignment and the override that fixes it."""
STARTUP_LINE = re.compile(r"DSPARK_HARVEST: harvest=(dflash|dspark)")


@dataclass
class Outcome:
    """What one run produced: the one-at-a-time requests, the concurrent batch, and the server log."""

    outputs: list[list[int]]  # output token ids, one request at a time, in prompt order
    metas: list[dict[str, Any]]  # their sglang meta_info
    log: str
    concurrent_outputs: list[list[int]] = field(default_factory=list)
    concurrent_metas: list[dict[str, Any]] = field(default_factory=list)
    server_info_accept_length: float | None = None  # /get_server_info's avg_spec_accept_length

    def round_lines(self) -> list[tuple[int, list[int]]]:
        """The plugin's per-round accept lines, in order: (batch size, accept lengths)."""
        return [
            (int(m.group(2)), [int(x) for x in m.group(3).split(",") if x])
            for m in ROUND_LINE.finditer(self.log)
        ]

    def verify_counts(self) -> list[int]:
        """Verify rounds per one-at-a-time request (sglang's ``spec_verify_ct``)."""
        return [int(m["spec_verify_ct"]) for m in self.metas]

    def meta_accept_lengths(self) -> list[float]:
        """sglang's per-request figure: ``completion_tokens / spec_verify_ct``."""
        return [float(m["spec_accept_length"]) for m in self.metas]

    def per_request_rounds(self) -> list[list[int]]:
        """The plugin's per-round accept lengths of each one-at-a-time request (those rounds are bs=1)."""
        counts = self.verify_counts()
        lines = self.round_lines()[: sum(counts)]
        if any(bs != 1 for bs, _ in lines):
            return []
        flat = [values[0] for _, values in lines]
        out, start = [], 0
        for n in counts:
            out.append(flat[start : start + n])
            start += n
        return out

    def pooled_accept_length(self) -> float:
        """The headline figure over every logged round: committed tokens per verify round, uncapped."""
        values = [v for _, vs in self.round_lines() for v in vs]
        return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class Check:
    """One verdict of a case."""

    name: str
    ok: bool
    detail: str = ""


def _first_difference(a: list[list[int]], b: list[list[int]]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            j = next((k for k, (u, v) in enumerate(zip(x, y, strict=False)) if u != v), min(len(x), len(y)))
            return f"request {i} differs first at token {j}"
    return "" if len(a) == len(b) else f"{len(a)} vs {len(b)} requests"


WINDOW_LINE = re.compile(r"DSPARK_HARVEST: harvest=.*? verify window=(\d+)")


def check_identical(
    builtin: Outcome, plugin: Outcome, greedy: list[list[int]], window: int | None = None
) -> list[Check]:
    """The plugin's arm serves exactly as the builtin: tokens, verify counts, sglang's accept lengths;
    its startup line names the served window (``window`` where the case narrows it) and its logged
    accept lengths stay within it (the telemetry counts with the served gamma)."""
    found = WINDOW_LINE.search(plugin.log)
    served = int(found.group(1)) if found else 0
    max_accept = served
    return [
        Check(
            "the plugin's startup line names the served window",
            bool(found) and (window is None or served == window),
            f"logged {served}, expected {window}",
        ),
        Check(
            "tokens equal the builtin's",
            plugin.outputs == builtin.outputs,
            _first_difference(plugin.outputs, builtin.outputs),
        ),
        Check(
            "tokens equal the target's greedy",
            plugin.outputs == greedy,
            _first_difference(plugin.outputs, greedy),
        ),
        Check(
            "verify rounds per request equal the builtin's",
            plugin.verify_counts() == builtin.verify_counts(),
            f"{plugin.verify_counts()} vs {builtin.verify_counts()}",
        ),
        Check(
            "meta_info accept lengths equal the builtin's",
            plugin.meta_accept_lengths() == builtin.meta_accept_lengths(),
            f"{plugin.meta_accept_lengths()} vs {builtin.meta_accept_lengths()}",
        ),
        Check("the plugin logs every round", bool(plugin.round_lines())),
        Check(
            "the plugin's accept lengths fit the served window",
            all(1 <= v <= max_accept for _, values in plugin.round_lines() for v in values),
            f"at most {max_accept} per round",
        ),
        Check("the builtin has no plugin telemetry", not builtin.round_lines()),
    ]


def check_reference(
    run: Run, got: Outcome, ref_tokens: list[list[int]], ref_rounds: list[list[int]], greedy: list[list[int]]
) -> list[Check]:
    """Served = reference engine: tokens, and accept lengths per request computed the same way.

    ``ref_rounds`` holds the reference engine's per-round accept lengths (accepted + 1, uncapped) of
    each request; sglang's ``meta_info`` figure of a request is its tokens over its verify rounds.
    """
    ref_meta = [len(t) / len(r) for t, r in zip(ref_tokens, ref_rounds, strict=True)]
    checks = [
        Check(
            "tokens equal the reference engine's",
            got.outputs == ref_tokens,
            _first_difference(got.outputs, ref_tokens),
        ),
        Check(
            "tokens equal the target's greedy", got.outputs == greedy, _first_difference(got.outputs, greedy)
        ),
        Check(
            "verify rounds per request equal the reference engine's",
            got.verify_counts() == [len(r) for r in ref_rounds],
            f"served {got.verify_counts()} vs reference {[len(r) for r in ref_rounds]}",
        ),
        Check(
            "meta_info accept lengths equal the reference engine's (tokens / rounds)",
            all(abs(a - b) < 1e-9 for a, b in zip(got.meta_accept_lengths(), ref_meta, strict=True)),
            f"served {got.meta_accept_lengths()} vs reference {ref_meta}",
        ),
    ]
    if run.plugin:
        served_rounds = got.per_request_rounds()
        checks.append(
            Check(
                "per-round accept lengths (plugin log) equal the reference engine's",
                served_rounds == ref_rounds,
                _first_difference(served_rounds, ref_rounds),
            )
        )
    return checks


def _probe_check(name: str, matched: bool, log: str, trained: str) -> Check:
    """The live probe measured what the run is: matched, or one position off with the override that
    names the drafter's own training (its measured verdict, not a guess)."""
    found = PROBE_LINE.search(log)
    said = "no verdict line" if found is None else found.group(0)[:200]
    if matched:
        return Check(f"{name}: probe says matched", found is not None and found.group(1) == "matched", said)
    want = f"MEMRA_DSPARK_HARVEST={trained}"
    return Check(f"{name}: probe names {want}", found is not None and found.group(2) == want, said)


def check_collapse(outcomes: dict[str, Outcome], greedy: list[list[int]]) -> list[Check]:
    """Both drafters under the census's harvest and the other one forced: lossless, matched >= 2x
    mismatched, alarm iff mismatched."""
    checks = []
    for name, got in outcomes.items():
        run = RUNS[name]
        alarm = ALARM_LINE in got.log
        checks += [
            Check(f"{name}: lossless", got.outputs == greedy, _first_difference(got.outputs, greedy)),
            Check(
                f"{name}: alarm {'absent' if run.matched else 'raised'}",
                alarm is (not run.matched),
                f"pooled accept length {got.pooled_accept_length():.2f}",
            ),
            _probe_check(name, run.matched, got.log, "dspark" if name.endswith("/dspark") else "dflash"),
            Check(
                f"{name}: startup line and manifest logged",
                bool(STARTUP_LINE.search(got.log)) and "geometry manifest" in got.log,
            ),
        ]
    for drafter in ("dflash", "dspark"):
        other = "dspark" if drafter == "dflash" else "dflash"
        ok = outcomes[f"plugin/{drafter}"].pooled_accept_length()
        bad = outcomes[f"plugin-forced-{other}/{drafter}"].pooled_accept_length()
        checks.append(
            Check(f"{drafter} drafter: matched >= 2x mismatched", ok >= 2.0 * bad, f"{ok:.2f} vs {bad:.2f}")
        )
    return checks


PROBE_VERDICT = re.compile(r"dspark probe: [^\n]*")
OVERRIDE = re.compile(r"MEMRA_DSPARK_HARVEST=\w+")


def check_no_match(got: Outcome, greedy: list[list[int]]) -> list[Check]:
    """A drafter that fits nothing: lossless, the alarm raised, the probe's verdict "no offset matches",
    and no line of the probe or the ALARM tells the user to flip the harvest."""
    verdicts = PROBE_VERDICT.findall(got.log)
    alarms = [line for line in got.log.splitlines() if ALARM_LINE in line]
    advised = sorted({o for line in [*verdicts, *alarms] for o in OVERRIDE.findall(line)})
    return [
        Check("random weights: lossless", got.outputs == greedy, _first_difference(got.outputs, greedy)),
        Check(
            "random weights: alarm raised",
            bool(alarms),
            f"pooled accept length {got.pooled_accept_length():.2f}",
        ),
        Check(
            "random weights: the probe says no offset matches",
            len(verdicts) == 1 and "no offset matches" in verdicts[0] and "not the cause" in verdicts[0],
            verdicts[0][:200] if verdicts else "no verdict line",
        ),
        Check("random weights: no harvest override advised", not advised, ", ".join(advised)),
    ]


def check_concurrent(got: Outcome, greedy: list[list[int]]) -> list[Check]:
    """All requests at once: lossless, and the per-round telemetry covers exactly the verify rounds."""
    n_seq = sum(got.verify_counts())
    tail = got.round_lines()[n_seq:]
    sizes = [bs for bs, _ in tail]
    verify_rounds = sum(int(m["spec_verify_ct"]) for m in got.concurrent_metas)
    return [
        Check("concurrent: lossless", got.concurrent_outputs == greedy[: len(got.concurrent_outputs)]),
        Check(
            "concurrent: requests were batched",
            bool(sizes) and max(sizes) > 1,
            f"batch sizes {sorted(set(sizes))}",
        ),
        Check(
            "concurrent: batch sizes within the requests sent",
            bool(sizes) and max(sizes) <= len(got.concurrent_outputs),
        ),
        Check("concurrent: one accept length per request per round", all(len(v) == bs for bs, v in tail)),
        Check(
            "concurrent: request-rounds logged = sglang's verify rounds",
            sum(sizes) == verify_rounds,
            f"{sum(sizes)} vs {verify_rounds}",
        ),
    ]
