"""The abnormal batch against real tiny reference replicas: every case judged, and a replica wedged by one class of
input (the reference server's wedge_on hook) named with the case after which it stopped answering, without the
batch waiting out a timeout for every case left."""

import json
import time
import urllib.error
import urllib.request

import pytest

from chaos.common import FAULT_TOKEN_HEADER
from chaos.reference.launcher import start_server
from chaos.selftest.abnormal import abnormal_cases
from chaos.selftest.batch import Destination, family_of, send_batch, serves_again

M = "chaos-reference"


def faults(server, method: str, body: dict | None = None):
    req = urllib.request.Request(server.base_url + "/admin/faults", method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Content-Type": "application/json",
                                          FAULT_TOKEN_HEADER: server.fault_token})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def shared_replica():
    """For the tests that leave it as they found it (no hook armed): one server, started once."""
    s = start_server(["--preset", "tiny", "--enable-fault-hooks", "--threads", "1"])
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def replica():
    """A replica of its own, for a test that wedges it for good (only a restart clears that)."""
    s = start_server(["--preset", "tiny", "--enable-fault-hooks", "--threads", "1"])
    try:
        yield s
    finally:
        s.stop()


def special_cases():
    return [c for c in abnormal_cases(0, M, 1024) if family_of(c.name) == "special"]


def test_a_healthy_replica_answers_every_special_case_and_serves_after(shared_replica):
    dest = Destination("r0", shared_replica.base_url)
    b = send_batch(special_cases(), dest, M, workers=2, timeout=10)
    assert b.not_sent == 0 and b.stopped_after is None
    assert [r.problem for r in b.failed] == []
    d = b.to_dict()
    assert d["sent"] == len(special_cases()) and d["families"] == {"special": {"cases": d["sent"], "passed": d["sent"]}}
    row = next(r for r in d["results"] if r["case"] == "special/lone-high-surrogate/chat")
    assert (row["expected"], row["observed"], row["observed_code"], row["pass"]) == ([400], 400, "invalid_unicode",
                                                                                     True)
    assert serves_again(dest, M, within_s=10, timeout=5)[0]


def test_wedge_on_rejects_an_unknown_class(shared_replica):
    status, body = faults(shared_replica, "POST", {"wedge_on": "tabs"})
    assert status == 400 and body["error"]["param"] == "wedge_on"


@pytest.mark.slow
def test_a_wedged_replica_is_named_with_the_case_and_stays_wedged_after_revert(replica):
    assert faults(replica, "POST", {"wedge_on": "nul"})[0] == 200
    dest = Destination("r0", replica.base_url)
    cases = special_cases()
    t0 = time.monotonic()
    b = send_batch(cases, dest, M, workers=1, timeout=3)
    took = time.monotonic() - t0
    assert b.stopped_after == "special/nul-inside/completions", [r.row() for r in b.failed]
    assert b.not_sent > 0 and b.results[-1].case.name in ("special/nul-inside/completions", "special/nul-inside/chat")
    # every case before the NUL one was answered right: the wedge came with that class of input, not before
    first = [c.name for c in cases].index("special/nul-inside/completions")
    assert first >= 2 and all(r.problem is None for r in b.results[:first])
    # it did not wait out a timeout for each of the cases left (3 s each, 40-odd of them)
    assert took < 3 * 10, took
    status, state = faults(replica, "GET")
    assert state["wedged_by"] == "nul"
    assert faults(replica, "DELETE")[0] == 200  # disarmed, not unwedged: only a restart clears it
    with urllib.request.urlopen(replica.base_url + "/health", timeout=5) as r:
        assert r.status == 200  # it looks alive: the seed's replica that answered health checks and nothing else
    assert serves_again(dest, M, within_s=4, timeout=2)[0] is False


def test_the_names_of_families_and_wedge_classes_agree_everywhere():
    """The schema spells out what it cannot import cheaply; the families name every generated case."""
    from chaos.experiment.schema import FAULTS
    from chaos.faults.inputs import FAMILIES
    from chaos.reference.faults import WEDGE_CLASSES

    assert {c.name.split("/", 1)[0] for c in abnormal_cases(0, M, 1024)} == set(FAMILIES) - {"hostile"}
    assert FAULTS["server_hook"]["properties"]["wedge_on"]["enum"] == sorted(WEDGE_CLASSES)
    assert FAULTS["abnormal_inputs"]["properties"]["cases"]["items"]["enum"] == list(FAMILIES)
