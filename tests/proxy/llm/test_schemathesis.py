"""Schemathesis against the LLM fault proxy's control API, over HTTP on loopback, from the document the proxy serves
at GET /__chaos/openapi.json. The proxy has a fault token and schemathesis is given it, so rules are really added,
read and removed (ignored_auth still sends cases without it, and with a wrong one, which must be 401). Rules only
act on relayed requests, never on /__chaos/ itself. Afterwards the proxy's loop still runs, /__chaos/health is 200,
the rules clear, a request relays through it to the upstream, and nothing printed a traceback.

CI budget (tests/schemafuzz.py, CHAOS_SCHEMA_EXAMPLES unset: 25): 1,523 cases over 6 operations (1,434 of them
POST /__chaos/faults: each effect's params), 5-13 s on a busy two-core machine. CHAOS_SCHEMA_EXAMPLES=1000: 4,448
cases, 28-68 s. Each run prints its figures (pytest -rP or -s).
"""

import secrets

import pytest
import schemathesis

from chaos.common import FAULT_TOKEN_HEADER

from ...schemafuzz import SETTINGS, Tally
from .conftest import chat, request

pytestmark = [pytest.mark.slow, pytest.mark.beside]


class Proxy:
    """The proxy under test, its cases, and what must hold once they ended."""

    def __init__(self, handle, token, loop_thread):
        self.handle, self.token, self.loop_thread = handle, token, loop_thread
        self.tally = Tally("the LLM proxy's control API")

    def check_after(self, stderr: str) -> None:
        port, auth = self.handle.port, {FAULT_TOKEN_HEADER: self.token}
        assert self.loop_thread.thread.is_alive(), "the proxy's event loop stopped"
        assert request(port, "GET", "/__chaos/health")[0] == 200
        assert request(port, "DELETE", "/__chaos/faults", headers=auth)[0] == 204
        assert request(port, "GET", "/__chaos/faults", headers=auth)[2] == b"[]"
        status, _, body = chat(port, stream=True)
        assert status == 200 and body.endswith(b"data: [DONE]\n\n"), body[-300:]
        assert "Traceback" not in stderr, stderr[-3000:]


@pytest.fixture
def proxy_api(make_proxy, loop_thread, capfd):
    token = secrets.token_urlsafe(16)
    p = Proxy(make_proxy(token=token), token, loop_thread)
    yield p
    stderr = capfd.readouterr().err
    try:
        p.tally.report(reached=("POST /__chaos/faults",))
    finally:
        p.check_after(stderr)


@pytest.fixture
def proxy_schema(proxy_api):
    return proxy_api.tally.load(proxy_api.handle.url + "/__chaos/openapi.json",
                                headers={FAULT_TOKEN_HEADER: proxy_api.token})


def window_refusal(response) -> bool:
    """A 400 for a window that ends before it starts: a bound between two fields, which JSON Schema cannot state
    (the document says it in words), so a schema-valid rule may meet it; the only refusal positive_data_acceptance
    is not held to here."""
    if response.status_code != 400:
        return False
    try:
        return response.json()["error"].startswith("window.end: ") and "must be after window.start" in \
            response.json()["error"]
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


schema = schemathesis.pytest.from_fixture("proxy_schema")


@schema.parametrize()
@SETTINGS
def test_the_llm_proxy_control_api_conforms_to_its_document(case, proxy_api):
    proxy_api.tally.call_and_validate(case, tolerate=window_refusal)
