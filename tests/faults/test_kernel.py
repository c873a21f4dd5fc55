"""Kernel network faults (chaos/faults/kernel.py) on real hosts (network namespaces, root only), each verified by
what crossed the wire: the rules' own counters, the hosts' TCP counters, the bytes a shaped link carried; then
reverted, and undone from the journal alone. The hosts are made here; the target is only the layout they are in
(the faults read target.hosts and target.all_instances())."""

import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from chaos import netns as N
from chaos.experiment.model import FaultSpec
from chaos.faults import FAULT_TYPES
from chaos.faults.base import FaultContext, FaultError

pytestmark = pytest.mark.skipif(N.why_not() is not None, reason=f"cannot make hosts here: {N.why_not()}")

SINK = """import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(('0.0.0.0', 9100)); s.listen()
while True:
    c, _ = s.accept()
    mode = c.recv(1)
    if not mode:  # a probe: connected and closed
        c.close()
        continue
    if mode == b'r':  # read what comes until the peer closes, then say how much
        n = 0
        while (b := c.recv(65536)):
            n += len(b)
        c.sendall(str(n).encode())
    else:  # send N bytes
        c.sendall(b'x' * int(c.recv(32).decode()))
    c.close()
"""


@pytest.fixture(scope="module")
def hosts():
    lay = N.Layout.plan(["a", "b"], f"test-kernel-faults-{os.getpid()}")
    N.create(lay)
    sink = subprocess.Popen(N.in_ns(lay.hosts[1].netns, [sys.executable, "-c", SINK]))
    for _ in range(100):
        try:
            socket.create_connection((lay.hosts[1].address, 9100), 1).close()
            break
        except OSError:
            time.sleep(0.05)
    yield lay
    sink.kill()
    sink.wait()
    N.remove(lay.to_dict())
    assert N.leftovers(lay.tag) == []


def fault(hosts, type_, **settings):
    spec = FaultSpec.build(0, type_, 0.0, f"{type_}-test", {"host": "b", **settings})
    return FAULT_TYPES[type_](spec, SimpleNamespace(hosts=hosts, all_instances=lambda: [],
                                                    settings={"hosts": {"a": [], "b": []}}))


def in_a(hosts, code: str, timeout: float = 60) -> str:
    got = subprocess.run(N.in_ns(hosts.hosts[0].netns, [sys.executable, "-c", code]), capture_output=True,
                         text=True, timeout=timeout)
    assert got.returncode == 0, got.stderr
    return got.stdout.strip()


def upload(hosts, nbytes: int, timeout: float = 5) -> str:
    """From host a to b's sink: 'ok <bytes> <seconds>' or the error's class."""
    b = hosts.hosts[1].address
    return in_a(hosts, f"""import socket, time
t = time.monotonic()
try:
    c = socket.create_connection(('{b}', 9100), {timeout}); c.settimeout({timeout})
    c.sendall(b'r' + b'x' * {nbytes}); c.shutdown(socket.SHUT_WR)
    print('ok', c.recv(32).decode(), round(time.monotonic() - t, 3))
except OSError as e:
    print(type(e).__name__)""", timeout=timeout * 4 + 10)


