"""The census rules: each reads one kind of signal and returns it; none keeps state.

Tier 1 (``TIER_EXPLICIT``): explicit declarations, the flags below and a training state's strategy.
Tier 2 (``TIER_STRUCTURAL``): structural defaults, the architecture, ``speculators_model_type``,
sglang's bundled ``dspark_*`` keys, ``projector_type`` and Markov head tensors. Domino drafters and
names outside the DFlash family are refused here. (The Markov rank and the declared draft count are
read with the geometry fields, in ``fields``.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..errors import UnsupportedCheckpointError
from ..util.reprs import jsonable, short
from .architectures import (
    DFLASH_ARCHITECTURES,
    DOMINO_ARCHITECTURES,
    DSPARK_ARCHITECTURES,
    FAMILY_DFLASH,
    FAMILY_DSPARK,
    family_of,
)
from .dialects import torchspec_architecture_signal
from .draft_config import TIER_EXPLICIT, TIER_INFO, TIER_STRUCTURAL, VOTE_DFLASH, VOTE_DSPARK, Signal
from .families import family_signal
from .training_state import MISSING, TRAINING_STATE
from .view import ConfigView

DSPARK_PROJECTORS = frozenset({"dspark", "dspark_v4"})
SPECULATORS_TYPES = {"dflash": VOTE_DFLASH, "dflash2": VOTE_DFLASH, "dspark": VOTE_DSPARK}
STRATEGY_VOTES = {"dflash": VOTE_DFLASH, "dspark": VOTE_DSPARK}
# sglang reads these on a TARGET config that bundles its DSpark draft head.
SGLANG_BUNDLE_KEYS = (
    "dspark_block_size",
    "dspark_noise_token_id",
    "dspark_target_layer_ids",
    "dspark_markov_rank",
)

MARKOV_PREFIXES = ("markov_head.", "logit_head.markov_head.")
DOMINO_PREFIXES = ("prefix_gru.", "embed_proj.", "logit_head.prefix_gru.", "logit_head.embed_proj.")
INFO_PREFIXES = ("candidate_selector.", "confidence_head.", "logit_head.confidence_head.")

DOMINO_MESSAGE = (
    "Domino drafters use a third geometry (a GRU prefix conditions each row, and shift_label picks "
    "rows 0..b-2 or 1..b-1), which this plugin does not serve; use sglang's own DFLASH/Domino "
    "path for this checkpoint."
)

# -- tier 1: explicit declarations ------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    """A boolean declaration of the training strategy, and the vote its ``true`` casts."""

    key: str
    on_true: str
    meaning: str


FLAGS = (
    Flag("sample_from_anchor", VOTE_DSPARK, "True = anchor-first (shifted)"),
    Flag("query_zero_predicts_next", VOTE_DSPARK, "True = row 0 predicts the next token"),
    Flag("dspark_bonus_anchor", VOTE_DFLASH, "True = the 1+N bonus-anchor layout"),
)
FLAG_SECTIONS = (
    (),
    ("dflash_config",),
    ("dspark_config",),
    ("speculative_config",),
    ("speculative_config", "dflash_config"),
    ("speculators_config",),
)
"""Where a flag may sit: the top level and every nested config that carries one."""


def flag_signals(view: ConfigView) -> list[Signal]:
    """Every ``FLAGS`` key in every ``FLAG_SECTIONS`` section, in that order."""
    return [
        _flag_signal(view, flag, key, value)
        for flag in FLAGS
        for key, value in view.lookups(flag.key, FLAG_SECTIONS)
    ]


def _flag_signal(view: ConfigView, flag: Flag, key: str, value: Any) -> Signal:
    if value is None:
        return view.signal(key, None, TIER_INFO, None, "null: no vote")
    if not isinstance(value, bool):
        raise view.invalid(
            key, value, f"it must be true or false ({flag.meaning})", f"set {key} to a boolean."
        )
    other = VOTE_DFLASH if flag.on_true == VOTE_DSPARK else VOTE_DSPARK
    vote = flag.on_true if value else other
    layout = "anchor-first, shifted" if vote == VOTE_DSPARK else "1+N fill-in, mask-fill"
    return view.signal(key, value, TIER_EXPLICIT, vote, f"{str(value).lower()}: {layout}")


def training_state_signals(folder: str, strategy: Any) -> list[Signal]:
    """The objective a training state says was trained; ``strategy`` is ``None`` without a state."""
    if strategy is None:
        return []
    where = os.path.join(folder, TRAINING_STATE)
    signal = f"{TRAINING_STATE}:strategy"
    if strategy is MISSING:
        return [Signal(signal, None, TIER_INFO, None, "no strategy field: no vote")]
    if strategy == "domino":
        raise UnsupportedCheckpointError(
            f"{where}: strategy = 'domino'. {DOMINO_MESSAGE}", where=f"{where}:strategy"
        )
    vote = STRATEGY_VOTES.get(strategy) if isinstance(strategy, str) else None
    if vote is None:
        raise UnsupportedCheckpointError(
            f"{where}: strategy = {short(strategy)} is not a DFlash-family training strategy "
            "(expected 'dflash' or 'dspark'); this plugin serves DFlash-family block drafters only.",
            where=f"{where}:strategy",
        )
    return [Signal(signal, strategy, TIER_EXPLICIT, vote, "the objective that was trained")]


# -- tier 2: structural defaults --------------------------------------------------------------------


def refuse_domino(view: ConfigView, architecture: str | None, tensors: dict[str, str]) -> None:
    """Refuse a Domino drafter, naming every sign of one: a third geometry this plugin does not serve."""
    reasons = []
    if architecture in DOMINO_ARCHITECTURES:
        reasons.append(f"architectures[0] = {architecture!r}")
    for key, value in view.lookups("projector_type", ((), ("dflash_config",))):
        if value == "domino":
            reasons.append(f"{key} = 'domino'")
    if view.config.get("speculators_model_type") == "domino":
        reasons.append("speculators_model_type = 'domino'")
    gru = sorted(n for n in tensors if n.startswith(DOMINO_PREFIXES))
    if gru:
        reasons.append(f"GRU prefix weights ({gru[0]}, ... {len(gru)} tensors)")
    if reasons:
        raise UnsupportedCheckpointError(
            f"{view.folder}: a Domino drafter ({'; '.join(reasons)}). {DOMINO_MESSAGE}",
            where=view.file,
        )


def speculators_type_signals(view: ConfigView) -> list[Signal]:
    """``speculators_model_type``: a speculators-format drafter says its family."""
    key = "speculators_model_type"
    value = view.config.get(key)
    if value is None:
        return []
    if not isinstance(value, str):
        raise view.invalid(key, value, "it must be a string", f"fix {key}.")
    vote = SPECULATORS_TYPES.get(value.lower())
    if vote is None:
        raise UnsupportedCheckpointError(
            f"{view.file}: speculators_model_type = {value!r} is not a DFlash-family drafter "
            f"(known: {', '.join(sorted(SPECULATORS_TYPES))}); this plugin serves DFlash-family "
            "block drafters only.",
            where=f"{view.file}:{key}",
        )
    return [view.signal(key, value, TIER_STRUCTURAL, vote)]


def bundled_keys(view: ConfigView) -> list[str]:
    """The ``SGLANG_BUNDLE_KEYS`` the config holds: a target config that bundles its draft head."""
    return [k for k in SGLANG_BUNDLE_KEYS if k in view.config]


def architecture_signals(
    view: ConfigView, architecture: str | None, tensors: dict[str, str] | None = None
) -> list[Signal]:
    """``architectures[0]``: its family votes (``architectures.FAMILY``; Domino is refused before).

    A name outside the list votes when it follows a family's naming pattern and the config declares
    the family's structure (``families``). Any other name is refused, unless the config is a
    speculators one or a target that bundles its draft head: then the name is the model's, not the
    drafter's, and casts no vote. An exporter's shared class may cast none (``dialects``).
    """
    if architecture is None:
        return []
    tensors = {} if tensors is None else tensors
    shared = torchspec_architecture_signal(view, architecture, tensors)
    if shared is not None:
        return [shared]
    family = family_of(architecture)
    if family in (FAMILY_DFLASH, FAMILY_DSPARK):  # a vote is the family's name
        return [view.signal("architectures[0]", architecture, TIER_STRUCTURAL, family)]
    recognised = family_signal(view, architecture, tensors)
    if recognised is not None:
        return [recognised]
    if not bundled_keys(view) and view.config.get("speculators_model_type") is None:
        raise UnsupportedCheckpointError(
            f"{view.file}: architectures[0] = {architecture!r} is not a DFlash-family "
            f"drafter (known: {', '.join(sorted(DFLASH_ARCHITECTURES | DSPARK_ARCHITECTURES))}). "
            "Pass the draft checkpoint, not the target; this plugin serves DFlash-family block "
            "drafters only.",
            where=f"{view.file}:architectures",
        )
    return [
        view.signal("architectures[0]", architecture, TIER_INFO, None, "not a drafter class name: no vote")
    ]


def bundle_signals(view: ConfigView) -> list[Signal]:
    """sglang's ``dspark_*`` keys: a target config that bundles a DSpark draft head."""
    bundled = bundled_keys(view)
    if not bundled:
        return []
    return [
        view.signal(
            ", ".join(bundled),
            {k: jsonable(view.config[k]) for k in bundled},
            TIER_STRUCTURAL,
            VOTE_DSPARK,
            "sglang dspark_* keys: a target config bundling a DSpark draft head",
        )
    ]


