"""The package's shape: no import cycle between its modules, function-level imports included (only
``TYPE_CHECKING`` blocks are left out), and no ``import sglang`` outside the glue sub-package."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "sglang_dspark_plugin"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        name = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _type_checking(tree: ast.AST) -> set[int]:
    return {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its body."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for module, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking(tree)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if id(node) in skip or not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in mods]
            found = set(subs or [target])
            # importing a module runs the __init__ of every package above it: edges into those too
            for name in list(found):
                parts = name.split(".")
                found |= {".".join(parts[:i]) for i in range(2, len(parts))}
            graph[module] |= {
                c for c in found if c in mods and c != module and not module.startswith(c + ".")
            }
    return graph


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    return seen


def _cycles(graph: dict[str, set[str]]) -> list[str]:
    """The modules that import themselves through others."""
    return sorted(m for m in graph if m in _reachable(graph, m))


def test_no_import_cycles() -> None:
    assert _cycles(_imports(_modules())) == []


ALONE = """
import importlib, sys, types
names = sys.argv[1:]
failed = []
for name in names:
    ours = [m for m in sys.modules if m.split(".")[0] == "sglang_dspark_plugin"]
    for loaded in ours:
        del sys.modules[loaded]
    parent = types.ModuleType("sglang_dspark_plugin")  # an empty parent: its __init__'s order hides nothing
    parent.__path__ = [PACKAGE]
    sys.modules["sglang_dspark_plugin"] = parent
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def test_every_module_imports_alone_under_an_empty_parent_package() -> None:
    """The order the top-level ``__init__`` imports in cannot hide a cycle: each module is imported first,
    with only an empty parent package loaded (the package's modules dropped between imports; third-party
    ones stay, for speed). A cycle fails with "partially initialized module"."""
    import subprocess
    import sys

    skip = ("sglang_dspark_plugin", "sglang_dspark_plugin.__main__")  # the parent; the program itself
    names = sorted(m for m in _modules() if m not in skip and ".sglang_plugin" not in m)
    script = ALONE.replace("PACKAGE", repr(str(PACKAGE)))
    done = subprocess.run(
        [sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=600, check=True
    )
    assert done.stdout.strip() == "", done.stdout


def test_a_cycle_would_be_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c"]


def test_sglang_is_imported_in_the_glue_only() -> None:
    outside = []
    for module, path in _modules().items():
        if module.startswith("sglang_dspark_plugin.sglang_plugin"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            outside += [f"{module}: {n}" for n in names if n == "sglang" or n.startswith("sglang.")]
    assert outside == []
