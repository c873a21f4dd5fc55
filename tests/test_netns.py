"""Hosts as network namespaces (chaos/netns.py): the layout a run plans, made and removed for real (root only: the
tests that make namespaces skip with the reason where this process cannot)."""

import ipaddress
import os
import subprocess
import sys

import pytest

from chaos import netns as N


def test_a_layout_is_planned_from_the_run_with_names_the_kernel_takes():
    a = N.Layout.plan(["edge", "node-a"], "/runs/one", {"gw": "edge", "r0": "node-a"})
    assert a == N.Layout.plan(["edge", "node-a"], "/runs/one", {"gw": "edge", "r0": "node-a"})  # the seed decides
    assert a.tag != N.Layout.plan(["edge"], "/runs/two").tag
    net = ipaddress.ip_network(a.subnet)
    assert net.prefixlen == 24 and net.subnet_of(N.SUBNETS)
    assert [h.address for h in a.hosts] == [str(net.network_address + 2), str(net.network_address + 3)]
    assert a.gateway_address == str(net.network_address + 1)
    names = [a.bridge] + [h.netns for h in a.hosts] + [h.veth for h in a.hosts]
    assert all(n.startswith(f"lc-{a.tag}-") and len(n) <= 15 for n in names)  # IFNAMSIZ
    assert N.Layout.from_dict(a.to_dict()) == a and a.host("node-a").index == 1
    with pytest.raises(N.HostsError, match="no host 'nope'"):
        a.host("nope")
    for bad in (["Edge"], ["a", "a"], [], ["x" * 25]):
        with pytest.raises(N.HostsError):
            N.Layout.plan(bad, "s")


def test_a_layout_keeps_clear_of_the_machines_networks(monkeypatch):
    first = N.Layout.plan(["a"], "seed")
    monkeypatch.setattr(N, "used_networks", lambda: [ipaddress.ip_network(first.subnet)])
    assert N.Layout.plan(["a"], "seed").subnet != first.subnet


def test_placement_puts_every_instance_on_one_host():
    ids = ["r0", "r1", "gw"]
    assert N.placement({"edge": ["gw"], "n": ["r0", "r1"]}) == {"gw": "edge", "r0": "n", "r1": "n"}
    assert N.placement_problems({"edge": ["gw"], "n": ["r0", "r1"]}, ids) == []
    got = N.placement_problems({"edge": ["gw", "r0"], "n": ["r0", "r7"]}, ids)
    assert (("n", 0), "r0 is on host edge already: an instance runs on one host") in got
    assert any(path == ("n", 1) and "no instance 'r7'" in m for path, m in got)
    assert any(path == () and "r1 on no host" in m for path, m in got)


needs_root = pytest.mark.skipif(N.why_not() is not None, reason=f"cannot make hosts here: {N.why_not()}")


def in_host(netns: str, code: str, timeout: float = 20) -> subprocess.CompletedProcess:
    return subprocess.run(N.in_ns(netns, [sys.executable, "-c", code]), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture
def layout():
    lay = N.Layout.plan(["a", "b"], f"test-netns-{id(object())}")
    N.create(lay)
    yield lay
    N.remove(lay.to_dict())


@needs_root
def test_hosts_have_their_own_stack_and_reach_each_other_over_the_bridge(layout):
    a, b = layout.hosts
    server = subprocess.Popen(N.in_ns(b.netns, [sys.executable, "-c", (
        "import socket\ns = socket.socket(); s.bind(('0.0.0.0', 9000)); s.listen()\n"
        "for _ in range(2):\n    c, peer = s.accept(); c.sendall(peer[0].encode()); c.close()")]))
    try:
        got = in_host(a.netns, "import socket, time\nfor _ in range(50):\n    try:\n"
                               f"        c = socket.create_connection(('{b.address}', 9000), 1); break\n"
                               "    except OSError: time.sleep(0.1)\nprint(c.recv(64).decode())")
        assert got.stdout.strip() == a.address, got.stderr  # b saw a's own address: a separate host
        import socket
        with socket.create_connection((b.address, 9000), 5) as c:  # the runner, from the root namespace
            assert c.recv(64).decode() == layout.gateway_address
        server.wait(10)
    finally:
        server.kill()
    # a host's loopback is its own: nothing listens on b's port 9000 in a
    assert "refused" in in_host(a.netns, "import socket\ntry:\n    socket.create_connection(('127.0.0.1', 9000), 1)"
                                         "\nexcept OSError as e: print('refused', e)").stdout
    assert N.link_counters(b.netns)["rx_packets"] > 0 and N.tcp_counters(b.netns)["PassiveOpens"] >= 2


@needs_root
def test_remove_takes_exactly_the_runs_own_and_may_be_asked_twice():
    pid = os.getpid()
    one, two = N.Layout.plan(["a"], f"test-netns-one-{pid}"), N.Layout.plan(["a", "b"], f"test-netns-two-{pid}")
    N.create(one)
    N.create(two)
    try:
        assert len(N.leftovers(one.tag)) == 3 and len(N.leftovers(two.tag)) == 5
        removed = N.remove(one.to_dict())
        assert f"namespace {one.hosts[0].netns}" in removed and f"bridge {one.bridge}" in removed
        assert N.leftovers(one.tag) == [] and len(N.leftovers(two.tag)) == 5
        assert N.remove(one.to_dict()) == []
        assert N.remove({"tag": "../etc", "hosts": [{"netns": "default"}]}) == []  # nothing not of a run's tag
    finally:
        N.remove(two.to_dict())
    assert N.leftovers(two.tag) == []


@needs_root
def test_a_failure_part_way_removes_what_was_made(monkeypatch):
    lay = N.Layout.plan(["a", "b"], f"test-netns-partial-{os.getpid()}")
    real = N.sh

    def refuse_second_veth(cmd, *a, **k):
        if cmd[:3] == ["ip", "link", "add"] and cmd[3] == lay.hosts[1].veth:
            raise N.HostsError("refused for the test")
        return real(cmd, *a, **k)

    monkeypatch.setattr(N, "sh", refuse_second_veth)
    with pytest.raises(N.HostsError, match="refused for the test"):
        N.create(lay)
    monkeypatch.setattr(N, "sh", real)
    assert N.leftovers(lay.tag) == []
