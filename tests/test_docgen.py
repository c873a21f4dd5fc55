"""docs/reference/ is what the code says today: a page that differs from what chaos.docgen writes fails here."""

import os
import subprocess
import sys

from chaos.docgen import PYTHON_MARK, generate
from chaos.experiment import schema as S
from chaos.faults import FAULT_TYPES

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_committed_reference_is_what_the_code_generates():
    stale = []
    for path, text in generate(ROOT).items():
        with open(path) as f:
            committed = f.read()
        mark = PYTHON_MARK.format(*sys.version_info[:2])
        if path.endswith("cli.md") and mark not in committed:
            continue  # written under another Python, whose argparse lays help out differently: not comparable
        if committed != text:
            stale.append(os.path.relpath(path, ROOT))
    assert not stale, f"stale: {stale}; run `python -m chaos.docgen` and commit docs/reference/"


def test_every_fault_key_and_command_is_in_it():
    pages = generate(ROOT)
    text = {os.path.basename(p): t for p, t in pages.items()}
    for name in FAULT_TYPES:
        assert f"### `{name}`" in text["faults.md"], name
    for key in S.EXPERIMENT["properties"]:
        assert f"`{key}" in text["files.md"], key
    for kind in S.TARGET_KINDS:
        assert f"### kind: {kind}" in text["files.md"], kind
    for command in ("run", "init", "gate", "gameday", "report", "proxy serve", "reference serve", "selftest hostile"):
        assert f"## `chaos {command}`" in text["cli.md"], command


def test_check_mode_names_a_stale_page(tmp_path):
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "faults.md").write_text("old\n")
    r = subprocess.run([sys.executable, "-m", "chaos.docgen", "--check", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "stale: docs/reference/faults.md" in r.stdout
    assert not (tmp_path / "docs" / "reference" / "cli.md").exists()  # --check writes nothing
