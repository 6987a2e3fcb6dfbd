"""Size limits of the package's code: modules <= 400 lines, functions <= 60, classes <= 200.

    python scripts/check_sizes.py [paths...]      (default: sglang_dspark_plugin)

Prints every definition over its limit and exits 1 if there is one. Lines are counted from a
definition's first decorator or ``def``/``class`` line to its last line, docstrings included.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_LINES, FUNCTION_LINES, CLASS_LINES = 400, 60, 200


def oversize(path: Path) -> list[str]:
    """``"path:line kind name: N lines (limit L)"`` for each part of ``path`` over its limit."""
    text = path.read_text()
    found = []
    n_lines = len(text.splitlines())
    if n_lines > MODULE_LINES:
        found.append(f"{path}: module: {n_lines} lines (limit {MODULE_LINES})")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            size = (node.end_lineno or node.lineno) - first + 1
            is_class = isinstance(node, ast.ClassDef)
            limit = CLASS_LINES if is_class else FUNCTION_LINES
            if size > limit:
                kind = "class" if is_class else "function"
                found.append(f"{path}:{first}: {kind} {node.name}: {size} lines (limit {limit})")
    return found


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [Path("sglang_dspark_plugin")]
    files = sorted(p for r in roots for p in ([r] if r.is_file() else r.rglob("*.py")))
    found = [line for f in files for line in oversize(f)]
    print("\n".join(found) if found else f"sizes ok: {len(files)} files within the limits")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
