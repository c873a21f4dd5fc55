"""chaos/export/schemas.py and kubeschemas.py: a right object passes, and each rule the docs and webhooks give
refuses a wrong one, so the export's validation can fail."""

import copy

import pytest

from chaos.export import kubeschemas, schemas

SELECTOR = {"namespaces": ["ns"], "labelSelectors": {"app": "llm"}}
POD_KILL = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "PodChaos",
            "metadata": {"name": "kill-r1", "namespace": "ns"},
            "spec": {"selector": SELECTOR, "mode": "one", "action": "pod-kill", "gracePeriod": 0}}
DELAY = {"selector": SELECTOR, "mode": "all", "action": "delay", "delay": {"latency": "200ms", "jitter": "100ms"},
         "direction": "to"}
WORKFLOW = {"apiVersion": "chaos-mesh.org/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "exp", "namespace": "ns"},
            "spec": {"entry": "exp", "templates": [
                {"name": "exp", "templateType": "Serial", "children": ["wait", "jitter"]},
                {"name": "wait", "templateType": "Suspend", "deadline": "15s"},
                {"name": "jitter", "templateType": "NetworkChaos", "deadline": "15s", "networkChaos": DELAY}]}}


def bad(doc, path, value=None, drop=False):
    """A copy of doc with the value at path replaced (or dropped)."""
    doc = copy.deepcopy(doc)
    *head, last = path
    node = doc
    for key in head:
        node = node[key]
    if drop:
        del node[last]
    else:
        node[last] = value
    return doc


def test_right_objects_pass():
    assert schemas.problems(POD_KILL) == []
    assert schemas.problems(WORKFLOW) == []


def test_a_pod_chaos_without_a_selector_is_refused():
    found = schemas.problems(bad(POD_KILL, ("spec", "selector"), drop=True))
    assert any("'selector' is a required property" in p for p in found)


def test_a_bad_action_is_refused():
    found = schemas.problems(bad(POD_KILL, ("spec", "action"), "pod-freeze"))
    assert any(p.startswith("spec.action:") and "pod-freeze" in p for p in found)


@pytest.mark.parametrize("path, value, drop", [
    (("spec", "selector"), {}, False),  # an empty selector takes every pod
    (("spec", "mode"), "fixed", False),  # fixed needs a value
    (("spec", "gracePeriod"), -1, False),
    (("metadata", "name"), "Kill_R1", False),  # not DNS-1123
    (("metadata", "namespace"), None, True),
    (("spec", "duration"), "15 seconds", False),
])
def test_each_pod_chaos_rule_refuses_its_wrong_value(path, value, drop):
    assert schemas.problems(bad(POD_KILL, path, value, drop))


def test_a_standalone_pod_failure_needs_a_duration():
    failure = bad(POD_KILL, ("spec", "action"), "pod-failure")
    assert schemas.problems(failure) and schemas.problems(bad(failure, ("spec", "duration"), "10s")) == []


def network(spec):
    return {**POD_KILL, "kind": "NetworkChaos", "spec": spec}


def test_network_chaos_rules():
    assert schemas.problems(network(DELAY)) == []
    assert schemas.problems(network({**DELAY, "delay": {"latency": "0.2s "}}))  # the CRD's latency pattern
    loss = {"selector": SELECTOR, "mode": "all", "action": "loss"}
    assert any("'loss' is a required property" in p for p in schemas.problems(network(loss)))  # its settings
    assert schemas.problems(network({**loss, "loss": {"loss": "100"}})) == []
    assert schemas.problems(network({**loss, "loss": {"loss": "101"}}))
    # outside a partition, from and both need a target (Chaos Mesh's webhook)
    assert schemas.problems(network({**DELAY, "direction": "from"}))
    target = {"selector": SELECTOR, "mode": "all"}
    assert schemas.problems(network({**DELAY, "direction": "from", "target": target})) == []
    part = {"selector": SELECTOR, "mode": "all", "action": "partition", "direction": "both"}
    assert schemas.problems(network(part)) == []
    bw = {"selector": SELECTOR, "mode": "all", "action": "bandwidth"}
    assert schemas.problems(network({**bw, "bandwidth": {"rate": "800kbit", "limit": 1, "buffer": 1}})) == []
    assert schemas.problems(network({**bw, "bandwidth": {"rate": "800 KB/s", "limit": 1, "buffer": 1}}))
    assert schemas.problems(network({**bw, "bandwidth": {"rate": "1.5mbps", "limit": 1, "buffer": 1}}))
    assert schemas.problems(network({**bw, "bandwidth": {"rate": "1mbps", "limit": 0, "buffer": 1}}))


