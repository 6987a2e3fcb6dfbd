"""What the installed sglang release offers, read from sglang itself, never from its version string.

The tests branch on these, so that every release from 0.5.17 to 0.5.23 takes the branch its own code
has (scripts/release_matrix.py runs them on each). The first release of each is noted.
"""

from __future__ import annotations

import importlib.util
import inspect

from sglang.srt.arg_groups import overrides
from sglang.srt.model_loader import loader
from sglang.srt.server_args import ServerArgs
from sglang.srt.speculative.dspark_components import dspark_config

RESOLVE_ONCE = hasattr(ServerArgs, "resolve_once")
"""0.5.19: building ``ServerArgs`` leaves it raw; ``resolve_once()`` runs the resolution pipeline, which
keeps what the caller passed in ``_raw_input``. Before: ``__post_init__`` resolves."""

DECLARES = hasattr(overrides, "declare_resolution")
"""0.5.19: resolution declares its results (``declare_resolution``); the fields keep the raw input.
Before: handlers assign the fields."""

FOREIGN_DEFAULTS = hasattr(overrides, "record_foreign_defaults")
"""0.5.20: a plugin's ``handle_server_args`` receives a recording stand-in (``_ForeignDefaults``), and
the resolution-hook API exists (the plugin's contract then holds the 0.5.23 entries)."""

RESOLUTION_HOOKS = importlib.util.find_spec("sglang.srt.arg_groups.resolution_hooks") is not None
"""0.5.20: ``register_resolution_hook``; the plugin's rewrite sits on a pipeline step."""

HAS_MASK_FILL_DSPARK = hasattr(dspark_config, "get_dspark_sample_from_anchor")
"""0.5.19: DSPARK's mask-fill layout (``sample_from_anchor`` false)."""

NESTED_DFLASH_CONFIG = "dflash_config" in inspect.getsource(dspark_config)
"""0.5.23: ``parse_dspark_draft_config`` also reads ``dflash_config`` (SpecForge nests the head there)."""

POST_LOAD_WEIGHTS = "post_load_weights" if hasattr(loader, "post_load_weights") else "_post_load_weights"
"""The loader's hook after weights load: ``post_load_weights`` from 0.5.21, ``_post_load_weights`` before."""

SUBFOLDER_DRAFT = hasattr(
    importlib.import_module("sglang.srt.arg_groups.speculative_hook"), "_target_checkpoint_dspark_subfolder"
)
"""0.5.23: a DSpark draft in the target checkpoint's ``dspark/`` subfolder (``speculative_hook.py:625``)."""
