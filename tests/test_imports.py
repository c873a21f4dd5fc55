"""The import graph of chaos/ keeps its shape: read from the source with ast, every import counted, at the top of
a module or inside a function.

- the analysis (chaos.records, chaos.verify, chaos.report) never imports the load: it reads records;
- chaos.replay (readers, synthesis, scrubbing) never imports the load: the load reads logs through it, and the
  `chaos replay` command that drives the load lives in chaos.load;
- chaos.experiment (the file format) never imports chaos.run (the run's lifecycle), nor do the records, verify, the
  reports, the load or the self-tests: they read a run folder through chaos.rundir, which imports only common;
- chaos.reference (the bundled server) imports nothing of the toolkit but chaos.common, chaos.errors and
  chaos.http1, which import nothing else of it, so the server lifts out with them; chaos.proxy (the fault proxies)
  the same; chaos.common and chaos.errors import nothing of the toolkit;
- no cycle among chaos.load's modules, lazy imports included (a lazy import is how a cycle hides).

The checker is itself tested on a small tree with each knot tied on purpose, so these tests can fail.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap

import chaos

ROOT = pathlib.Path(chaos.__file__).parent


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
    """module -> the modules of the tree it imports (relative imports resolved; `from pkg import sub` is sub alone)."""
    files = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        out = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - (node.level - 1)])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module
                subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in files}
                out.update(subs)
                if len(subs) < len(node.names):  # a name of the module itself, not only its submodules
                    out.add(base)
        graph[name] = {m for m in out if m in files or m.partition(".")[0] == root.name}  # gone modules count too
    return graph


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(graph: dict[str, set[str]], top: str = "chaos") -> list[str]:
    """Every import that breaks a rule above, as 'importer -> imported (rule)'."""
    rules = [(f"{top}.{src}", lambda m, dst=f"{top}.{dst}": _under(m, dst), f"{src} must not import {dst}")
             for src, dst in (("records", "load"), ("verify", "load"), ("report", "load"), ("replay", "load"),
                              ("experiment", "run"), ("records", "run"), ("verify", "run"), ("report", "run"),
                              ("load", "run"), ("selftest", "run"))]
    common, errors, http1 = f"{top}.common", f"{top}.errors", f"{top}.http1"
    for pkg in ("reference", "proxy"):
        rules.append((f"{top}.{pkg}", lambda m, own=f"{top}.{pkg}": not (_under(m, own) or _under(m, http1)
                                                                            or m in (common, errors)),
                      f"{pkg} imports nothing of the toolkit but common, errors and http1"))
    rules.append((http1, lambda m: not (_under(m, http1) or m in (common, errors)),
                  "http1 imports nothing of the toolkit but common and errors"))
    rundir = f"{top}.rundir"
    rules.append((rundir, lambda m: not (_under(m, rundir) or m == common),
                  "rundir imports nothing of the toolkit but common"))
    rules.append((common, lambda m: True, "common imports nothing of the toolkit"))
    rules.append((errors, lambda m: True, "errors imports nothing of the toolkit"))
    out = []
    for importer, imported in sorted(graph.items()):
        for src, bad, rule in rules:
            out += [f"{importer} -> {m} ({rule})" for m in sorted(imported) if _under(importer, src) and bad(m)]
    return out


def cycles(graph: dict[str, set[str]], package: str) -> list[list[str]]:
    """One cycle through each strongly connected group of the package's modules (Tarjan), as module paths."""
    nodes = sorted(m for m in graph if _under(m, package))
    edges = {m: sorted(d for d in graph[m] if _under(d, package) and d != m) for m in nodes}
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(_path(edges, set(group), v))

    for v in nodes:
        if v not in index:
            visit(v)
    return found


def _path(edges, group: set[str], start: str) -> list[str]:
    """A way from start back to start within its group (breadth first), for a message one can act on."""
    prev, queue = {}, [start]
    while queue:
        v = queue.pop(0)
        for w in edges[v]:
            if w in group and w not in prev:
                prev[w] = v
                if w == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(prev[path[-1]])
                    return path[::-1]
                queue.append(w)
    return sorted(group)


