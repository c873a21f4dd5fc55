"""`chaos load --replay --scrub`: every replayed request is scrubbed before it is sent or stored. A log whose every
line carries credentials and personal data is replayed against a real server on loopback that keeps the bytes it
received; none of those values reach it, nor any file of the output, and the summary counts what was redacted
per kind. Without --scrub the same server does receive them: the needles are real."""

import json
import os
import subprocess
import sys

from ..secretscan import ArgvWatch
from .pii_log import NEEDLES, leaks, write_pii_log
from .scripted_server import ScriptedServer

EXPECTED = {"api_key": 24, "authorization": 12, "card": 12, "email": 24, "id_card": 12, "ipv4": 12, "phone": 24}


class RecordingServer(ScriptedServer):
    def __init__(self):
        super().__init__("ok", tokens=1)
        self.bodies: list[bytes] = []

    async def _respond(self, writer, body, headers):
        self.bodies.append(json.dumps(body, ensure_ascii=False).encode() + json.dumps(headers).encode())
        return await super()._respond(writer, body, headers)


def _replay(url, log, out, *extra):
    return subprocess.run([sys.executable, "-m", "chaos", "load", url, "--replay", str(log), "--replay-speed", "8",
                           "--duration", "20s", "--out", str(out), "--interval", "0", *extra],
                          capture_output=True, text=True, timeout=90)


def test_a_scrubbed_replay_sends_and_stores_no_secret_and_counts_each_kind(tmp_path):
    log = tmp_path / "pii.jsonl"
    n = write_pii_log(log)
    out = tmp_path / "out"
    with RecordingServer() as srv, ArgvWatch(*NEEDLES) as argv:
        p = _replay(srv.url, log, out, "--scrub")
        received = list(srv.bodies)
    assert p.returncode == 0, p.stdout + p.stderr
    assert len(received) == n
    assert argv.looked > 3 and argv.leaks == []  # no process was handed a value on its command line
    for b in received:  # scrubbed before it was sent: the placeholders went instead
        assert not [x for x in NEEDLES if x.encode() in b]
        for kind in ("[email]", "[phone]", "[id_card]", "[card]", "[ipv4]", "[api_key]"):
            assert kind.encode() in b
    assert leaks(out) == []  # nor stored, in any encoding: every file of the output, records and Locust's files
    assert not [x for x in NEEDLES if x in p.stdout + p.stderr]
    summary = json.load(open(os.path.join(out, "summary.json")))
    assert summary["scrub"] == {**EXPECTED, "total": sum(EXPECTED.values())}
    assert f"scrub: {sum(EXPECTED.values())} values redacted" in p.stdout
    assert "email 24" in p.stdout and "phone 24" in p.stdout
    records = [json.loads(line) for line in open(os.path.join(out, "requests.jsonl"))]
    assert sorted(r["source_line"] for r in records) == list(range(1, n + 1))
    assert all(r["scrubbed"]["email"] == 2 for r in records)


def test_without_scrub_the_server_receives_the_values(tmp_path):
    log = tmp_path / "pii.jsonl"
    write_pii_log(log, n=3)
    with RecordingServer() as srv:
        p = _replay(srv.url, log, tmp_path / "out")
        received = b"".join(srv.bodies)
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(x.encode() in received for x in ("alice.smith@example-corp.com", "4111 1111 1111 1111",
                                                "11010519491231002X", "203.0.113.42"))
    assert json.load(open(tmp_path / "out" / "summary.json"))["scrub"] is None