def udp_to_b(hosts, n: int) -> None:
    in_a(hosts, f"import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                f"for _ in range({n}): s.sendto(b'x', ('{hosts.hosts[1].address}', 9))")


def test_packet_loss_drops_its_share_on_the_wire_and_tcp_retransmits(hosts):
    f = fault(hosts, "packet_loss", rate="20%", peer="a")
    plan = f.plan(FaultContext())
    assert plan == {"netns": hosts.hosts[1].netns, "table": "lc_packet_loss-test".replace("-", "_"), "host": "b",
                    "peer": "a"}
    f.apply(FaultContext())
    udp_to_b(hosts, 4000)
    seen, taken = f.counters()["in"]
    assert seen >= 4000 and abs(taken / seen - 0.20) < 0.04, (seen, taken)  # 6 sd of a binomial at n=4,000
    assert upload(hosts, 2_000_000, timeout=30).startswith("ok 2000000")  # TCP gets every byte through anyway
    f.revert(FaultContext())
    e = f.evidence
    assert e["taken"] > 0 and e["tcp"]["a"]["RetransSegs"] > 0, e  # the sender sent again, for real
    assert "dropped" in f.evidence_text() and "retransmitted" in f.evidence_text()
    assert "lc_packet_loss_test" not in N.sh(N.in_ns(hosts.hosts[1].netns, ["nft", "list", "tables"])).stdout
    f.revert(FaultContext())  # twice is safe


def test_partition_cuts_the_peer_off_then_heals(hosts):
    f = fault(hosts, "partition", peer="a")
    f.plan(FaultContext())
    f.apply(FaultContext())
    assert upload(hosts, 10, timeout=1.5) in ("TimeoutError", "timeout")
    f.revert(FaultContext())
    assert f.evidence["taken"] > 0 and f.evidence["taken"] == f.evidence["packets"]  # every packet, none through
    assert upload(hosts, 1000).startswith("ok 1000")


def test_tcp_reset_answers_with_resets(hosts):
    f = fault(hosts, "tcp_reset")
    f.plan(FaultContext())
    f.apply(FaultContext())
    assert upload(hosts, 10) in ("ConnectionRefusedError", "ConnectionResetError")
    f.revert(FaultContext())
    # the resets are the kernel's netfilter's, not b's TCP stack's: they show as a's connections failing
    assert f.evidence["taken"] > 0 and f.evidence["tcp"]["a"]["AttemptFails"] >= 1, f.evidence
    assert upload(hosts, 1000).startswith("ok 1000")


def test_link_rate_caps_what_the_link_carries(hosts):
    f = fault(hosts, "link_rate", rate=200)  # KB/s
    f.plan(FaultContext())
    f.apply(FaultContext())
    said = upload(hosts, 600_000, timeout=30).split()
    f.revert(FaultContext())
    assert said[:2] == ["ok", "600000"]
    # a shaper can only make it slower: at most the rate and its 20 ms burst, however busy the machine
    assert 600 / float(said[2]) <= 200 * 1.3, said
    assert f.evidence["sent_bytes"][hosts.hosts[1].veth] >= 600_000  # into b, through the bridge's shaped side
    assert "tbf" not in N.sh(N.in_ns(hosts.hosts[1].netns, ["tc", "qdisc", "show"])).stdout


def test_recover_undoes_a_fault_from_its_journaled_plan_alone(hosts):
    f = fault(hosts, "packet_loss", rate="100%")
    plan = f.plan(FaultContext())
    f.apply(FaultContext())
    assert upload(hosts, 10, timeout=1) in ("TimeoutError", "timeout")
    said = FAULT_TYPES["packet_loss"].undo_from_journal(plan)
    assert said.startswith("removed nftables table")
    assert upload(hosts, 1000).startswith("ok 1000")
    shaped = fault(hosts, "link_rate", rate=50)
    plan = shaped.plan(FaultContext())
    shaped.apply(FaultContext())
    assert "removed tbf" in FAULT_TYPES["link_rate"].undo_from_journal(plan)
    assert FAULT_TYPES["packet_loss"].undo_from_journal({"netns": "lc-000000-9", "table": "x"}).startswith("its host")


def test_netem_is_refused_at_the_start_of_a_run_where_the_kernel_has_none(hosts):
    why = N.has_netem()
    target = SimpleNamespace(settings={"hosts": {"b": ["r0"]}})
    # the file is valid (it may be meant for another machine, or for `chaos export`)
    assert FAULT_TYPES["netem"].check({"type": "netem", "host": "b", "delay": "10ms"}, target) == []
    spec = FaultSpec.build(0, "netem", 0.0, "delay-b", {"host": "b", "delay": "10ms"})
    if why is None:
        FAULT_TYPES["netem"].preflight(spec)
    else:
        with pytest.raises(FaultError, match="no netem.*latency toxic"):
            FAULT_TYPES["netem"].preflight(spec)


def test_a_host_fault_names_a_host_the_target_has():
    target = SimpleNamespace(settings={"hosts": {"edge": ["gw"], "node": ["r0"]}})
    check = FAULT_TYPES["packet_loss"].check
    assert check({"type": "packet_loss", "host": "node", "rate": "5%"}, target) == []
    assert "no host 'nowhere'" in check({"type": "packet_loss", "host": "nowhere"}, target)[0][1]
    assert "another host" in check({"type": "partition", "host": "node", "peer": "node"}, target)[0][1]
    assert "give the target hosts:" in check({"type": "partition", "host": "node"},
                                             SimpleNamespace(settings={}))[0][1]
    with pytest.raises(FaultError, match="no hosts"):
        fault(None, "partition").plan(FaultContext())
