"""What ``doctor`` reports besides sglang: the environment, ``SGLANG_PLUGINS``, unreadable distributions.

Read from package metadata and the environment only (torch is imported for its CUDA facts); nothing
here imports sglang. Every value may come from a broken install, so each is read defensively and is
escaped by the caller before it reaches a terminal.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from typing import Any

from ..errors import printable

PLUGINS_VAR = "SGLANG_PLUGINS"  # sglang's whitelist of general plugins, by entry-point name
PACKAGES = ("transformers", "huggingface_hub", "safetensors")


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"
    except Exception as exc:  # noqa: BLE001 - a broken METADATA is the finding, whatever its error
        return f"unreadable metadata ({type(exc).__name__}: {printable(exc, 200)})"


def _torch() -> str:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a torch that cannot import is the finding
        return f"cannot import ({type(exc).__name__}: {printable(exc, 200)})"
    cuda = torch.version.cuda
    if cuda is None:
        return f"{torch.__version__} (CPU build)"
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return f"{torch.__version__} (CUDA {cuda}, {visible} GPU(s) visible)"


def environment() -> dict[str, str]:
    """The lines ``transformers env`` prints: Python, platform, torch and its CUDA, the HF packages."""
    facts = {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": platform.platform(),
        "torch": _torch(),
    }
    facts.update({name: _version(name) for name in PACKAGES})
    return facts


def plugins_setting(entry_point_name: str) -> dict[str, Any]:
    """``SGLANG_PLUGINS`` as sglang reads it (comma-separated names; unset or empty: load every plugin)."""
    value = os.environ.get(PLUGINS_VAR)
    allowed = {name.strip() for name in (value or "").split(",") if name.strip()}
    return {"value": value, "excludes_plugin": bool(value) and entry_point_name not in allowed}


def unreadable_distributions() -> list[str]:
    """Installed distributions whose METADATA or entry_points.txt cannot be read (sglang's plugin
    discovery reads every distribution's entry points)."""
    found = []
    for dist in metadata.distributions():
        try:
            _ = dist.metadata["Name"], dist.version, list(dist.entry_points)
        except Exception as exc:  # noqa: BLE001 - any error here is a broken distribution
            where = getattr(dist, "_path", None) or "a distribution"
            found.append(f"{where}: {type(exc).__name__}: {exc}")
    return found


__all__ = ["PLUGINS_VAR", "environment", "plugins_setting", "unreadable_distributions"]
