"""The event loop the proxies, the gateway and the reference server run on: uvloop where it is installed (an optional
dependency: `pip install 'llm-chaos[fast]'`), asyncio's own otherwise or when CHAOS_EVENT_LOOP=asyncio says so.
Both paths must pass the proxy and gateway suites: the rest of the suite runs on whichever is the default here,
and one test runs those suites again on the other."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import subprocess
import sys

import pytest

from chaos.common import EVENT_LOOP_ENV, event_loop_factory, run_event_loop, running_loop_name

HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None


def test_the_default_is_uvloop_where_it_installs_and_asyncio_is_the_fallback(monkeypatch):
    monkeypatch.delenv(EVENT_LOOP_ENV, raising=False)
    assert event_loop_factory()[0] == ("uvloop" if HAVE_UVLOOP else "asyncio")
    monkeypatch.setenv(EVENT_LOOP_ENV, "asyncio")
    assert event_loop_factory()[0] == "asyncio"
    monkeypatch.setenv(EVENT_LOOP_ENV, " UVLOOP ")
    assert event_loop_factory()[0] == ("uvloop" if HAVE_UVLOOP else "asyncio")  # asked for, not installed: fallback
    monkeypatch.setenv(EVENT_LOOP_ENV, "tokio")
    with pytest.raises(ValueError, match="write uvloop or asyncio"):
        event_loop_factory()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_run_event_loop_runs_on_the_loop_it_names(monkeypatch, loop):
    if loop == "uvloop" and not HAVE_UVLOOP:
        pytest.skip("uvloop is not installed")
    monkeypatch.setenv(EVENT_LOOP_ENV, loop)

    async def main():
        await asyncio.sleep(0)
        return running_loop_name()

    assert run_event_loop(main()) == loop


@pytest.mark.slow
@pytest.mark.beside
def test_the_proxy_and_gateway_suites_pass_on_the_other_loop():
    other = "asyncio" if HAVE_UVLOOP else "uvloop"
    if other == "uvloop":
        pytest.skip("uvloop is not installed: the suite ran on asyncio, the only loop here")
    env = {**os.environ, EVENT_LOOP_ENV: other}
    # The control APIs' conformance to their documents (schemathesis, ~70 s) does not depend on the loop: left out.
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider",
                        "tests/proxy", "tests/reference/gateway", "tests/reference/test_protocol_abuse.py",
                        "--ignore=tests/proxy/llm/test_schemathesis.py",
                        "--ignore=tests/reference/gateway/test_schemathesis.py"],
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout.splitlines()[-1], r.stdout[-500:]
