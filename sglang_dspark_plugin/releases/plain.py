"""What plain sglang serves from a draft's config.json, per release and builtin (sglang-free).

A launch of sglang's own DFLASH or DSPARK (no plugin) reads the draft's config.json itself. This module
reads it as each release of the release table (``releases``) does, and sets the result beside what the
draft was trained for (the census's harvest and block): whether the builtin starts, with which
harvest, how many drafts per round and which verify window, and where the two differ, the flags or
keys that make the builtin serve what was trained, or that nothing does. ``declare`` prints it for the
source and for the declared copy; ``tests/sglang/test_declare_served.py`` proves each row of the
installed release with plain sglang launches on the CPU harness.

sglang's reading (0.5.17 and 0.5.23 file:line; the releases between checked in their wheels):

* DFLASH: the draft class must be one of the release's DFlash classes; the block b is
  ``--speculative-dflash-block-size``, else ``dflash_config.block_size``, else the top-level
  ``block_size``, else 16 (``speculative/dflash_utils.py`` ``parse_dflash_draft_config``; 0.5.17
  ``arg_groups/speculative_hook.py:196-244``); always mask-fill: b-1 drafts, verify window b.
* DSPARK: the draft class must be one of the release's DSpark classes; gamma is
  ``--speculative-dspark-block-size``, else the top-level ``dspark_block_size``, else the DFlash block
  above, else 7 (``dspark_config.py`` ``parse_dspark_draft_config``; 0.5.23
  ``arg_groups/speculative_hook.py:806-839``); the Markov head's rank is read in
  ``census.markov.HEAD_KEY_SPELLINGS`` order, ``dflash_config`` only where the release merges it
  (``Release.dspark_head_in_dflash_config``), and a rank of 0 is refused at load ("DSPARK requires
  markov_rank > 0", 0.5.17 ``model_executor/model_runner_components/spec_aux_hidden_state.py:155-159``,
  0.5.23 ``:268-272``); a rank needs a head type beside it (``dspark_config.py``). Anchor-first (gamma
  drafts from rows 0..gamma-1, window gamma+1), or, where the release reads the top-level
  ``sample_from_anchor`` (``Release.mask_fill_dspark``) and it is false, mask-fill: gamma drafts from
  rows 1..gamma of a gamma+1-row block, window gamma+1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..census.markov import HEAD_KEY_SPELLINGS, HEAD_TYPES
from ..harvest import DsparkHarvest
from . import DFLASH, DSPARK, RELEASES, Release

SHIFTED, MASK_FILL = "shifted", "mask-fill"
LAYOUT_OF_HARVEST = {DsparkHarvest.DSPARK: SHIFTED, DsparkHarvest.DFLASH: MASK_FILL}
HARVEST_OF_LAYOUT = {SHIFTED: "dspark", MASK_FILL: "dflash"}
DEFAULT_DFLASH_BLOCK = 16
DEFAULT_DSPARK_GAMMA = 7
DFLASH_FLAG, DSPARK_FLAG = "--speculative-dflash-block-size", "--speculative-dspark-block-size"
PREFIXED = ("dspark_block_size", "dspark_markov_rank", "dspark_noise_token_id", "dspark_target_layer_ids")
"""The top-level keys whose presence lets sglang's DSpark parse take a rank without a head type."""
NO_HEAD_TYPE = "DSpark requires markov_head_type"
NO_HEAD = "DSPARK requires markov_rank > 0"
"""sglang's own refusal of a draft without a Markov head (both releases' wording)."""


@dataclass(frozen=True)
class Trained:
    """What a draft was trained for: the census's harvest and block, as the plugin serves it."""

    harvest: DsparkHarvest
    block_size: int

    @property
    def layout(self) -> str:
        return LAYOUT_OF_HARVEST[self.harvest]

    @property
    def drafts(self) -> int:
        return self.harvest.n_drafts(self.block_size)


@dataclass(frozen=True)
class PlainServe:
    """What one builtin of one release serves from a config: it starts with a layout and gamma, or
    refuses (``refusal``: sglang's reason; ``head_keys``: where a head the release does not read sits)."""

    builtin: str
    version: str
    layout: str | None = None
    drafts: int | None = None
    refusal: str | None = None
    head_keys: str | None = None

    @property
    def starts(self) -> bool:
        return self.refusal is None

    @property
    def window(self) -> int | None:
        return None if self.drafts is None else self.drafts + 1

    def describe(self) -> str:
        """``mask-fill, 7 drafts, window 8`` or ``refused: ...``."""
        if not self.starts:
            return f"refused: {self.refusal}"
        return f"{self.layout}, {self.drafts} drafts, window {self.window}"

    def right(self, trained: Trained) -> bool:
        return self.starts and (self.layout, self.drafts) == (trained.layout, trained.drafts)

    def reading(self) -> tuple[Any, ...]:
        """Everything but the release: equal readings of adjacent releases share a row."""
        return self.builtin, self.layout, self.drafts, self.refusal, self.head_keys


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dflash_block(config: Mapping[str, Any]) -> int | None:
    nested = config.get("dflash_config")
    nested_block = _int(nested.get("block_size")) if isinstance(nested, Mapping) else None
    return nested_block if nested_block is not None else _int(config.get("block_size"))


