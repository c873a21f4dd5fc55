#!/usr/bin/env python3
"""The figures of chaos/'s layout that issue 43 set targets for, measured from the source (docs/architecture.md):

    python scripts/layout_figures.py

file circles, package pairs importing each other, imports that run upwards (the ones the layers contract lets
through by name), imports inside functions (in all, and across packages), private names imported across packages,
exception classes outside the error tree, and the largest files. Reads the tree; writes nothing.
"""

from __future__ import annotations

import ast
import pathlib
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.test_imports import cycles, import_graph, module_name, package_pairs  # noqa: E402


def _package(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def _resolve(node, package: str) -> str:
    """The absolute module an import names (its first, for `import a, b`)."""
    if isinstance(node, ast.Import):
        return node.names[0].name
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[:len(parts) - (node.level - 1)])
    return f"{base}.{node.module}" if node.module else base


def main() -> int:
    top = ROOT / "chaos"
    graph = import_graph(top)
    lazy = across = private = 0
    private_names, bare = [], []
    for path in sorted(top.rglob("*.py")):
        name = module_name(path, top)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                for inner in ast.walk(node):
                    if isinstance(inner, ast.Import | ast.ImportFrom):
                        lazy += 1
                        target = _resolve(inner, package)
                        if target.startswith("chaos.") and _package(target) != _package(name):
                            across += 1
            if isinstance(node, ast.ImportFrom) and (node.level >= 2 or (node.module or "").startswith("chaos.")):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        private += 1
                        private_names.append(f"{name}: {alias.name} from {node.module}")
            builtin = ("Exception", "RuntimeError", "ValueError", "OSError", "TypeError", "KeyError")
            if isinstance(node, ast.ClassDef) and node.bases and node.name != "ChaosError" \
                    and all(ast.unparse(b) in builtin for b in node.bases):
                bare.append(f"{name}.{node.name}")
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    upward = [i for c in contracts for i in c.get("ignore_imports", [])]
    sizes = sorted(((len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in top.rglob("*.py")),
                   reverse=True)
    print(f"files {len(graph)}, lines {sum(n for n, _ in sizes):,}")
    print(f"file circles: {len(cycles(graph, 'chaos'))}")
    print(f"package pairs importing each other: {len(package_pairs(graph))} {package_pairs(graph) or ''}")
    print(f"upward imports let through by the layers contract: {len(upward)} {upward or ''}")
    print(f"imports inside functions: {lazy} ({across} of them from another package of the toolkit)")
    print(f"private names imported across packages: {private} {private_names or ''}")
    print(f"exception classes outside the error tree: {len(bare)} {bare or ''}")
    print("largest files: " + ", ".join(f"{p} {n}" for n, p in sizes[:5]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
