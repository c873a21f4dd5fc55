"""An experiment's load as a distributed Locust run in the cluster: a ConfigMap (the load's config, and its replay
log), a Service for the master, and two Jobs, the master and its workers (CronJobs on --schedule).

Why plain Jobs and not the locust-k8s-operator's LocustTest: the operator is one more controller and CRD to
install beside Chaos Mesh, and it runs stock `locust` with a locustfile from a ConfigMap. Ours imports chaos.*
(the LLM user, its records, the workloads), so the image must carry llm-chaos anyway; with it, two Jobs and a
Service run on any cluster with nothing else installed, and every field is Kubernetes' own API. Jobs for both
sides: Locust's workers exit when the master quits, so as a Job they end with it, where a Deployment would restart
them against a master that is gone. The master writes requests.jsonl (its workers send it their records, as on
one machine) and prints the seed's table in its log at the end; the file is on the pod's emptyDir, so keep it
with `kubectl cp` before the pod goes, or mount a volume of yours there.

The config is the one `chaos load` writes (chaos.load.driver.locust_config), built here without a target to ask:
the model from --model or the target file, the token count by the target's kind, timeouts as the file gives them
(auto needs a running target: refused). The API key is never in it: the workers read the variable the target
names (api_key_env) from a Secret, by name.
"""

from __future__ import annotations

import json
import os
import shlex

from ..errors import InputError
from .config import LOCUST_PORT, ExportConfig
from .kube import COMPONENT_LABEL, EXPERIMENT_LABEL, MANAGED_BY, object_name

CONFIG_DIR = "/etc/llm-chaos"
RECORDS_DIR = "/var/lib/llm-chaos"
CONFIGMAP_MAX = 1_000_000  # a ConfigMap holds at most 1 MiB, its keys and metadata included
LOCUSTFILE = "$(python -c 'import chaos.load.driver as d; print(d.LOCUSTFILE)')"  # where the image installed it
SUMMARY = ('import sys; from chaos.records import read_records; from chaos.records.summary import summarize, '
           'format_table; print(format_table([summarize(read_records(sys.argv[1]), "all")]))')


def model_of(exp, cfg: ExportConfig) -> str:
    s = exp.target.settings
    model = cfg.model or s.get("model") or (s.get("model_name", "chaos-reference")
                                            if exp.target.kind == "reference" else None)
    if not model:
        raise InputError(f"{exp.path}: its target ({exp.target.name}) names no model, and the load must send one: "
                         f"give --model NAME (what GET /v1/models of the service lists)")
    return model


def load_config(exp, cfg: ExportConfig, keep_alive: bool) -> tuple[dict, dict[str, str]]:
    """(the Locust config, the ConfigMap's files besides it: the replay log by its name)."""
    from ..experiment.loadspec import load_config as config_of
    from ..load.driver import locust_config
    from ..load.workloads import Workload

    tokenizer = "byte" if exp.target.kind == "reference" else "estimate"  # what chaos load finds out by asking
    lc = config_of(exp.load, [cfg.url], model_of(exp, cfg), exp.target.api_key_env, RECORDS_DIR,
                   tokenizer=tokenizer, ignore_eos=exp.target.ignore_eos,
                   keep_alive=exp.target.keep_alive and keep_alive)
    lc.workers = cfg.workers
    t = lc.timeouts
    if "auto" in (t.first_token, t.total):
        raise InputError(f"{exp.path}: load.timeouts says auto, which `chaos load` calibrates against the running "
                         f"target; the export needs them fixed: give first_token and total as durations")
    try:  # what `chaos load` refuses before Locust starts, refused here before anything is written
        Workload(lc.workload, seed=lc.seed, tokenizer=tokenizer, ignore_eos=lc.ignore_eos)
    except ValueError as e:
        raise InputError(f"{exp.path}: load: {e}") from None
    files = {}
    for spec, _ in lc.workload:
        if spec.replay_file:
            name = os.path.basename(spec.replay_file)
            with open(spec.replay_file, encoding="utf-8") as f:
                files[name] = f.read()
            spec.replay_file = f"{CONFIG_DIR}/{name}"
    timeouts = {"connect": t.connect, "first_token": float(t.first_token), "total": float(t.total)}
    return locust_config(lc, lc.model, tokenizer, timeouts, f"{RECORDS_DIR}/requests.jsonl"), files


def labels(exp, component: str) -> dict:
    return {**MANAGED_BY, EXPERIMENT_LABEL: object_name(exp.name), COMPONENT_LABEL: component}


