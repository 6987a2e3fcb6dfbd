"""The context edge, served on sglang's real engine: DSPARK_HARVEST never writes past a request's row.

Drafters whose every draft is rejected (fresh random weights: one token a round) decode one prompt of 32
tokens to the limit of a 64-token context, so their rounds land on every length, the last one included:
the round whose decode reserve (committed + 2W) outgrows sglang's row (context_len + 4 + W) when W > 8
(docs/sglang.md). The CPU harness's stand-ins for sglang's Triton kernels are bounds-checking
(``cpu_support``: an access past a row raises, in every served test); here the builtin runs with the
overruns recorded instead (``DSPARK_ROW_OVERRUNS``), as the contrast.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from served import run_engine

from sglang_dspark_plugin.embedded import EMBEDDED

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "context_edge.py"
CONTEXT, PROMPT_TOKENS = 64, 32
PLUGIN_BATCHES = 2
"""The batch served twice by one plugin launch: sglang checks its pools for a leak each time it goes idle,
and a leak shows on some rounds' timings only (the overlap scheduler's)."""


def _context_edge():
    spec = importlib.util.spec_from_file_location("context_edge", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["context_edge"] = module
    spec.loader.exec_module(module)
    return module


CE = _context_edge()

# W and the arm: the shifted drafter serves W = b + 1 through DSPARK, the mask-fill one W = b through DFLASH
WINDOWS = {9: ("DSPARK", 8), 12: ("DFLASH", 12), 16: ("DFLASH", 16)}


def _engine(algorithm: str, drafter: Path) -> dict:
    return {
        "model_path": str(EMBEDDED.target),
        "speculative_algorithm": algorithm,
        "speculative_draft_model_path": str(drafter),
        "context_length": CONTEXT,
        "allow_auto_truncate": True,  # max_new_tokens cut to what the context allows
    }


@pytest.mark.parametrize("window", sorted(WINDOWS))
def test_the_plugin_never_writes_past_a_row_at_the_context_edge(window: int, tmp_path: Path) -> None:
    builtin, block = WINDOWS[window]
    drafters = CE.zero_acceptance_drafters(tmp_path, block)
    drafter = drafters["DSPARK_HARVEST"] if builtin == "DSPARK" else drafters["DFLASH"]
    # sglang's DSPARK requires a Markov head: the builtin gets the same drafter with a zero one
    contrast = drafters[builtin]
    batch = CE.prompts(CONTEXT, CONTEXT - PROMPT_TOKENS, CONTEXT - PROMPT_TOKENS)
    # bounds-checking stand-ins: an overrun or a pool leak at either idle check fails the run
    got = run_engine(_engine("DSPARK_HARVEST", drafter), [batch] * PLUGIN_BATCHES, CONTEXT)
    assert f"verify window={window}" in got.log
    widened = f"req_to_token rows widened from context_len + {4 + window} to context_len + {2 * window}"
    assert widened in got.log
    outputs = got.output_ids
    assert len(outputs) == PLUGIN_BATCHES and outputs[0] == outputs[1]
    served = len(batch[0]) + len(outputs[0][0])
    assert served == CONTEXT - 2  # as many tokens as sglang allows: the request reached the edge

    # the contrast: the builtin with the same drafter, its overruns recorded instead of raised
    overruns = tmp_path / "overruns.txt"
    try:
        plain = run_engine(
            _engine(builtin, contrast), [batch], CONTEXT, env={"DSPARK_ROW_OVERRUNS": str(overruns)}
        )
    except AssertionError as err:  # the builtin's scheduler may stop on the leaked slots
        assert "pool memory leak" in str(err) or overruns.exists(), str(err)[-2000:]
    else:  # where the builtin survives, the same tokens (every draft rejected: the target's own)
        assert plain.output_ids[0] == outputs[0]
    lines = overruns.read_text().splitlines() if overruns.exists() else []
    print(f"W={window}: builtin {builtin} overran a row {len(lines)} time(s): {lines[:3]}")
    if window > 9:  # W = 9 overruns only when a round lands on context_len - 4 without the overlap lag
        assert lines and all("assign_req_to_token_pool" in line or "cache_locs" in line for line in lines)
