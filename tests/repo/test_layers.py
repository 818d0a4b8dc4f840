"""The layers of the library point one way: nothing imports a package above its own, and no
two packages import each other, at the top of a module or inside a function alike (a lazy
import does not hide a cycle from this test)."""

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "acesql"

# bottom to top; a package may import its own layer's others and every layer below it
LAYERS = (
    # primitives: the SQL engine, data, config, models, small statistics, storage, tracking
    (
        "errors",
        "sql",
        "data",
        "config",
        "models",
        "paired",
        "tracking",
        "tracking_store",
        "storage",
        "locks",
        "memory",
        "progress",
        "host",
        "remote",
        "staging",
        "checkpoint",
        "distributed",
        "__init__",
    ),
    ("pipeline", "debug"),  # the retriever's greedy columns; debugging tasks
    ("sft", "grpo", "ranker", "prm", "agent"),  # the training roles
    ("selection",),  # one question's answer, chosen among candidates by the roles' judgments
    ("eval",),  # evaluation and its reports
    ("stages", "serving"),  # one entry point per DVC stage; the served model
    ("cli", "__main__"),  # commands
)
LEVEL = {name: level for level, names in enumerate(LAYERS) for name in names}


def package_imports() -> dict[str, set[tuple[str, str]]]:
    """{package: {(imported package, where)}} over every module of the library."""
    found = defaultdict(set)
    for path in sorted(ROOT.rglob("*.py")):
        source = path.relative_to(ROOT).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            for name in names:
                parts = name.split(".")
                if parts[0] == "acesql" and len(parts) > 1 and parts[1] != source:
                    found[source].add((parts[1], f"{path.relative_to(ROOT.parent)}:{node.lineno}"))
    return found


def test_every_package_has_a_layer():
    imports = package_imports()
    named = set(imports) | {target for edges in imports.values() for target, _ in edges}
    on_disk = {
        p.name.removesuffix(".py")
        for p in ROOT.iterdir()
        if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").is_file())
    }
    assert sorted((named | on_disk) - set(LEVEL)) == []


def test_nothing_imports_upward():
    upward = [
        f"{where}: {source} imports {target}"
        for source, edges in package_imports().items()
        for target, where in edges
        if LEVEL[target] > LEVEL[source]
    ]
    assert upward == []


def test_no_two_packages_import_each_other():
    edges = {source: {t for t, _ in e} for source, e in package_imports().items()}

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(edges.get(node, ()))
        return False

    cycles = sorted(
        {" <-> ".join(sorted((a, b))) for a in edges for b in edges[a] if reaches(b, a)}
    )
    assert cycles == []