def test_http_chaos_rules():
    ok = {"selector": SELECTOR, "mode": "all", "target": "Request", "port": 8000, "abort": True}
    http = {**POD_KILL, "kind": "HTTPChaos"}
    assert schemas.problems({**http, "spec": ok}) == []
    assert schemas.problems({**http, "spec": {**ok, "port": 0}})  # the webhook refuses a port of 0
    assert schemas.problems({**http, "spec": {**ok, "target": "Both"}})
    assert schemas.problems({**http, "spec": {k: v for k, v in ok.items() if k != "abort"}})  # no action
    assert schemas.problems({**http, "spec": {**ok, "replace": {"body": "not base64!"}}})


def test_workflow_rules_the_schema_and_the_cross_references():
    templates = ("spec", "templates")
    assert schemas.problems(bad(WORKFLOW, (*templates, 1, "deadline"), drop=True))  # a Suspend needs one
    chaos_with_duration = bad(WORKFLOW, (*templates, 2, "networkChaos"), {**DELAY, "duration": "15s"})
    assert schemas.problems(chaos_with_duration)  # a workflow's chaos lasts its deadline, never a duration
    assert schemas.problems(bad(WORKFLOW, (*templates, 2, "deadline"), drop=True))  # it would never end
    assert any("child 'jitter2'" in p for p in schemas.problems(bad(WORKFLOW, (*templates, 0, "children"),
                                                                    ["wait", "jitter2"])))
    assert any("entry" in p for p in schemas.problems(bad(WORKFLOW, ("spec", "entry"), "nope")))
    twice = bad(WORKFLOW, (*templates, 1, "name"), "jitter")
    assert any("twice" in p for p in schemas.problems(twice))


def test_a_schedule_of_a_workflow_is_named_in_51_characters():
    sched = {**WORKFLOW, "kind": "Schedule",
             "spec": {"schedule": "0 3 * * 1", "type": "Workflow", "workflow": WORKFLOW["spec"]}}
    assert schemas.problems(sched) == []
    assert schemas.problems(bad(sched, ("metadata", "name"), "x" * 52))
    assert schemas.problems(bad(sched, ("spec", "workflow"), drop=True))
    assert schemas.problems(bad(sched, ("spec", "concurrencyPolicy"), "Replace"))  # Chaos Mesh: Forbid, Allow


JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "load", "namespace": "ns"},
       "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
           {"name": "locust", "image": "llm-chaos:0.1.0",
            "env": [{"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "s", "key": "KEY"}}}]}]}}}}


def test_kubernetes_rules():
    assert kubeschemas.problems(JOB) == []
    containers = ("spec", "template", "spec", "containers")
    assert kubeschemas.problems(bad(JOB, ("spec", "template", "spec", "restartPolicy"), "Always"))
    both = bad(JOB, (*containers, 0, "env", 0, "value"), "sk-...")  # a value and a Secret: one or the other
    assert kubeschemas.problems(both)
    assert kubeschemas.problems(bad(JOB, ("metadata", "name"), "x" * 64))
    big = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"},
           "data": {"log.jsonl": "x" * 1_100_000}}
    assert any("more than a ConfigMap holds" in p for p in kubeschemas.problems(big))
    assert kubeschemas.problems({**JOB, "kind": "Deployment"})


def test_a_netem_action_needs_one_of_its_parts_and_a_reorder_its_gap():
    netem = {"selector": SELECTOR, "mode": "all", "action": "netem", "direction": "to"}
    assert schemas.problems(network(netem))  # the controller refuses a netem with nothing to merge
    both = {**netem, "delay": {"latency": "50ms", "reorder": {"reorder": "25", "correlation": "0", "gap": 1}},
            "duplicate": {"duplicate": "1", "correlation": "0"}}
    assert schemas.problems(network(both)) == []
    assert schemas.problems(network(bad(both, ("delay", "reorder", "gap"), drop=True)))  # the CRD requires gap