def package_pairs(graph: dict[str, set[str]], top: str = "chaos") -> list[tuple[str, str]]:
    """Every two packages of the tree that import each other, either way round, each pair once."""
    def pkg(m):
        return m.split(".")[1] if m.count(".") else m
    edges = {(pkg(a), pkg(b)) for a, bs in graph.items() for b in bs if b in graph and pkg(a) != pkg(b)
             and a != top and b != top}
    return sorted((a, b) for a, b in edges if a < b and (b, a) in edges)


def test_no_package_imports_what_it_must_not():
    assert violations(import_graph()) == []


def test_no_import_cycle_among_the_load_modules():
    assert cycles(import_graph(), "chaos.load") == []


def test_no_import_cycle_among_the_toolkits_files():
    assert cycles(import_graph(), "chaos") == []


def test_no_two_packages_import_each_other():
    assert package_pairs(import_graph()) == []


def test_the_graph_sees_every_kind_of_import():
    """The graph must see what the rules are about, or the tests above pass on nothing."""
    g = import_graph()
    assert "chaos.plan.replaycli" in g and "chaos.verify.spec" in g["chaos.verify.verdict"]
    assert "chaos.load.errors" in g["chaos.load.replay.run"]  # relative, at the top
    assert "chaos.load.workloads" in g["chaos.load.driver"]  # relative, inside a function
    assert "chaos.load.workloads" in g["chaos.load.locustfile"]  # absolute
    assert "chaos.common" in g["chaos.reference.cli"]  # two levels up


def test_the_checker_finds_each_knot(tmp_path):
    """A small tree with every knot tied, each a different way (top level, in a function, `from . import`)."""
    files = {
        "__init__.py": "", "common.py": "from .records import x\n", "errors.py": "from .common import p\n",
        "load/__init__.py": "", "load/a.py": "from . import b\n",
        "load/b.py": "def f():\n    from .c import y\n", "load/c.py": "from chaos.load.a import z\n",
        "load/d.py": "from .a import z\n", "load/e.py": "def f():\n    from ..records import x\n",
        "records/__init__.py": "", "records/x.py": "from ..load import a\n",
        "verify/__init__.py": "", "verify/v.py": "def f():\n    from ..load.d import q\n",
        "report/__init__.py": "", "report/r.py": "import chaos.load.c\n",
        "replay/__init__.py": "", "replay/cli.py": "from ..load import d\n",
        "experiment/__init__.py": "", "experiment/checks.py": "def f():\n    from ..run.loadspec import g\n",
        "run/__init__.py": "", "run/loadspec.py": "",
        "reference/__init__.py": "",
        "reference/s.py": "from ..common import p\nfrom ..records import x\nfrom ..errors import ChaosError\n",
        "proxy/__init__.py": "", "proxy/p.py": "from ..http1 import w\nfrom ..reference import s\n",
        "http1/__init__.py": "",
        "http1/w.py": "from ..common import p\nfrom ..proxy import p\nfrom ..errors import E\n",
    }
    top = tmp_path / "chaos"
    for rel, text in files.items():
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        (top / rel).write_text(textwrap.dedent(text))
    g = import_graph(top)
    found = violations(g)
    for importer, imported in (("records.x", "load.a"), ("verify.v", "load.d"), ("report.r", "load.c"),
                               ("replay.cli", "load.d"), ("experiment.checks", "run.loadspec"),
                               ("reference.s", "records.x"), ("common", "records.x"), ("proxy.p", "reference.s"),
                               ("http1.w", "proxy.p"), ("errors", "common")):
        assert any(v.startswith(f"chaos.{importer} -> chaos.{imported} ") for v in found), (importer, found)
    assert not any(v.startswith(("chaos.reference.s -> chaos.common ", "chaos.proxy.p -> chaos.http1",
                                 "chaos.http1.w -> chaos.common ", "chaos.reference.s -> chaos.errors ",
                                 "chaos.http1.w -> chaos.errors ")) for v in found)
    assert cycles(g, "chaos.load") == [["chaos.load.a", "chaos.load.b", "chaos.load.c", "chaos.load.a"]]
    assert ("load", "records") in package_pairs(g) and ("load", "replay") not in package_pairs(g)
