"""The bundled server stands alone: it imports nothing of the toolkit but chaos/common.py."""

import subprocess
import sys


def test_reference_imports_nothing_of_the_toolkit():
    code = (
        "import pkgutil, importlib, sys, chaos.reference as r\n"
        "for m in pkgutil.walk_packages(r.__path__, 'chaos.reference.'):\n"
        "    if m.name.endswith(('.triton_attention', '.demo')):\n"
        "        continue  # triton is optional; the demo drives the server with the openai client\n"
        "    importlib.import_module(m.name)\n"
        "print('\\n'.join(sorted(n for n in sys.modules if n.startswith('chaos'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    outside = [n for n in out.stdout.split() if n not in ("chaos", "chaos.common")
               and not n.startswith("chaos.reference")]
    assert outside == [], f"chaos.reference pulls in {outside}"