def projector_signals(view: ConfigView) -> list[Signal]:
    """``projector_type``: a DSpark projector votes shifted; any other is recorded without a vote."""
    signals = []
    for key, value in view.lookups("projector_type", ((), ("dflash_config",))):
        if value is None:
            continue
        if not isinstance(value, str):
            raise view.invalid(key, value, "it must be a string", f"fix {key}.")
        if value in DSPARK_PROJECTORS:
            signals.append(view.signal(key, value, TIER_STRUCTURAL, VOTE_DSPARK))
        else:
            signals.append(view.signal(key, value, TIER_INFO, None, "not a DSpark projector: no vote"))
    return signals


def weight_signals(tensors: dict[str, str]) -> list[Signal]:
    """Markov head tensors vote shifted; other heads (a candidate selector, a confidence head) do not."""
    signals = []
    markov = sorted(n for n in tensors if n.startswith(MARKOV_PREFIXES))
    if markov:
        head = f"{markov[0].rsplit('markov_head.', 1)[0]}markov_head.*"
        signals.append(
            Signal(
                f"{tensors[markov[0]]}:{head}",
                len(markov),
                TIER_STRUCTURAL,
                VOTE_DSPARK,
                "Markov head tensors",
            )
        )
    for prefix in INFO_PREFIXES:
        found = sorted(n for n in tensors if n.startswith(prefix))
        if found:
            signals.append(
                Signal(
                    f"{tensors[found[0]]}:{prefix}*",
                    len(found),
                    TIER_INFO,
                    None,
                    "not a Markov head: no vote",
                )
            )
    return signals


def shift_label_signals(view: ConfigView) -> list[Signal]:
    """``shift_label``: recorded without a vote (it only changes Domino's rows)."""
    note = "shift_label only changes Domino's rows; DFlash trainers ignore it (mask-fill)"
    return [
        view.signal(key, value, TIER_INFO, None, note)
        for key, value in view.lookups("shift_label", ((), ("dflash_config",)))
    ]


__all__ = [
    "DSPARK_PROJECTORS",
    "SPECULATORS_TYPES",
    "STRATEGY_VOTES",
    "SGLANG_BUNDLE_KEYS",
    "MARKOV_PREFIXES",
    "DOMINO_PREFIXES",
    "INFO_PREFIXES",
    "DOMINO_MESSAGE",
    "FLAGS",
    "FLAG_SECTIONS",
    "flag_signals",
    "training_state_signals",
    "refuse_domino",
    "speculators_type_signals",
    "architecture_signals",
    "bundle_signals",
    "projector_signals",
    "weight_signals",
    "shift_label_signals",
]
