"""The bundled server stands alone. That it imports nothing of the toolkit but chaos/common.py, chaos/errors.py and
chaos/http1/ (lazy imports included) is checked with the rest of the import graph in tests/test_imports.py."""

import subprocess
import sys


def test_gateway_imports_no_torch():
    """The gateway fronts replicas on boxes without a GPU stack: importing it must not pull torch in."""
    code = ("import sys, chaos.reference.gateway.server, chaos.reference.gateway.app\n"
            "print('torch' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False", "chaos.reference.gateway imports torch"


def test_server_and_gateway_errors_share_one_shape():
    import json

    from chaos.common import error_type_for, openai_error
    from chaos.reference.gateway.errors import GatewayError, error_body
    from chaos.reference.protocol import APIError

    for status in (400, 404, 429, 500, 503):
        api, gw = APIError(status, "m", code="c"), GatewayError(status, "m", "c")
        assert api.type == gw.type == error_type_for(status)
        assert json.dumps(api.body()) == json.dumps(error_body("m", "c", gw.type)) \
            == json.dumps(openai_error("m", error_type_for(status), "c"))
    assert [error_type_for(s) for s in (400, 429, 503)] == ["invalid_request_error", "requests", "server_error"]


def _imports(module: str) -> set[str]:
    """The chaos.reference modules one module imports, at the top or inside functions (lazy imports count)."""
    import ast
    import pathlib

    import chaos.reference as r

    tree = ast.parse(pathlib.Path(r.__path__[0], f"{module}.py").read_text())
    return {("chaos.reference." + n.module) if n.level == 1 else n.module
            for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}


def test_attention_and_its_triton_kernel_import_no_circle():
    """attention.py imports the Triton kernel lazily; the kernel must not import attention back (the torch
    path both use lives in decode_gather.py), or importing either first would half-initialise the other."""
    assert "chaos.reference.triton_attention" in _imports("attention")
    assert "chaos.reference.attention" not in _imports("triton_attention")
    assert "chaos.reference.decode_gather" in _imports("triton_attention") & _imports("attention")
    assert not {m for m in _imports("decode_gather") if m.startswith("chaos")}
