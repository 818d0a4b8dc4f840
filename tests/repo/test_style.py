"""The code base stays lint- and format-clean (ruff, configured in pyproject.toml)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "args", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff(args):
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed")
    proc = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _limit(function, default: float) -> float:
    """The per-test limit pytest-timeout applies: the function's own mark, else the default."""
    for deco in function.decorator_list:
        if (
            isinstance(deco, ast.Call)
            and ast.unparse(deco.func).endswith("mark.timeout")
            and isinstance(deco.args[0], ast.Constant)
        ):
            return deco.args[0].value
    return default


def test_no_test_waits_longer_than_its_own_time_limit():
    """A wait inside a test past the test's limit would be cut short by a less clear error."""
    import tomllib

    default = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    default = float(default["timeout"])
    too_long, paths = [], sorted((ROOT / "tests").rglob("test_*.py"))
    assert len(paths) > 60  # every package's tests, in their folders
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            limit = _limit(node, default)
            for call in ast.walk(node):
                for kw in getattr(call, "keywords", []):
                    value = getattr(kw.value, "value", None)
                    if kw.arg == "timeout" and isinstance(value, int | float) and value >= limit:
                        too_long.append(f"{path.name}::{node.name} waits {value} s")
    assert not too_long, f"limit {default} s: " + "; ".join(too_long)
