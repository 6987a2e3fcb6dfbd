"""Tests against the REAL sglang: fail (never skip) when it is missing or not the expected version.

``DSPARK_EXPECT_SGLANG`` (set by scripts/test.sh) names the version this run must exercise.
Each test starts from a clean plugin state: sglang's spec registry and its ``_plugins_loaded`` guard
are snapshotted and restored, and ``MEMRA_DSPARK_HARVEST`` / ``MEMRA_DSPARK_MANIFEST`` are unset (the
plugin itself keeps no per-process state between launches).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import sglang
    from sglang.srt import plugins as sglang_plugins
    from sglang.srt.speculative import spec_registry
except ImportError as err:  # a missing sglang must fail the run, not skip it
    raise pytest.UsageError(
        f"tests/sglang needs the real sglang installed ({err}); create the environments with "
        "scripts/setup_envs.sh and run these tests with the python of a sglang-X environment"
    ) from err

_EXPECTED = os.environ.get("DSPARK_EXPECT_SGLANG")
if _EXPECTED and sglang.__version__ != _EXPECTED:
    raise pytest.UsageError(
        f"DSPARK_EXPECT_SGLANG={_EXPECTED} but this interpreter has sglang {sglang.__version__} "
        f"({sys.executable}); run with the sglang-{_EXPECTED} environment."
    )

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/checkpoints.py

PLUGIN_LOGGER = "sglang_dspark_plugin"

# A tiny Qwen3 target: prepare_server_args only reads its config.json (no weights, nothing downloaded);
# the plan's expectations (tests/plan_expectations.py) are stated for a launch with it.


def sglang_version() -> str:
    return sglang.__version__


@pytest.fixture(scope="session")
def target_dir(plan_target: Path) -> Path:
    """A target model folder holding only a config.json (``plan_expectations.PLAN_TARGET_CONFIG``)."""
    return plan_target


@pytest.fixture(scope="session")
def checkpoint_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fixtures")


@pytest.fixture(scope="module")
def prompts() -> list[list[int]]:
    """The embedded prompts, tokenized by the embedded target's tokenizer."""
    from transformers import AutoTokenizer

    from sglang_dspark_plugin.embedded import EMBEDDED

    tok = AutoTokenizer.from_pretrained(str(EMBEDDED.target), local_files_only=True)
    return [tok(p, add_special_tokens=False)["input_ids"] for p in EMBEDDED.prompts]


@pytest.fixture(scope="module")
def target() -> Any:
    """The embedded target (float32, one thread), as the reference engine runs it."""
    import torch
    from transformers import AutoModelForCausalLM

    from sglang_dspark_plugin.embedded import EMBEDDED

    torch.set_num_threads(1)
    return AutoModelForCausalLM.from_pretrained(
        str(EMBEDDED.target), local_files_only=True, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="module")
def greedy(target: Any, prompts: list[list[int]]) -> list[list[int]]:
    """The target's own greedy tokens: what every lossless run must produce."""
    import served_cases as sc

    from sglang_dspark_plugin.engine import autoregressive_generate

    return [autoregressive_generate(target, p, sc.MAX_NEW_TOKENS).tokens for p in prompts]


@pytest.fixture(scope="session", autouse=True)
def sglang_plugins_loaded() -> None:
    """``load_plugins()`` once, as every sglang process runs it before building ServerArgs: the entry
    point registers DSPARK_HARVEST and its hooks, and sglang applies them (0.5.17's rewrite wraps
    ``ServerArgs.__post_init__``)."""
    sglang_plugins.load_plugins()


@pytest.fixture(autouse=True)
def clean_plugin_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Snapshot/restore sglang's registry and plugin guard; unset the user's settings."""
    registry = dict(spec_registry._REGISTRY)
    loaded = sglang_plugins._plugins_loaded
    monkeypatch.delenv("MEMRA_DSPARK_HARVEST", raising=False)
    monkeypatch.delenv("MEMRA_DSPARK_MANIFEST", raising=False)
    yield
    spec_registry._REGISTRY.clear()
    spec_registry._REGISTRY.update(registry)
    sglang_plugins._plugins_loaded = loaded


class PluginLog(logging.Handler):
    """Records of the plugin's loggers (sglang's basicConfig(force=True) would drop caplog's handler)."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@pytest.fixture
def plugin_log() -> Iterator[PluginLog]:
    handler = PluginLog()
    logger = logging.getLogger(PLUGIN_LOGGER)
    old_level = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(old_level)
