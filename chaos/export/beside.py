"""What Chaos Mesh cannot inject, and how to run it beside: the faults that need the LLM proxy or Toxiproxy in the
path, and the abnormal-input batch, as an experiment of their own (beside.yaml) that `chaos run` drives from a
machine reaching the service through `kubectl port-forward`; the run puts its proxies in front of the forwarded
port, as in front of any OpenAI-compatible endpoint.

Through a port-forward the service is one endpoint: a fault on a link to one replica (r1) goes on the client link,
in front of the whole service, and the notes say so. The reference server's own hooks (server_hook) reach no
service in a cluster: that experiment runs as it is, against the bundled target; so does a kernel fault left out
(tcp_reset), which acts on a host the run makes.
"""

from __future__ import annotations

import copy
import os

from ..faults import FAULT_TYPES
from .chaosmesh import Left
from .config import ExportConfig

TARGET_FILE = "beside-target.yaml"
EXPERIMENT_FILE = "beside.yaml"


def port_forward(cfg: ExportConfig) -> str:
    return f"kubectl port-forward -n {cfg.namespace} svc/{cfg.service} {cfg.local_port}:{cfg.port}"


def target(exp, cfg: ExportConfig, model: str) -> dict:
    """An openai target at the forwarded port: loopback, so no allow_remote; the key by its variable's name."""
    t = {"kind": "openai", "name": f"{cfg.service}-port-forward",
         "base_url": f"http://127.0.0.1:{cfg.local_port}{cfg.base_path}", "model": model,
         "ignore_eos": exp.target.ignore_eos}
    if exp.target.api_key_env:
        t["api_key_env"] = exp.target.api_key_env
    return t


def fault(exp, left: Left, notes: list[str]) -> dict:
    """The fault as the experiment wrote it (its public form: secrets stay masked), set for one endpoint."""
    f = copy.deepcopy(exp.resolved["faults"][left.index])
    if f.get("link", "client") != "client":
        notes.append(f"{left.fault}: on link {f['link']} in the experiment; here on the client link, in front of "
                     f"the whole service (a port-forward reaches one endpoint)")
        f["link"] = "client"
    if left.type == "abnormal_inputs":
        f.pop("via", None)  # an openai target has no gateway: the cases go to the endpoint
        f["restart"] = False  # nothing this run started can be restarted
    return f


def experiment(exp, cfg: ExportConfig, lefts: list[Left], replay: str | None) -> tuple[dict, list[str]] | None:
    """The beside experiment and its notes, or None when nothing can run beside."""
    runnable = [x for x in lefts if x.beside]
    if not runnable:
        return None
    notes: list[str] = []
    load = copy.deepcopy(exp.resolved["load"])
    if replay is not None:
        load["replay"] = replay
    doc = {"name": f"{exp.name}-beside",
           "description": f"The faults of {exp.name} that Chaos Mesh cannot inject, run by chaos run from outside "
                          f"the cluster through `{port_forward(cfg)}` (written by chaos export).",
           "target": TARGET_FILE, "load": load, "faults": [fault(exp, x, notes) for x in runnable]}
    for key in ("steady_state", "verify", "abort_when", "metrics"):
        if key in exp.resolved:
            doc[key] = copy.deepcopy(exp.resolved[key])
    verify = doc.get("verify") or {}
    for key in ("served_by_all", "fallback"):  # they judge replicas and a gateway the port-forward hides
        if verify.pop(key, None) is not None:
            notes.append(f"verify.{key} left out: it judges the replicas and the gateway, which one forwarded "
                         f"endpoint does not show")
    return doc, notes


def how(exp, cfg: ExportConfig, left: Left, out: str) -> str:
    """The command that runs a left-out fault."""
    if left.beside:
        return f"`{port_forward(cfg)}` then `chaos run {os.path.join(out, EXPERIMENT_FILE)}`"
    if getattr(FAULT_TYPES.get(left.type), "family", None) == "kernel":  # a host's link: no port-forward has one
        return (f"`chaos run {exp.path}` as root on a Linux machine of its own, against the bundled reference "
                f"target on the hosts the run makes (network namespaces)")
    return f"`chaos run {exp.path}` on a machine of its own, against the bundled reference target"
