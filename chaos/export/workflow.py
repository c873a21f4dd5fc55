"""The faults' schedule inside a run as a Chaos Mesh Workflow, and a game day's repetition as a Schedule of it.

A run applies each fault at its `at` (seconds after the load starts) and reverts it after its duration. A
Workflow says exactly that: one Parallel entry with a branch per fault, each branch a Serial of a Suspend (the
wait until `at`) and the fault's own step, whose deadline is how long the fault lasts (Chaos Mesh refuses a
duration inside a workflow's chaos: the deadline is the duration). A Schedule alone cannot: it fires on a cron
expression, every fault at once, with nothing to place one 15 s after the load. So a single run is a Workflow
(its clock starts when it is created), and --schedule wraps that Workflow in a Schedule (type Workflow) that
starts it on the cron, as `chaos gameday --every` starts a suite; the load then goes as a CronJob on the same
cron (chaos.export.locust).
"""

from __future__ import annotations

from .chaosmesh import Injection
from .kube import EXPERIMENT_LABEL, MANAGED_BY, go_duration, object_name

API = "chaos-mesh.org/v1alpha1"
EMBED = {"PodChaos": "podChaos", "NetworkChaos": "networkChaos", "HTTPChaos": "httpChaos"}
# Chaos Mesh appends 6 characters to a Schedule's name for each workflow it starts (its docs: at most 51)
SCHEDULE_NAME_MAX = 51


def templates(entry: str, injections: list[Injection]) -> list[dict]:
    """The workflow's templates: the entry, then per fault its wait (when at > 0), its branch and its step."""
    branches, out = [], []
    for inj in injections:
        step = {"name": inj.step, "templateType": inj.kind, "deadline": go_duration(inj.lasts),
                EMBED[inj.kind]: inj.spec}
        if inj.at <= 0:
            branches.append(inj.step)
            out.append(step)
            continue
        wait = {"name": f"{inj.step}-wait", "templateType": "Suspend", "deadline": go_duration(inj.at)}
        branch = {"name": f"{inj.step}-at", "templateType": "Serial", "children": [wait["name"], inj.step]}
        branches.append(branch["name"])
        out += [branch, wait, step]
    return [{"name": entry, "templateType": "Parallel", "children": branches}, *out]


def metadata(name: str, namespace: str, experiment: str) -> dict:
    return {"name": name, "namespace": namespace,
            "labels": {**MANAGED_BY, EXPERIMENT_LABEL: object_name(experiment)}}


def workflow(experiment: str, namespace: str, injections: list[Injection]) -> dict:
    name = object_name(experiment, SCHEDULE_NAME_MAX)
    return {"apiVersion": API, "kind": "Workflow", "metadata": metadata(name, namespace, experiment),
            "spec": {"entry": name, "templates": templates(name, injections)}}


def schedule(experiment: str, namespace: str, injections: list[Injection], cron: str) -> dict:
    """The workflow, started on a cron schedule: one game day at a time (Forbid), the last few kept."""
    name = object_name(experiment, SCHEDULE_NAME_MAX)
    return {"apiVersion": API, "kind": "Schedule", "metadata": metadata(name, namespace, experiment),
            "spec": {"schedule": cron, "concurrencyPolicy": "Forbid", "historyLimit": 5, "type": "Workflow",
                     "workflow": {"entry": name, "templates": templates(name, injections)}}}
