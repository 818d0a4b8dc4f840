"""Functions a reader can hold in their head: none in the library runs past 80 lines (a long
one is split into steps named after what they do)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "acesql"
MAX_LINES = 80


def long_functions(root: Path, limit: int) -> list[str]:
    """`path:line name (n lines)` for each function or method of `root` longer than `limit`."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > limit:
                    where = path.relative_to(root.parent)
                    found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_is_longer_than_80_lines():
    assert long_functions(ROOT, MAX_LINES) == []


def test_a_long_function_is_found(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    (package / "m.py").write_text(f"def short():\n    return 1\n\n\ndef long():\n{body}\n")
    # `long` is its def line and 80 assignments: 81 lines
    assert long_functions(package, MAX_LINES) == ["pkg/m.py:5 long (81 lines)"]
    assert long_functions(package, 81) == []