def _head_key(config: Mapping[str, Any], key: str, release: Release) -> tuple[str, Any] | None:
    """The first ``key`` spelling the release's DSpark parse reads, ``(dotted key, value)``."""
    for section, pattern in HEAD_KEY_SPELLINGS:
        if section == ("dflash_config",) and not release.dspark_head_in_dflash_config:
            continue
        table = config.get(section[0]) if section else config
        name = pattern.format(key=key)
        if isinstance(table, Mapping) and table.get(name) is not None:
            return ".".join((*section, name)), table[name]
    return None


def _unread_head(config: Mapping[str, Any]) -> str | None:
    """Where a head sits that a release without the ``dflash_config`` merge does not read."""
    nested = config.get("dflash_config")
    if isinstance(nested, Mapping) and (_int(nested.get("markov_rank")) or 0) > 0:
        return "dflash_config.markov_rank"
    return None


def _architecture(config: Mapping[str, Any]) -> str | None:
    names = config.get("architectures")
    return str(names[0]) if isinstance(names, list) and names else None


def plain_serve(config: Mapping[str, Any], release: Release, builtin: str) -> PlainServe:
    """What ``release``'s own ``builtin`` serves from ``config`` (no flags given)."""
    version, arch = release.version, _architecture(config)
    if arch is None:
        return PlainServe(builtin, version, refusal="config.json names no architecture")
    if arch not in release.builds[builtin]:
        return PlainServe(builtin, version, refusal=f"sglang {version}'s {builtin} registers no {arch} class")
    block = _dflash_block(config)
    if builtin == DFLASH:
        b = block if block is not None else DEFAULT_DFLASH_BLOCK
        return PlainServe(builtin, version, MASK_FILL, b - 1)
    rank_key = _head_key(config, "markov_rank", release)
    rank = _int(rank_key[1]) if rank_key is not None else 0
    if not rank:
        unread = None if release.dspark_head_in_dflash_config else _unread_head(config)
        why = f"{NO_HEAD} ({f'{unread} is not read' if unread else 'no Markov head'})"
        return PlainServe(builtin, version, refusal=why, head_keys=unread)
    head_type = _head_key(config, "markov_head_type", release)
    if head_type is None and not any(config.get(k) is not None for k in PREFIXED):
        return PlainServe(builtin, version, refusal=f"{NO_HEAD_TYPE} when markov_rank > 0")
    if head_type is not None and str(head_type[1]).lower() not in HEAD_TYPES:
        return PlainServe(builtin, version, refusal=f"Unsupported DSpark markov_head_type={head_type[1]!r}")
    prefixed = _int(config.get("dspark_block_size"))
    gamma = prefixed if prefixed is not None else block if block is not None else DEFAULT_DSPARK_GAMMA
    anchor_first = not release.mask_fill_dspark or bool(config.get("sample_from_anchor", True))
    return PlainServe(builtin, version, SHIFTED if anchor_first else MASK_FILL, gamma)


def _first(feature: str) -> str:
    return next(r.version for r in RELEASES if getattr(r, feature))


def fix(serve: PlainServe, trained: Trained, config: Mapping[str, Any]) -> str:
    """What makes ``serve`` serve what was trained: the flags or keys, or why nothing does (``right``
    where it already does)."""
    if serve.right(trained):
        return "right"
    if not serve.starts:
        if serve.head_keys is not None:
            rank = config["dflash_config"]["markov_rank"]
            head_type = config["dflash_config"].get("markov_head_type", "vanilla")
            return f'keys: "markov_rank": {rank}, "markov_head_type": "{head_type}" at the top level'
        if serve.refusal is not None and serve.refusal.startswith(NO_HEAD_TYPE):
            return f'key: "markov_head_type": {" | ".join(HEAD_TYPES)} (the head it was trained with)'
        return "nothing in plain sglang; serve it with DSPARK_HARVEST"
    steps = []
    if serve.layout != trained.layout:
        if serve.builtin == DFLASH:
            return "nothing: DFLASH drafts mask-fill only; serve it with DSPARK_HARVEST"
        release = next(r for r in RELEASES if r.version == serve.version)
        if not release.mask_fill_dspark:
            first = _first("mask_fill_dspark")
            return (
                f"nothing: DSPARK drafts mask-fill from sglang {first} on; serve it with DSPARK_HARVEST there"
            )
        anchor = "true" if trained.layout == SHIFTED else "false"
        steps.append(f'key: "sample_from_anchor": {anchor} at the top level')
    if serve.drafts != trained.drafts:
        flag, width = (
            (DSPARK_FLAG, trained.drafts) if serve.builtin == DSPARK else (DFLASH_FLAG, trained.drafts + 1)
        )
        steps.append(f"flag: {flag} {width}")
    return "; ".join(steps)


