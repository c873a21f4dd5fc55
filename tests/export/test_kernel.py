"""The kernel faults (chaos/faults/kernel.py) in the export: a host of the target's hosts: is the pods of the
instances on it, each found as an instance's are (--instance, else the replicas); a fault's peer is the
NetworkChaos's target. Built from targets/hosts.yaml (edge: gw, node-a: r0, node-b: r1)."""

import os

import pytest

from chaos.errors import InputError
from chaos.export import schemas
from chaos.export.beside import how
from chaos.export.chaosmesh import LEFT_OUT, Injection, Left, map_faults

from .conftest import config

HOSTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "targets",
                     "hosts.yaml")
PINNED = ["gw=app=gateway", "r0=llm-0", "r1=llm-1"]
GATEWAY = {"selector": {"namespaces": ["ns"], "labelSelectors": {"app": "gateway"}}, "mode": "all"}


def pod(name):
    return {"selector": {"pods": {"ns": [name]}}, "mode": "all"}


def one(make_exp, fault, pinned=PINNED, target=HOSTS):
    exp = make_exp([{"at": "10s", **fault}], target=target)
    done, left = map_faults(exp, config(instances=pinned))
    out = (done or left)[0]
    if isinstance(out, Injection):  # every one a valid NetworkChaos
        doc = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "NetworkChaos",
               "metadata": {"name": "x", "namespace": "ns"}, "spec": {**out.spec, "duration": "10s"}}
        assert schemas.problems(doc) == []
    return out


def test_packet_loss_is_netem_loss_both_ways_with_the_peer_host_s_pods_as_target(make_exp):
    inj = one(make_exp, {"type": "packet_loss", "host": "node-b", "peer": "edge", "rate": "5%", "duration": "15s"})
    assert inj.kind == "NetworkChaos" and (inj.at, inj.lasts) == (10, 15)
    assert inj.spec == {**pod("llm-1"), "action": "loss", "loss": {"loss": "5", "correlation": "0"},
                        "target": GATEWAY, "direction": "both"}
    alone = one(make_exp, {"type": "packet_loss", "host": "node-b", "rate": "0.25%"})
    assert alone.spec["loss"]["loss"] == "0.25" and alone.spec["direction"] == "to" and "target" not in alone.spec
    assert alone.lasts == 50 and any("half as many" in n for n in alone.notes)  # one way, not both


def test_partition_drops_between_host_and_peer_or_without_a_peer_everything_in_and_out(make_exp):
    inj = one(make_exp, {"type": "partition", "host": "node-a", "peer": "node-b", "duration": "5s"})
    assert inj.spec == {**pod("llm-0"), "action": "partition", "target": pod("llm-1"), "direction": "both"}
    alone = one(make_exp, {"type": "partition", "host": "edge"})
    assert alone.spec == {**GATEWAY, "action": "partition", "direction": "both"}  # no target: every packet
    assert any("without a target" in n and "kubelet's probes" in n for n in alone.notes)


def test_link_rate_is_the_bandwidth_toxic_s_tbf_on_what_the_host_s_pods_send(make_exp):
    inj = one(make_exp, {"type": "link_rate", "host": "edge", "rate": 100, "duration": "20s"})
    assert inj.spec == {**GATEWAY, "action": "bandwidth", "direction": "to",
                        "bandwidth": {"rate": "800kbit", "limit": 100_000, "buffer": 10_000}}  # as bandwidth's
    assert any("shapes no ingress" in n for n in inj.notes)


def test_netem_is_delay_with_jitter_and_reorder_duplicate_and_corrupt_in_one_netem_action(make_exp):
    inj = one(make_exp, {"type": "netem", "host": "node-a", "delay": "50ms", "jitter": "10ms", "reorder": "25%",
                         "duplicate": "1%", "corrupt": "0.5%", "duration": "10s"})
    assert inj.spec == {**pod("llm-0"), "action": "netem", "direction": "to",
                        "delay": {"latency": "50ms", "correlation": "0", "jitter": "10ms",
                                  "reorder": {"reorder": "25", "correlation": "0", "gap": 1}},
                        "duplicate": {"duplicate": "1", "correlation": "0"},
                        "corrupt": {"corrupt": "0.5", "correlation": "0"}}
    delay = one(make_exp, {"type": "netem", "host": "node-a", "delay": "200ms"})
    assert delay.spec["action"] == "delay" and delay.spec["delay"] == {"latency": "200ms", "correlation": "0"}
    dup = one(make_exp, {"type": "netem", "host": "node-a", "duplicate": "2%"})
    assert dup.spec["action"] == "duplicate" and "delay" not in dup.spec


def test_netem_reorder_without_a_delay_and_netem_with_nothing_are_left_out(make_exp):
    reorder = one(make_exp, {"type": "netem", "host": "node-a", "reorder": "25%"})
    assert isinstance(reorder, Left) and not reorder.beside and "without a delay" in reorder.why
    nothing = one(make_exp, {"type": "netem", "host": "node-a", "jitter": "5ms"})
    assert isinstance(nothing, Left) and "nothing to inject" in nothing.why


def test_tcp_reset_is_not_exported_and_runs_as_root_on_its_own_hosts(make_exp):
    exp = make_exp([{"type": "tcp_reset", "at": "10s", "host": "node-b", "peer": "edge"}], target=HOSTS)
    done, left = map_faults(exp, config(instances=PINNED))
    assert done == [] and left[0].why == LEFT_OUT["tcp_reset"][0] and not left[0].beside
    assert "no NetworkChaos action resets TCP" in left[0].why
    assert "as root" in how(exp, config(), left[0], "out") and exp.path in how(exp, config(), left[0], "out")


def test_a_host_s_instances_unpinned_are_any_of_the_replicas_and_a_shared_pick_is_said(make_exp):
    inj = one(make_exp, {"type": "partition", "host": "node-a", "peer": "node-b"}, pinned=["gw=app=gateway"])
    assert inj.spec["mode"] == "one" and inj.spec["target"]["mode"] == "one"
    assert any("may pick the same pod" in n for n in inj.notes)
    with pytest.raises(InputError, match=r"gw.*--instance gw="):  # the gateway is no replica: it must be pinned
        one(make_exp, {"type": "link_rate", "host": "edge", "rate": 10}, pinned=[])


def test_a_host_with_several_instances_selects_them_all(make_exp):
    target = {"kind": "reference", "replicas": 2, "gateway": {}, "hosts": {"edge": ["gw"], "node": ["r0", "r1"]}}
    fault = {"type": "packet_loss", "host": "node", "peer": "edge", "rate": "1%"}
    named = one(make_exp, fault, target=target)
    assert (named.spec["selector"], named.spec["mode"]) == ({"pods": {"ns": ["llm-0", "llm-1"]}}, "all")
    anyof = one(make_exp, fault, pinned=["gw=app=gateway"], target=target)
    assert (anyof.spec["mode"], anyof.spec["value"]) == ("fixed", "2")  # two pods of the replicas
    label = one(make_exp, fault, pinned=["gw=app=gateway", "r0=tier=gpu", "r1=tier=gpu"], target=target)
    assert label.spec["selector"] == {"namespaces": ["ns"], "labelSelectors": {"tier": "gpu"}}
    with pytest.raises(InputError, match="cannot join"):
        one(make_exp, fault, pinned=["gw=app=gateway", "r0=llm-0", "r1=tier=gpu"], target=target)
