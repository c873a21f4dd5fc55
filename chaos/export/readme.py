"""The export's own README.md and NOT-EXPORTED.md: what is in the folder, how to apply it, what each fault became,
what was left out and how to run that beside. Written for the person who applies it, who may never have seen the
experiment file."""

from __future__ import annotations

import os

from .. import __version__
from . import beside
from .kube import COMPONENT_LABEL, EXPERIMENT_LABEL, go_duration, object_name
from .schemas import CHAOS_MESH_VERSION

NOT_RUN = (f"No Kubernetes cluster ran these resources where they were written: each was validated against JSON "
           f"Schemas written from Chaos Mesh {CHAOS_MESH_VERSION}'s CRDs and documentation "
           f"(chaos/export/schemas.py) and from Kubernetes' API reference (chaos/export/kubeschemas.py).")


def what(inj) -> str:
    spec = inj.spec
    action = spec.get("action") or next((a for a in ("abort", "delay", "replace") if a in spec), "")
    if inj.kind == "HTTPChaos":
        action = f"{spec['target']} {action}"
    return f"{inj.kind} {action}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _apply(b, load: list[dict], chaos: list[dict]) -> list[str]:
    cfg, exp, out = b.cfg, b.exp, b.out
    n = object_name(exp.name)
    workers = f"{EXPERIMENT_LABEL}={n},{COMPONENT_LABEL}=locust-worker"
    master = next(d["metadata"]["name"] for d in load if d["metadata"]["name"].endswith("locust-master"))
    lines = ["## Run it", ""]
    if cfg.schedule:
        lines += [f"Both sides start on the cron schedule `{cfg.schedule}` (in the controllers' time zone, UTC unless yours is set otherwise): the load as "
                  f"CronJobs, the faults as a Chaos Mesh Schedule of the workflow. Apply once:", "",
                  f"    kubectl apply -f {out}/load/" + (f" -f {out}/chaos/" if chaos else ""), "",
                  "Each start, the workflow's clock begins when Chaos Mesh creates it, and the load's when its "
                  "workers have started and joined the master (an image pull, a pod's start-up): the faults come "
                  "that much early against the load. Pre-pull the image on the nodes to keep it to seconds.", ""]
    else:
        lines += ["    # 1. the load: the workers start, join the master, and the master starts the load",
                  f"    kubectl apply -f {out}/load/",
                  f"    kubectl wait -n {cfg.namespace} --for=condition=Ready pod -l {workers} --timeout=10m"]
        if chaos:
            lines += ["    # 2. the faults: the workflow's clock (each fault's `at`) starts now",
                      f"    kubectl apply -f {out}/chaos/"]
        lines += ["    # the seed's table, once the load is over (its records: /var/lib/llm-chaos/requests.jsonl)",
                  f"    kubectl logs -n {cfg.namespace} -f job/{master}", "",
                  "The workflow's clock starts when it is created and the load's when the last worker joined: "
                  "applied right after the workers are Ready, the faults come a few seconds late against the load "
                  "(the `at` of each is counted from the workflow's start).", ""]
    lines += ["Remove it all (a fault still running ends when its object goes):", "",
              f"    kubectl delete -n {cfg.namespace} -f {out}/load/" + (f" -f {out}/chaos/" if chaos else ""), ""]
    return lines


