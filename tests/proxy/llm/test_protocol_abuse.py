"""Raw HTTP/1.1 protocol abuse against the LLM fault proxy as its own process (`python -m chaos.proxy.llm`), in
front of a real reference replica (issue 30): 18 cases - heads over 8 KB and 64 KB (a long URL, one big header,
many headers), too many headers, bad chunked framing (sent with the head and after it), a chunk size past the body
limit, chunked with Content-Length, a Content-Length the client never fulfils (waiting, and half-closed), and 1,000
idle connections at once. After each: no 5xx, every error body OpenAI-shaped JSON, the proxy alive, its
/__chaos/health and the upstream's /health through it 200, a normal request relayed, and the replica's KV blocks
all free again.

The proxy parses HTTP/1.1 itself (chaos/http1/wire.py, shared with the gateway): a head up to 64 KB is valid to it and goes to the
upstream, whose answer (aiohttp's refusal, made JSON by chaos/reference/serving.py) is relayed; past 64 KB, and
every bad body framing, it answers itself.
"""

import json
import re
import subprocess
import sys
import threading
import time

import pytest

from chaos.common import stop_group
from chaos.reference.launcher import start_server
from tests.protocol_abuse import (H1_CODES, H1_EXPECT, Case, IdleConnections, cases, check, check_idle_closed,
                                  ensure_fds, send, wait_kv_free)
from tests.reference.http_util import conn, post, request

M = "chaos-reference"
TIMEOUT_S = 2.0  # the proxy's --header-timeout and --body-timeout (a bad chunk sent 0.3 s after its head must
# beat the body timeout to get its 400, also on a busy machine)
IDLE = 1000
BODY = json.dumps({"model": M, "prompt": "abuse", "max_tokens": 2}).encode()
CASES = cases("/v1/completions", BODY)

# What chaos/http1/server.py answers itself (the gateway's too), but for heads under 64 KB, which the proxy
# relays: the replica's aiohttp refuses some (400), and the proxy keeps its client connection.
EXPECT = {**H1_EXPECT,
          "request line over 8 KB (long URL)": (400, False),
          "one header over 8 KB": (400, False),
          "200 headers, 4 KB in all": (400, False)}  # over aiohttp's 128
CODES = {**H1_CODES, 400: ("invalid_http_request", "request_head_too_large")}


class ProxyProcess:
    """`python -m chaos.proxy.llm` in its own session, on a free port."""

    def __init__(self, upstream: str, *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "chaos.proxy.llm", "--listen", "127.0.0.1:0",
                                      "--upstream", upstream, *args], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.output: list[str] = []
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:  # drained to the end: the proxy never blocks on a full pipe
                self.output.append(line.rstrip("\n"))
                ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        m = re.search(r"listening on (http://\S+)", self.output[0]) if ready.wait(30) and self.output else None
        if m is None:
            self.stop()
            raise RuntimeError(f"the proxy did not start: {self.output[-5:]}")
        self.base_url = m.group(1)

    def stop(self) -> None:
        stop_group(self.proc.pid, None, 5, self.proc)


@pytest.fixture(scope="module")
def chain():
    ensure_fds(IDLE)  # before the starts: the processes inherit the limit
    with start_server(["--preset", "tiny", "--replica-id", "behind-proxy"]) as replica:
        proxy = ProxyProcess(replica.base_url, "--header-timeout", f"{TIMEOUT_S}s", "--body-timeout", f"{TIMEOUT_S}s")
        try:
            yield proxy, replica
        finally:
            proxy.stop()


def assert_healthy(proxy, replica) -> None:
    """Alive; its own health and the upstream's through it 200; a request relayed; the replica's KV all free."""
    assert proxy.proc.poll() is None, "the proxy died: " + " | ".join(proxy.output[-5:])
    assert request(proxy.base_url, "GET", "/__chaos/health")[0] == 200
    assert request(proxy.base_url, "GET", "/health")[0] == 200
    status, _, body = post(proxy.base_url, "/v1/completions", {"model": M, "prompt": "still there?", "max_tokens": 2})
    assert status == 200, body
    wait_kv_free(replica.base_url)


def test_every_case_has_an_expectation():
    assert sorted(EXPECT) == sorted(c.name for c in CASES)
    assert len(CASES) + 1 == 18  # and the 1,000 idle connections: the count in the docstring


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_malformed_request(chain, case: Case):
    proxy, replica = chain
    answer = send(proxy.base_url, case, see_close=EXPECT[case.name][1])
    check(answer, EXPECT[case.name])
    if answer.status in CODES:
        assert json.loads(answer.body)["error"]["code"] in CODES[answer.status], answer.body
    assert_healthy(proxy, replica)


def test_1000_idle_connections(chain):
    proxy, replica = chain
    with IdleConnections(proxy.base_url, IDLE) as idle:
        assert request(proxy.base_url, "GET", "/__chaos/health")[0] == 200  # meanwhile
        status, _, body = post(proxy.base_url, "/v1/completions", {"model": M, "prompt": "busy", "max_tokens": 2})
        assert status == 200, body
        results = idle.collect(limit_s=TIMEOUT_S + 60)  # generous: 1,000 closes on a busy machine
    check_idle_closed(results, TIMEOUT_S)
    assert_healthy(proxy, replica)


@pytest.mark.slow  # real processes for seconds: the whole suite runs it, not the unit tier
def test_a_kept_alive_connection_may_idle_past_the_header_timeout(chain):
    # Between requests a connection is idle (up to 300 s), not late with a head: the header timeout starts at
    # the next request's first byte.
    proxy, _ = chain
    c = conn(proxy.base_url)
    try:
        for i in range(2):
            c.request("POST", "/v1/completions", body=BODY, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            assert r.status == 200 and json.loads(r.read())["usage"]["completion_tokens"] <= 2
            if i == 0:
                time.sleep(TIMEOUT_S + 0.5)
    finally:
        c.close()
