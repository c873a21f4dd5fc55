"""Each network and LLM fault type, as an experiment file writes it, is what the proxies accept: every fault type's
rule is taken by a real LLM proxy, and every toxic lands on a real bundled Toxiproxy server with the attributes
in Toxiproxy's units. Together with the schema (built from the same tables), a fault that validates is a fault
that can be applied."""

import json
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from chaos.experiment.model import FaultSpec
from chaos.faults.llm import LLM_FAULT_TYPES
from chaos.faults.network import NETWORK_FAULTS
from chaos.proxy.llm import LLMProxy
from chaos.targets.toxiproxy_api import ToxiproxyAPI

SAMPLE = {"after_tokens": 3, "stall_for": "2s", "text": "x", "rate": 500, "delay": "150ms", "latency": "200ms",
          "jitter": "50ms", "timeout": "1.5s", "average_size": 64, "size_variation": 8, "bytes": 1000,
          "retry_after": "2s", "status": 503, "length": 2, "factor": 3, "kind": "truncated", "max": "30s",
          "where": "before_headers"}


def _spec(cls, **extra):
    from chaos.faults import llm, network

    table = (llm.LLM_FAULTS[cls.type][1] if cls.type in llm.LLM_FAULTS else network.TOXICS.get(cls.type, {}))
    params = {k: SAMPLE[k] for k in table if k in SAMPLE}
    return FaultSpec.build(0, cls.type, 5.0, f"{cls.type}#0", {**params, **extra})


@pytest.mark.parametrize("cls", LLM_FAULT_TYPES, ids=lambda c: c.type)
def test_every_llm_fault_is_a_rule_the_proxy_takes(cls):
    fault = cls(_spec(cls, probability="50%", seed=3, count=4, match={"stream": True}), target=None)
    proxy = LLMProxy("http://127.0.0.1:9")
    rule = proxy.add_rule(fault.rule).to_dict()
    assert rule["name"] == f"{cls.type}_0" and rule["effect"] == fault.effect  # '#' is not a name's character
    for k, v in fault.params.items():
        assert rule["params"][k] == v, (k, rule)
    assert rule["probability"] == 0.5 and rule["count"] == 4


def test_durations_reach_the_proxy_in_seconds():
    stall = next(c for c in LLM_FAULT_TYPES if c.type == "stream_stall")
    assert stall(_spec(stall), None).params == {"after_tokens": 3, "for_s": 2.0}


@pytest.fixture(scope="module")
def toxiproxy():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "proxy", "serve", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/version", timeout=1).read()
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    yield ToxiproxyAPI(url)
    proc.terminate()
    proc.wait(10)


EXPECTED = {"latency": {"latency": 200, "jitter": 50}, "bandwidth": {"rate": 500}, "slow_close": {"delay": 150},
            "timeout": {"timeout": 1500}, "reset_peer": {"timeout": 1500},
            "slicer": {"average_size": 64, "size_variation": 8, "delay": 150_000}, "limit_data": {"bytes": 1000}}


@pytest.mark.parametrize("cls", [c for c in NETWORK_FAULTS if c.type != "link_down"], ids=lambda c: c.type)
def test_every_toxic_lands_in_toxiproxys_units(cls, toxiproxy):
    fault = cls(_spec(cls, stream="upstream", toxicity="25%"), target=None)
    name = f"t-{cls.type}"
    toxiproxy.create_proxy(name, "127.0.0.1:9")
    try:
        toxiproxy.add_toxic(name, fault.toxic_name, fault.toxic, fault.stream, fault.toxicity, fault.attributes)
        with urllib.request.urlopen(f"{toxiproxy.url}/proxies/{name}/toxics", timeout=5) as r:
            toxics = json.loads(r.read())
        assert [(t["name"], t["type"], t["stream"], t["toxicity"]) for t in toxics] == [
            (f"{cls.type}_0", cls.type, "upstream", 0.25)]
        assert {k: toxics[0]["attributes"][k] for k in EXPECTED[cls.type]} == EXPECTED[cls.type]
        assert toxiproxy.remove_toxic(name, fault.toxic_name) and not toxiproxy.remove_toxic(name, fault.toxic_name)
    finally:
        toxiproxy.delete_proxy(name)
