"""The layering of chaos/, as import-linter checks it from pyproject.toml's contracts (docs/architecture.md): the
commands on top, then run, the experiment file, faults and the load, targets, the reports, verify, the records, and
the run folder's contract, http1 and common at the bottom; the bundled server and the fault proxies standing alone.

The same contracts are run on a small tree where each is broken on purpose, so the check is shown to bite."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LINT = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
pytestmark = pytest.mark.skipif(LINT is None, reason="import-linter is not installed: pip install -e '.[test]'")


def _lint(cwd: pathlib.Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_the_toolkit_keeps_its_contracts():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert "Contracts: 4 kept, 0 broken." in r.stdout
    analysed = int(r.stdout.split("Analyzed ")[1].split(" files")[0])
    assert analysed > 200  # the whole package, not a stale or empty tree


def test_each_contract_bites_on_a_tree_that_breaks_it(tmp_path):
    files = {
        "toy/__init__.py": "", "toy/common.py": "",
        "toy/run/__init__.py": "", "toy/run/runner.py": "from ..load import driver\n",
        "toy/load/__init__.py": "", "toy/load/driver.py": "def f():\n    from ..run import runner\n",
        "toy/report/__init__.py": "", "toy/report/page.py": "from ..records import x\n",
        "toy/records/__init__.py": "", "toy/records/x.py": "from ..report import page\n",
        "toy/server/__init__.py": "", "toy/server/api.py": "from ..load import driver\n",
        "toy/proxy/__init__.py": "", "toy/proxy/relay.py": "from ..server import api\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    (tmp_path / ".importlinter").write_text(textwrap.dedent("""\
        [importlinter]
        root_package = toy

        [importlinter:contract:layers]
        name = layers
        type = layers
        layers =
            toy.run
            toy.load
            toy.report | toy.records
            toy.common

        [importlinter:contract:alone]
        name = alone
        type = forbidden
        source_modules = toy.server
        forbidden_modules = toy.load

        [importlinter:contract:apart]
        name = apart
        type = independence
        modules =
            toy.server
            toy.proxy
        """))
    r = _lint(tmp_path, {"PYTHONPATH": str(tmp_path)})
    assert r.returncode == 1
    assert "Contracts: 0 kept, 3 broken." in r.stdout, r.stdout
    out = " ".join(r.stdout.split())
    assert "toy.load.driver -> toy.run.runner" in out  # upwards, from inside a function
    assert "toy.report is not allowed to import toy.records" in out or \
           "toy.records is not allowed to import toy.report" in out  # siblings joined by |
    assert "toy.server.api -> toy.load.driver" in out
    assert "toy.proxy.relay -> toy.server.api" in out


def test_every_package_has_its_place_in_the_contracts():
    """A new top-level module or package of chaos/ must be placed in a layer (or declared standalone), or no
    contract would look at its imports."""
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    placed = {m.strip() for c in cfg if c["type"] == "layers" for layer in c["layers"] for m in layer.split("|")}
    placed |= {m for c in cfg if c["type"] == "forbidden" for m in c["source_modules"]}
    tops = {f"chaos.{p.stem if p.is_file() else p.name}" for p in (ROOT / "chaos").iterdir()
            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").exists()}
    assert tops - placed == set()
    assert placed - tops == set()  # and nothing placed that is gone
