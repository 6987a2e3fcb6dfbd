"""Run a function on a module right after it is first imported, without importing it first.

The sglang glue registers its hooks on sglang modules that take seconds to import; a process that
never imports one pays nothing (``sglang_plugin.hooks``). Generic: nothing here names sglang.
"""

from __future__ import annotations

import importlib.abc
import sys
import threading
from collections.abc import Callable
from typing import Any

_finders: dict[str, PatchOnImport] = {}
_finders_lock = threading.Lock()


class PatchOnImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after ``module_name`` executes, once; then steps aside."""

    def __init__(self, module_name: str, patch: Any) -> None:
        self.module_name = module_name
        self.patch = patch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != self.module_name:
            return None
        spec = None
        for finder in sys.meta_path:  # whichever finder would have found it without us
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        loader, patch = spec.loader, self.patch
        exec_module = loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            patch(module)

        loader.exec_module = exec_then_patch  # this spec's own loader instance only
        _remove_finder(self)
        return spec


def when_imported(module_name: str, patch: Callable[[Any], None]) -> None:
    """Run ``patch(module)`` right after ``module_name`` is first imported (once)."""
    with _finders_lock:
        if module_name in _finders:
            return
        finder = PatchOnImport(module_name, patch)
        _finders[module_name] = finder
        sys.meta_path.insert(0, finder)


def _remove_finder(finder: PatchOnImport) -> None:
    with _finders_lock:
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        _finders.pop(finder.module_name, None)


__all__ = ["PatchOnImport", "when_imported"]