def _meta(name: str, exp, cfg: ExportConfig, component: str) -> dict:
    return {"name": name, "namespace": cfg.namespace, "labels": labels(exp, component)}


def _job(exp, cfg: ExportConfig, component: str, script: str, env: list[dict], extra: dict, seconds: float) -> dict:
    container = {"name": component, "image": cfg.image, "command": ["sh", "-c", script],
                 "env": [{"name": "CHAOS_LOAD_CONFIG", "value": f"{CONFIG_DIR}/load-config.json"},
                         {"name": "PYTHONUNBUFFERED", "value": "1"}, *env],
                 "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]}
    volumes = [{"name": "config", "configMap": {"name": f"{object_name(exp.name, 36)}-load"}}]
    if component == "locust-master":
        container["ports"] = [{"name": "locust", "containerPort": LOCUST_PORT}]
        container["volumeMounts"].append({"name": "records", "mountPath": RECORDS_DIR})
        volumes.append({"name": "records", "emptyDir": {}})
    # The master waits for its workers, and they for an image pull: room for both before the load's own time.
    spec = {"backoffLimit": 0 if component == "locust-master" else 2 * cfg.workers,
            "activeDeadlineSeconds": int(seconds) + 900, **extra,
            "template": {"metadata": {"labels": labels(exp, component)},
                         "spec": {"restartPolicy": "Never" if component == "locust-master" else "OnFailure",
                                  "containers": [container], "volumes": volumes}}}
    return spec


def resources(exp, cfg: ExportConfig, keep_alive: bool = True) -> list[dict]:
    """The load's objects, in the order to apply them."""
    config, files = load_config(exp, cfg, keep_alive)
    base = object_name(exp.name, 36)
    data = {"load-config.json": json.dumps(config, indent=2), **files}
    if sum(len(k) + len(v.encode()) for k, v in data.items()) > CONFIGMAP_MAX:
        raise InputError(f"{exp.path}: the load's config and replay log come to more than a ConfigMap holds "
                         f"(1 MiB): replay a shorter log, or mount yours from a volume and edit the config's "
                         f"replay_file")
    plan = config["plan"]
    seconds = sum(s["duration"] for s in plan["stages"]) + plan["stop_timeout"]
    service = f"{base}-locust"
    common = (f"python -m locust -f \"{LOCUSTFILE}\" --host {shlex.quote(lc_host(cfg.url))} --loglevel WARNING "
              f"--stop-timeout {max(0, round(plan['stop_timeout']))}s")
    master = (f"rc=0; {common} --headless --only-summary --csv {RECORDS_DIR}/locust --master "
              f"--master-bind-host 0.0.0.0 --master-bind-port {LOCUST_PORT} --expect-workers {cfg.workers} "
              f"|| rc=$?; python -c {shlex.quote(SUMMARY)} {RECORDS_DIR}/requests.jsonl; exit $rc")
    worker = f"exec {common} --worker --master-host {service} --master-port {LOCUST_PORT}"
    key_env = []
    if exp.target.api_key_env:  # by name: the value stays in the Secret
        secret = cfg.api_key_secret or f"{cfg.service}-api-key"
        key_env = [{"name": exp.target.api_key_env,
                    "valueFrom": {"secretKeyRef": {"name": secret, "key": exp.target.api_key_env}}}]
    workers_extra = {"parallelism": cfg.workers, "completions": cfg.workers}
    jobs = [("locust-workers", "locust-worker", worker, key_env, workers_extra),
            ("locust-master", "locust-master", master, [], {})]
    out = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(f"{base}-load", exp, cfg, "load-config"),
            "data": data},
           {"apiVersion": "v1", "kind": "Service", "metadata": _meta(service, exp, cfg, "locust-master"),
            "spec": {"selector": labels(exp, "locust-master"),
                     "ports": [{"name": "locust", "port": LOCUST_PORT, "targetPort": LOCUST_PORT}]}}]
    for suffix, component, script, env, extra in jobs:
        spec = _job(exp, cfg, component, script, env, extra, seconds)
        meta = _meta(f"{base}-{suffix}", exp, cfg, component)
        if cfg.schedule is None:
            spec["ttlSecondsAfterFinished"] = 86400  # a day to read its log, then Kubernetes deletes it
            out.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": spec})
        else:
            out.append({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                        "spec": {"schedule": cfg.schedule, "concurrencyPolicy": "Forbid",
                                 "successfulJobsHistoryLimit": 5, "failedJobsHistoryLimit": 5,
                                 "jobTemplate": {"spec": spec}}})
    return out


def lc_host(url: str) -> str:
    """Locust's --host: the scheme and address of the base URL (the config carries the path)."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
