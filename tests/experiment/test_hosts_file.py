"""A target's hosts: (docs/hosts.md) as `chaos validate` and a run read them: every instance on one host, commands
that listen on {host}, no proxy between hosts, the load's processes only where the load has them; each problem at
its line."""

import pytest

from chaos.experiment.loader import ExperimentError
from chaos.experiment.model import load_experiment


def problems(tmp_path, target: str, load: str = "{workload: chat, users: 2, duration: 10s}",
             faults: str = "") -> list[str]:
    p = tmp_path / "e.yaml"
    p.write_text(f"name: t\ntarget:\n{target}\nload: {load}\n{faults}")
    try:
        load_experiment(str(p))
    except ExperimentError as e:
        return e.problems
    return []


REFERENCE = """  kind: reference
  replicas: 2
  gateway: {retries: 1}
  hosts:
    edge: [gw]
    node-a: [r0]
    node-b: [r1]"""


def test_a_reference_target_on_hosts_is_valid_and_its_instances_are_placed(tmp_path):
    assert problems(tmp_path, REFERENCE) == []
    exp = load_experiment(str(tmp_path / "e.yaml"))
    assert exp.target.settings["hosts"] == {"edge": ["gw"], "node-a": ["r0"], "node-b": ["r1"]}


def test_an_instance_left_off_placed_twice_or_unknown_is_said_at_its_line(tmp_path):
    got = problems(tmp_path, REFERENCE.replace("node-b: [r1]", "node-b: [r0, r7]"))
    assert any("e.yaml:9:14: target.hosts.node-b[0]: r0 is on host node-a already" in p for p in got), got
    assert any("no instance 'r7'" in p for p in got), got
    assert any("r1 on no host" in p for p in got), got


def test_a_proxy_between_hosts_is_refused_with_what_to_use(tmp_path):
    got = problems(tmp_path, REFERENCE, faults="faults:\n  - {type: latency, at: 1s, link: r1, latency: 50ms}\n")
    assert len(got) == 1 and "link r1 runs between hosts" in got[0] and "packet_loss" in got[0]
    client = "faults:\n  - {type: latency, at: 1s, link: client, latency: 5ms}\n"
    assert problems(tmp_path, REFERENCE, faults=client) == []


def test_a_kernel_fault_names_a_host_of_the_target(tmp_path):
    got = problems(tmp_path, REFERENCE, faults="faults:\n  - {type: packet_loss, at: 1s, host: node-c, rate: 5%}\n")
    assert len(got) == 1 and "no host 'node-c'" in got[0] and "edge, node-a, node-b" in got[0]
    got = problems(tmp_path, "  {kind: reference}", faults="faults:\n  - {type: partition, at: 1s, host: a}\n")
    assert len(got) == 1 and "give the target hosts:" in got[0]


@pytest.mark.parametrize("kind", ["process", "stack"])
def test_a_command_on_a_host_must_listen_on_its_address(tmp_path, kind):
    if kind == "process":
        target = """  kind: process
  command: python -m chaos reference serve --port {port}
  hosts: {a: [p0]}"""
    else:
        target = """  kind: stack
  model: m
  replica: {command: "python -m chaos reference serve --port {port}"}
  hosts: {a: [r0]}"""
    got = problems(tmp_path, target)
    assert len(got) == 1 and "must listen on {host}" in got[0], got
    assert problems(tmp_path, target.replace("--port {port}", "--host {host} --port {port}")) == []


def test_the_loads_processes_may_be_placed_where_the_load_has_them(tmp_path):
    fleet = REFERENCE + "\n    load-a: [master, w0]\n    load-b: [w1]"
    assert problems(tmp_path, fleet, load="{workload: chat, users: 2, duration: 10s, workers: 2}") == []
    got = problems(tmp_path, fleet, load="{workload: chat, users: 2, duration: 10s, workers: 1}")
    assert len(got) == 1 and "places w1 on host load-b, but the load has 1 Locust workers" in got[0], got
    got = problems(tmp_path, fleet)
    assert got and all("give load.workers:" in p for p in got), got