def readme(b, load: list[dict], chaos: list[dict]) -> str:
    exp, cfg = b.exp, b.cfg
    lines = [f"# {exp.name} on Kubernetes, with Chaos Mesh", "",
             f"Written by `chaos export {exp.path} --to chaos-mesh` (llm-chaos {__version__}). {NOT_RUN}", "",
             "## What is here", "",
             f"- `load/`: the load ({_load(exp)}) as a distributed Locust run: a ConfigMap with its "
             f"config, a Service for the master, and the master and {cfg.workers} workers as "
             f"{'CronJobs' if cfg.schedule else 'Jobs'}; they send to `{cfg.url}` (model `{_model(b)}`)."]
    if chaos:
        kind = chaos[0]["kind"]
        lines.append(f"- `chaos/`: the faults as a Chaos Mesh {kind}" + (
            f" (of a Workflow, on `{cfg.schedule}`)" if kind == "Schedule" else "") +
            ": each fault waits for its `at`, then lasts its deadline.")
    else:
        lines.append("- no `chaos/`: no fault of this experiment has a Chaos Mesh counterpart.")
    if beside.EXPERIMENT_FILE in b.files:
        lines.append(f"- `{beside.EXPERIMENT_FILE}`, `{beside.TARGET_FILE}`: the faults Chaos Mesh cannot inject, "
                     f"as an experiment `chaos run` drives through a port-forward (NOT-EXPORTED.md).")
    if b.left:
        lines.append(f"- `NOT-EXPORTED.md`: {len(b.left)} fault(s) left out, each with why and how to run it.")
    lines += ["", "## Before you apply", "",
              f"- Chaos Mesh {CHAOS_MESH_VERSION} (or a 2.x that takes these fields) in the cluster, its Controller "
              f"Manager in none of the service's pods; a PodChaos takes only pods a controller owns (a Deployment, a "
              f"StatefulSet) and restarts. The service's pods are selected by "
              f"`{_labels(cfg.selector)}` in namespace `{cfg.namespace}`" + (
                  ", and by --instance: " + ", ".join(f"{k} = {_where(v)}" for k, v in cfg.instances.items())
                  if cfg.instances else "") + ".",
              f"- The image `{cfg.image}` with llm-chaos {__version__} installed (e.g. `pip install .` of this "
              f"repository on a python:3.11 image): the Locust file imports it."]
    if exp.target.api_key_env:
        secret = cfg.api_key_secret or f"{cfg.service}-api-key"
        env = exp.target.api_key_env
        lines.append(f"- The API key in the Secret `{secret}`, under the key `{env}` (the workers read it as "
                     f"${env}; its value is in no file here): `kubectl create secret generic {secret} -n "
                     f"{cfg.namespace} --from-literal={env}=\"${env}\"`.")
    lines += ["- What the run judges (its verify: section, steady state, abort_when) is not judged in the "
              "cluster: the master's log has the seed's table (P50/P95/P99, errors by class), and "
              "requests.jsonl every request, for you to judge.", ""]
    lines += _apply(b, load, chaos)
    if b.injections:
        lines += ["## Faults", "", "| fault | type | at | lasts | Chaos Mesh | how it differs from the run's fault |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {inj.fault} | {inj.type} | {go_duration(inj.at)} | {go_duration(inj.lasts)} | {what(inj)} | "
                  f"{_cell('; '.join(inj.notes))} |" for inj in b.injections]
        lines.append("")
    return "\n".join(lines)


def not_exported(b) -> str:
    exp, cfg = b.exp, b.cfg
    lines = [f"# Not exported: {exp.name}", "",
             "These faults have no Chaos Mesh counterpart (or a setting of theirs has none). Each runs beside the "
             "cluster's resources, with the command given.", "",
             "| fault | type | at | why not | how to run it |", "|---|---|---|---|---|"]
    lines += [f"| {x.fault} | {x.type} | {go_duration(x.at)} | {_cell(x.why)} | {_cell(beside.how(exp, cfg, x, b.out))} |"
              for x in b.left]
    if beside.EXPERIMENT_FILE in b.files:
        lines += ["", f"`{beside.EXPERIMENT_FILE}` runs them with the experiment's load and checks, from a machine "
                      f"with llm-chaos and kubectl; `chaos run` puts its LLM fault proxy (and Toxiproxy, for a "
                      f"network fault) in front of the forwarded port, and rolls them back as in any run:", "",
                  f"    {beside.port_forward(cfg)} &",
                  f"    chaos run {os.path.join(b.out, beside.EXPERIMENT_FILE)}", ""]
        lines += [f"- {n}" for n in b.notes]
    return "\n".join(lines) + "\n"


def _model(b) -> str:
    from .locust import model_of

    return model_of(b.exp, b.cfg)


def _load(exp) -> str:
    """The load: section in a line, as the file writes it."""
    def say(v) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k}: {say(x)}" for k, x in v.items()) + "}"
        return ", ".join(map(str, v)) if isinstance(v, list) else str(v)

    return "; ".join(f"{k} {say(v)}" for k, v in exp.load.to_dict().items())


def _labels(labels: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


def _where(p) -> str:
    return f"pod {p.pod}" if p.pod else f"pods labelled {p.label[0]}={p.label[1]}"
