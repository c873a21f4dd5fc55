"""JSON Schemas of the Kubernetes objects that carry the export's load (ConfigMap, Service, Job, CronJob), for the
fields it writes: from the Kubernetes API reference (core/v1 ConfigMap, Service, PodSpec, Container; batch/v1 Job
and CronJob, as of Kubernetes 1.30). Names are DNS-1123 (a Job's at most 63 characters: it labels its pods with
it; a CronJob's at most 52: it appends 11 to name each Job); a ConfigMap holds at most 1 MiB.

An environment variable is given by `valueFrom` a Secret or by a `value` that the export wrote itself (a path, a
switch): the schema allows no other way, and chaos.export.bundle checks that no value is a secret's.
"""

from __future__ import annotations

import jsonschema

from .kube import DNS_LABEL
from .schemas import LABELS, METADATA, NAME, STRINGS, obj

PORT = {"type": "integer", "minimum": 1, "maximum": 65535}
ENV_NAME = {"type": "string", "pattern": r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"}
ENV = obj({"name": ENV_NAME, "value": {"type": "string"},
           "valueFrom": obj({"secretKeyRef": obj({"name": NAME, "key": ENV_NAME, "optional": {"type": "boolean"}},
                                                 ("name", "key"))}, ("secretKeyRef",))},
          ("name",), oneOf=[{"required": ["value"]}, {"required": ["valueFrom"]}])
CONTAINER = obj({
    "name": {"type": "string", "pattern": f"^{DNS_LABEL}$"}, "image": {"type": "string", "minLength": 1},
    "command": {**STRINGS, "minItems": 1}, "args": STRINGS, "env": {"type": "array", "items": ENV},
    "ports": {"type": "array", "items": obj({"name": {"type": "string", "pattern": "^[a-z0-9-]{1,15}$"},
                                             "containerPort": PORT, "protocol": {"enum": ["TCP", "UDP", "SCTP"]}},
                                            ("containerPort",))},
    "volumeMounts": {"type": "array", "items": obj({"name": NAME, "mountPath": {"type": "string", "pattern": "^/"},
                                                    "readOnly": {"type": "boolean"}}, ("name", "mountPath"))},
}, ("name", "image"))
VOLUME = obj({"name": {"type": "string", "pattern": f"^{DNS_LABEL}$"},
              "configMap": obj({"name": NAME}, ("name",)), "emptyDir": obj({})},
             ("name",), oneOf=[{"required": ["configMap"]}, {"required": ["emptyDir"]}])
POD_TEMPLATE = obj({"metadata": obj({"labels": LABELS}),
                    "spec": obj({"restartPolicy": {"enum": ["Never", "OnFailure"]},  # a Job's pods: never Always
                                 "containers": {"type": "array", "minItems": 1, "items": CONTAINER},
                                 "volumes": {"type": "array", "items": VOLUME}}, ("restartPolicy", "containers"))},
                   ("spec",))
COUNT = {"type": "integer", "minimum": 0}
JOB_SPEC = obj({"parallelism": COUNT, "completions": COUNT, "backoffLimit": COUNT,
                "activeDeadlineSeconds": {"type": "integer", "minimum": 1}, "ttlSecondsAfterFinished": COUNT,
                "template": POD_TEMPLATE}, ("template",))


def _kind(api: str, kind: str, spec: dict | None, name_max: int = 253, data: dict | None = None) -> dict:
    meta = {**METADATA, "properties": {**METADATA["properties"], "name": {**NAME, "maxLength": name_max}}}
    props = {"apiVersion": {"const": api}, "kind": {"const": kind}, "metadata": meta}
    if spec is not None:
        props["spec"] = spec
    if data is not None:
        props["data"] = data
    return obj(props, ("apiVersion", "kind", "metadata", *(("spec",) if spec is not None else ())))


SCHEMAS = {
    "ConfigMap": _kind("v1", "ConfigMap", None, data={"type": "object", "propertyNames": {
        "pattern": r"^[-._a-zA-Z0-9]+$", "maxLength": 253}, "additionalProperties": {"type": "string"}}),
    "Service": _kind("v1", "Service", obj({
        "selector": {**LABELS, "minProperties": 1},
        "ports": {"type": "array", "minItems": 1, "items": obj({
            "name": {"type": "string", "pattern": f"^{DNS_LABEL}$"}, "port": PORT, "targetPort": PORT,
            "protocol": {"enum": ["TCP", "UDP", "SCTP"]}}, ("port",))}}, ("ports",)), name_max=63),
    "Job": _kind("batch/v1", "Job", JOB_SPEC, name_max=63),
    "CronJob": _kind("batch/v1", "CronJob", obj({
        "schedule": {"type": "string", "minLength": 1}, "concurrencyPolicy": {"enum": ["Allow", "Forbid", "Replace"]},
        "successfulJobsHistoryLimit": COUNT, "failedJobsHistoryLimit": COUNT,
        "startingDeadlineSeconds": COUNT, "suspend": {"type": "boolean"},
        "jobTemplate": obj({"spec": JOB_SPEC}, ("spec",))}, ("schedule", "jobTemplate")), name_max=52),
}
CONFIGMAP_MAX = 1_048_576


def problems(doc: dict) -> list[str]:
    """Why a Kubernetes object of the load is not valid ([] when it is)."""
    schema = SCHEMAS.get(doc.get("kind"))
    if schema is None:
        return [f"kind {doc.get('kind')!r} is not a Kubernetes kind this export writes"]
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    out = [f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors]
    if doc.get("kind") == "ConfigMap":
        size = sum(len(k.encode()) + len(str(v).encode()) for k, v in (doc.get("data") or {}).items())
        if size > CONFIGMAP_MAX:
            out.append(f"data: {size} bytes, more than a ConfigMap holds ({CONFIGMAP_MAX})")
    return out
