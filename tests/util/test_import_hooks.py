"""``util.import_hooks.when_imported``: a function runs on a module right after its first import, once,
and the finder steps aside; a module never imported costs nothing but the finder."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

from sglang_dspark_plugin.util.import_hooks import PatchOnImport, when_imported


def _finders(name: str) -> list[PatchOnImport]:
    return [f for f in sys.meta_path if isinstance(f, PatchOnImport) and f.module_name == name]


def test_the_patch_runs_once_after_the_module_executes(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "dspark_late_module.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen: list[int] = []
    when_imported("dspark_late_module", lambda module: seen.append(module.VALUE))
    when_imported("dspark_late_module", lambda module: seen.append(-1))  # one finder a module: ignored
    assert "dspark_late_module" not in sys.modules and len(_finders("dspark_late_module")) == 1
    try:
        module = importlib.import_module("dspark_late_module")
        assert seen == [1] and module.VALUE == 1  # after the module's own code ran
        assert _finders("dspark_late_module") == []  # stepped aside
        importlib.reload(module)
        assert seen == [1]
    finally:
        sys.modules.pop("dspark_late_module", None)


def test_other_imports_pass_through(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "dspark_other_module.py").write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    when_imported("dspark_never_imported", lambda module: None)
    try:
        assert importlib.import_module("dspark_other_module").VALUE == 2
        assert len(_finders("dspark_never_imported")) == 1
    finally:
        sys.modules.pop("dspark_other_module", None)
        for finder in _finders("dspark_never_imported"):
            sys.meta_path.remove(finder)
        from sglang_dspark_plugin.util import import_hooks

        import_hooks._finders.pop("dspark_never_imported", None)