@dataclass(frozen=True)
class PlainRow:
    """One row of the table: a builtin over adjacent releases that read the config alike."""

    builtin: str
    versions: tuple[str, ...]
    serves: PlainServe
    before: PlainServe | None
    fix: str

    @property
    def engine(self) -> str:
        span = self.versions[0] if len(self.versions) == 1 else f"{self.versions[0]}-{self.versions[-1]}"
        return f"sglang {span} {self.builtin}"

    def to_json(self, trained: Trained) -> dict[str, Any]:
        s = self.serves
        return {
            "engine": self.engine,
            "builtin": self.builtin,
            "versions": list(self.versions),
            "starts": s.starts,
            "refusal": s.refusal,
            "harvest": None if s.layout is None else HARVEST_OF_LAYOUT[s.layout],
            "layout": s.layout,
            "drafts": s.drafts,
            "verify_window": s.window,
            "serves": s.describe(),
            "before": None if self.before is None else self.before.describe(),
            "right": s.right(trained),
            "fix": self.fix,
        }


def plain_table(
    config: Mapping[str, Any], trained: Trained, source: Mapping[str, Any] | None = None
) -> list[PlainRow]:
    """Each builtin whose classes hold the draft's architecture in some release (both, for a class none
    holds), over every release of the table, adjacent releases with equal readings (of ``config`` and
    of the ``source`` config) in one row."""
    arch = _architecture(config)
    builtins = [b for b in (DFLASH, DSPARK) if any(arch in r.builds[b] for r in RELEASES)] or [DFLASH, DSPARK]
    rows: list[PlainRow] = []
    for builtin in builtins:
        for release in RELEASES:
            serves = plain_serve(config, release, builtin)
            before = None if source is None else plain_serve(source, release, builtin)
            key = (serves.reading(), None if before is None else before.reading())
            last = rows[-1] if rows else None
            if (
                last is not None
                and last.builtin == builtin
                and key
                == (
                    last.serves.reading(),
                    None if last.before is None else last.before.reading(),
                )
            ):
                rows[-1] = PlainRow(
                    builtin, (*last.versions, release.version), last.serves, last.before, last.fix
                )
                continue
            rows.append(PlainRow(builtin, (release.version,), serves, before, fix(serves, trained, config)))
    return rows


def _flag(config: Mapping[str, Any]) -> bool:
    """``sample_from_anchor`` / ``query_zero_predicts_next``, top level or nested (absent: false)."""
    for table in (config, config.get("dflash_config")):
        if isinstance(table, Mapping):
            for key in ("sample_from_anchor", "query_zero_predicts_next"):
                if isinstance(table.get(key), bool):
                    return bool(table[key])
    return False


OPEN_PRS: tuple[tuple[str, str, bool], ...] = (
    ("sglang DFLASH + PR 40203 (open)", "github.com/sgl-project/sglang/pull/40203", False),
    ("sglang DFLASH + PR 40181 (open)", "github.com/sgl-project/sglang/pull/40181", True),
)
"""The open sglang PRs that teach DFLASH the key: ``(engine, where, refuses true)``; 40203 serves
anchor-first on a true flag, 40181 refuses it. Read from the PRs (their gamma is not served here)."""


def open_pr_rows(
    config: Mapping[str, Any], trained: Trained, source: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The open PRs' rows, for a DFlash-class draft: the layout each reads (no gamma: not served here)."""
    if _architecture(config) not in {a for r in RELEASES for a in r.dflash_classes}:
        return []
    rows = []
    for engine, where, refuses in OPEN_PRS:

        def layout(c: Mapping[str, Any], refuses: bool = refuses) -> str | None:
            return None if refuses and _flag(c) else SHIFTED if _flag(c) else MASK_FILL

        after, before = layout(config), layout(source)
        rows.append(
            {
                "engine": engine,
                "builtin": DFLASH,
                "versions": [],
                "starts": after is not None,
                "refusal": None if after is not None else "refuses sample_from_anchor = true",
                "harvest": None if after is None else HARVEST_OF_LAYOUT[after],
                "layout": after,
                "drafts": None,
                "verify_window": None,
                "serves": after or "refused",
                "before": before or "refused",
                "right": after == trained.layout,
                "fix": f"an open PR, its layout only: {where}",
            }
        )
    return rows


def engine_table(
    config: Mapping[str, Any], trained: Trained, source: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``declare``'s table: every release's builtins (``plain_table``), then the open PRs' rows."""
    rows = [row.to_json(trained) for row in plain_table(config, trained, source)]
    return rows + open_pr_rows(config, trained, source)


__all__ = [
    "engine_table",
    "open_pr_rows",
    "DFLASH_FLAG",
    "DSPARK_FLAG",
    "MASK_FILL",
    "NO_HEAD",
    "PlainRow",
    "PlainServe",
    "SHIFTED",
    "Trained",
    "fix",
    "plain_serve",
    "plain_table",
]
