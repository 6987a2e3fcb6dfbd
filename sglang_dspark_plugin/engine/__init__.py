"""The reference engine: the DFlash-family round on Hugging Face targets, without sglang.

``spec_decode`` holds the round and the generation loops, ``probe`` the offset probe, ``drafter``
the draft model and its checkpoint loader.
"""

from .drafter import DFlashDraftModel, DraftCache, load_drafter, new_draft_model
from .probe import ProbeResult, ProbeRound, offset_probe
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
