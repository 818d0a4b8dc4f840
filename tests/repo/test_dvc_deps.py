"""Every module a stage runs is a dependency of that stage in dvc.yaml.

A dependency DVC does not know about lets `dvc repro` call a stage up to date after its code
changed. The import closure of each stage's entry point inside the project (imports inside
functions included) is computed from the source, and each module's file must sit under one
of the stage's `deps` (a file or a folder).
"""

import ast
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("acesql",)
LAZY_IMPORT = re.compile(r"acesql(\.\w+)+(:\w+)?")


def _module_file(name: str) -> Path | None:
    base = ROOT / Path(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Project modules `path` imports, anywhere in the file, with their parent packages.

    Registries that import lazily name their modules in strings ("acesql.models.hf_engine:
    HFEngine"); such strings count as imports.
    """
    found = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if LAZY_IMPORT.fullmatch(node.value):
                names = [node.value.split(":")[0]]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            if name.split(".")[0] not in PACKAGES:
                continue
            parts = name.split(".")
            found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return {name for name in found if _module_file(name)}


def import_closure(module: str) -> set[Path]:
    """Files of every project module `module` reaches through imports, itself included."""
    seen, todo = set(), [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_imports(_module_file(name), name) - seen)
    return {_module_file(name).relative_to(ROOT) for name in seen}


def _stages() -> dict[str, dict]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    return {name: stage.get("do", stage) for name, stage in stages.items()}


@pytest.mark.parametrize("name", sorted(_stages()))
def test_stage_deps_cover_its_import_closure(name):
    stage = _stages()[name]
    launcher, stage_name = stage["cmd"].split()[1:3]  # sh scripts/stage <stage> [args]
    entry = f"acesql.stages.{stage_name}"
    deps = [str(d) for d in stage["deps"]]
    assert launcher in deps, f"dvc.yaml stage {name} does not depend on its command {launcher}"
    missing = sorted(
        str(path)
        for path in import_closure(entry)
        if path.name != "__init__.py" or path.stat().st_size
        if not any(str(path) == d or str(path).startswith(d.rstrip("/") + "/") for d in deps)
    )
    assert not missing, f"dvc.yaml stage {name} runs code it does not depend on: {missing}"


def test_the_closure_follows_imports_inside_functions():
    closure = import_closure("acesql.stages.evaluate")
    assert Path("acesql/eval/end_to_end.py") in closure
    assert Path("acesql/models/hf_engine.py") in closure  # imported where the engine opens
