"""The reference engine: the DFlash-family round on Hugging Face targets, without sglang.

``spec_decode`` holds the round and the generation loops, ``probe`` the offset probe, ``drafter``
the draft model and its checkpoint loader (``layers``: its layers; ``weights`` and ``preflight``: its
checkpoint's weights, checked before and after they are read), ``markov`` the DSpark heads, ``fit``
the checks that a drafter fits a target.
"""

from ..probe.offsets import ProbeResult, ProbeRound, offset_probe
from .drafter import DFlashDraftModel, DraftCache, load_drafter, new_draft_model
from .fit import FittedDrafter, TargetShape, check_engine_can_draft, check_fits, fit_drafter
from .spec_decode import (
    DecodeState,
    Generation,
    RoundResult,
    autoregressive_generate,
    prefill,
    speculative_generate,
    speculative_round,
)

__all__ = [
    "DFlashDraftModel",
    "DraftCache",
    "load_drafter",
    "new_draft_model",
    "TargetShape",
    "FittedDrafter",
    "check_engine_can_draft",
    "check_fits",
    "fit_drafter",
    "DecodeState",
    "Generation",
    "RoundResult",
    "ProbeRound",
    "ProbeResult",
    "offset_probe",
    "prefill",
    "speculative_round",
    "speculative_generate",
    "autoregressive_generate",
]
