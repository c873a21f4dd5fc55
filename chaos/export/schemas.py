"""JSON Schemas of the Chaos Mesh objects the export writes, and the check every object passes before a file is
written.

Written here, for the fields the export emits (and their neighbours), from Chaos Mesh 2.8.3 (tag v2.8.3,
2026-06-09): its CRDs (config/crd/bases/chaos-mesh.org_{podchaos,networkchaos,httpchaos,workflows,schedules}.yaml:
field names, types, enums and required fields), the rules its admission webhooks add (api/v1alpha1/*_webhook.go:
a bandwidth rate's units, a direction `from` or `both` needs a target outside a partition, an HTTPChaos port above
0, a Suspend needs a deadline, a workflow's chaos has no duration), its controller's (a netem action needs one of
delay, loss, duplicate, corrupt or rate: mergeNetem in controllers/podnetworkchaos/controller.go), and the pages
of chaos-mesh.org/docs that describe them ("Simulate Pod Faults", "Simulate Network Faults", "Simulate HTTP
Faults", "Create Chaos Mesh Workflow", "Define Scheduling Rules": a Schedule of a Workflow is named in at most 51
characters). What a JSON Schema cannot say (a workflow's children name its templates, names are unique) is
checked in workflow_problems.

No Kubernetes cluster ran these objects here: passing these schemas means they match what those sources say
Chaos Mesh accepts, not that Chaos Mesh accepted them. The Kubernetes objects of the load are checked against
chaos.export.kubeschemas.
"""

from __future__ import annotations

import jsonschema

from .kube import DNS_LABEL, DNS_SUBDOMAIN, LABEL_KEY, LABEL_VALUE

CHAOS_MESH_VERSION = "2.8.3"

GO_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"}
LATENCY = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h)$"}  # the CRD's own pattern
PERCENT_STR = {"type": "string", "pattern": r"^(100(\.0+)?|[0-9]{1,2}(\.[0-9]+)?)$"}  # FloatStr, 0 to 100
NAME = {"type": "string", "pattern": f"^{DNS_SUBDOMAIN}$", "maxLength": 253}
NAMESPACE = {"type": "string", "pattern": f"^{DNS_LABEL}$"}
STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}}
LABELS = {"type": "object", "propertyNames": {"pattern": f"^{LABEL_KEY}$"},
          "additionalProperties": {"type": "string", "pattern": f"^{LABEL_VALUE}$"}}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}


def obj(props: dict, required: tuple = (), **more) -> dict:
    return {"type": "object", "properties": props, "required": list(required), "additionalProperties": False,
            **more}


METADATA = obj({"name": NAME, "namespace": NAMESPACE, "labels": LABELS, "annotations": STRING_MAP},
               ("name", "namespace"))

POD_SELECTOR_SPEC = obj({
    "namespaces": {**STRINGS, "items": NAMESPACE}, "labelSelectors": LABELS, "annotationSelectors": STRING_MAP,
    "fieldSelectors": STRING_MAP, "nodes": STRINGS, "nodeSelectors": LABELS,
    "pods": {"type": "object", "propertyNames": NAMESPACE, "additionalProperties": {**STRINGS, "minItems": 1}},
    "podPhaseSelectors": {"type": "array", "items": {"enum": ["Pending", "Running", "Succeeded", "Failed",
                                                              "Unknown"]}},
}, minProperties=1)  # an empty selector would take every pod of the namespace
MODES = ["one", "all", "fixed", "fixed-percent", "random-max-percent"]
POD_SELECTOR = {"selector": POD_SELECTOR_SPEC, "mode": {"enum": MODES},
                "value": {"type": "string", "pattern": r"^[0-9]+$"}}
VALUE_NEEDED = {"if": {"properties": {"mode": {"enum": ["fixed", "fixed-percent", "random-max-percent"]}},
                       "required": ["mode"]},
                "then": {"required": ["value"]}}
TARGET = {**obj(POD_SELECTOR, ("selector", "mode")), "allOf": [VALUE_NEEDED]}
COMMON = {**POD_SELECTOR, "duration": GO_DURATION, "remoteCluster": {"type": "string"}}


def _when(field: str, value, then: dict) -> dict:
    return {"if": {"properties": {field: {"const": value}}, "required": [field]}, "then": then}


def pod_chaos(embedded: bool) -> dict:
    rules = [VALUE_NEEDED]
    if not embedded:  # standalone, pod-failure needs a duration (the CRD's own description)
        rules.append(_when("action", "pod-failure", {"required": ["duration"]}))
    return {**obj({**COMMON, "action": {"enum": ["pod-kill", "pod-failure", "container-kill"]},
                   "gracePeriod": {"type": "integer", "minimum": 0}, "containerNames": STRINGS},
                  ("selector", "mode", "action")),
            **({"not": {"required": ["duration"]}} if embedded else {}), "allOf": rules}


CORRELATION = {"correlation": PERCENT_STR}
NET_ACTIONS = {
    "delay": obj({"latency": LATENCY, "jitter": LATENCY, **CORRELATION,
                  "reorder": obj({"reorder": PERCENT_STR, **CORRELATION, "gap": {"type": "integer"}},
                                 ("reorder", "gap"))}, ("latency",)),
    "loss": obj({"loss": PERCENT_STR, **CORRELATION}, ("loss",)),
    "duplicate": obj({"duplicate": PERCENT_STR, **CORRELATION}, ("duplicate",)),
    "corrupt": obj({"corrupt": PERCENT_STR, **CORRELATION}, ("corrupt",)),
    # the webhook's units (it lowercases first; the export writes lowercase); bps is bytes a second, kbit a
    # thousand bits (tc's own meaning: the rate goes to tbf)
    "bandwidth": obj({"rate": {"type": "string",
                               "pattern": r"^[0-9]+\s*(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$"},
                      "limit": {"type": "integer", "minimum": 1, "maximum": 2**32 - 1},
                      "buffer": {"type": "integer", "minimum": 1, "maximum": 2**32 - 1},
                      "peakrate": {"type": "integer", "minimum": 0},
                      "minburst": {"type": "integer", "minimum": 0}}, ("rate", "limit", "buffer")),
}
NETEM_PARTS = ("delay", "loss", "duplicate", "corrupt", "rate")  # what an action netem merges into one qdisc


def network_chaos(embedded: bool) -> dict:
    rules = [VALUE_NEEDED]
    rules += [_when("action", a, {"required": [a]}) for a in NET_ACTIONS]  # the action's own settings
    # netem refuses none of its parts (the controller's mergeNetem)
    rules.append(_when("action", "netem", {"anyOf": [{"required": [k]} for k in NETEM_PARTS]}))
    # The webhook: outside a partition, `from` and `both` shape packets of the target's pods, so need a target.
    rules.append({"if": {"properties": {"action": {"not": {"const": "partition"}},
                                        "direction": {"enum": ["from", "both"]}},
                         "required": ["action", "direction"]},
                  "then": {"required": ["target"]}})
    return {**obj({**COMMON, "action": {"enum": ["netem", "delay", "loss", "duplicate", "corrupt", "partition",
                                                 "bandwidth"]},
                   "device": {"type": "string"}, "direction": {"enum": ["to", "from", "both"]}, "target": TARGET,
                   "targetDevice": {"type": "string"}, "externalTargets": STRINGS, **NET_ACTIONS,
                   "rate": obj({"rate": {"type": "string"}}, ("rate",))},
                  ("selector", "mode", "action")),
            **({"not": {"required": ["duration"]}} if embedded else {}), "allOf": rules}


METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT"]  # the webhook's list
HTTP_ACTIONS = ("abort", "delay", "replace", "patch")


def http_chaos(embedded: bool) -> dict:
    replace = obj({"path": {"type": "string"}, "method": {"enum": METHODS},
                   "code": {"type": "integer", "minimum": 100, "maximum": 599},
                   "body": {"type": "string", "contentEncoding": "base64",
                            "pattern": r"^[A-Za-z0-9+/]*={0,2}$"},  # the CRD's []byte: base64 in YAML
                   "queries": STRING_MAP, "headers": STRING_MAP}, minProperties=1)
    patch = obj({"body": obj({"type": {"const": "JSON"}, "value": {"type": "string"}}, ("type", "value")),
                 "queries": {"type": "array", "items": STRINGS}, "headers": {"type": "array", "items": STRINGS}},
                minProperties=1)
    return {**obj({**COMMON, "target": {"enum": ["Request", "Response"]},
                   "port": {"type": "integer", "minimum": 1, "maximum": 65535},  # the webhook refuses 0
                   "path": {"type": "string", "minLength": 1}, "method": {"enum": METHODS},
                   "code": {"type": "integer"}, "request_headers": STRING_MAP, "response_headers": STRING_MAP,
                   "abort": {"type": "boolean"}, "delay": GO_DURATION, "replace": replace, "patch": patch,
                   "tls": obj({"secretName": NAME, "secretNamespace": NAMESPACE, "certName": {"type": "string"},
                               "keyName": {"type": "string"}, "caName": {"type": "string"}},
                              ("secretName", "secretNamespace", "certName", "keyName"))},
                  ("selector", "mode", "target", "port")),
            # an HTTPChaos without an action would inject nothing
            "anyOf": [{"required": [a]} for a in HTTP_ACTIONS],
            **({"not": {"required": ["duration"]}} if embedded else {}), "allOf": [VALUE_NEEDED]}


EMBED = {"PodChaos": ("podChaos", pod_chaos), "NetworkChaos": ("networkChaos", network_chaos),
         "HTTPChaos": ("httpChaos", http_chaos)}
TEMPLATE_TYPES = ["Serial", "Parallel", "Suspend", "Task", "Schedule", "StatusCheck", *EMBED]


def template() -> dict:
    props = {"name": NAME, "templateType": {"enum": TEMPLATE_TYPES}, "deadline": GO_DURATION,
             "children": {**STRINGS, "minItems": 1},
             **{key: make(embedded=True) for key, make in EMBED.values()}}
    rules = [_when("templateType", "Suspend", {"required": ["deadline"], "not": {"required": ["children"]}})]
    rules += [_when("templateType", t, {"required": ["children"]}) for t in ("Serial", "Parallel")]
    for kind, (key, _) in EMBED.items():
        others = [k for k, _ in EMBED.values() if k != key]
        # a chaos step carries its own kind's spec and a deadline (without one it never ends), nothing else
        rules.append(_when("templateType", kind, {"required": [key, "deadline"],
                                                  "not": {"anyOf": [{"required": [o]} for o in
                                                                    [*others, "children"]]}}))
    return {**obj(props, ("name", "templateType")), "allOf": rules}


WORKFLOW_SPEC = obj({"entry": NAME, "templates": {"type": "array", "minItems": 1, "items": template()}},
                    ("entry", "templates"))
CRON = {"type": "string", "pattern": r"^(@(yearly|annually|monthly|weekly|daily|midnight|hourly|every \S+)|"
                                     r"\S+( \S+){4,5})$"}


def resource(kind: str, spec: dict, name_max: int = 253) -> dict:
    return obj({"apiVersion": {"const": "chaos-mesh.org/v1alpha1"}, "kind": {"const": kind},
                "metadata": {**METADATA, "properties": {**METADATA["properties"],
                                                        "name": {**NAME, "maxLength": name_max}}},
                "spec": spec}, ("apiVersion", "kind", "metadata", "spec"))


SCHEDULE_SPEC = {**obj({"schedule": CRON, "startingDeadlineSeconds": {"type": ["integer", "null"],
                                                                      "exclusiveMinimum": 0},
                        "concurrencyPolicy": {"enum": ["Forbid", "Allow"]},
                        "historyLimit": {"type": "integer", "minimum": 1},
                        "type": {"enum": ["Workflow", *EMBED]}, "workflow": WORKFLOW_SPEC,
                        **{key: make(embedded=False) for key, make in EMBED.values()}}, ("schedule", "type")),
                 "allOf": [_when("type", "Workflow", {"required": ["workflow"]}),
                           *[_when("type", k, {"required": [key]}) for k, (key, _) in EMBED.items()]]}

SCHEMAS = {**{kind: resource(kind, make(embedded=False)) for kind, (_, make) in EMBED.items()},
           "Workflow": resource("Workflow", WORKFLOW_SPEC),
           "Schedule": resource("Schedule", SCHEDULE_SPEC, name_max=51)}


def workflow_problems(spec: dict) -> list[str]:
    """What the schema cannot say of a workflow: names unique, the entry and every child a template's name."""
    names = [t.get("name") for t in spec.get("templates", [])]
    problems = [f"template name {n!r} twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if spec.get("entry") not in names:
        problems.append(f"entry {spec.get('entry')!r} is no template's name")
    for t in spec.get("templates", []):
        problems += [f"template {t.get('name')}: child {c!r} is no template's name"
                     for c in t.get("children", []) if c not in names]
    return problems


def problems(doc: dict) -> list[str]:
    """Why a Chaos Mesh object is not valid ([] when it is)."""
    schema = SCHEMAS.get(doc.get("kind"))
    if schema is None:
        return [f"kind {doc.get('kind')!r} is not a Chaos Mesh kind this export writes"]
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(doc), key=lambda e: list(e.path))
    out = [f"{'.'.join(map(str, e.path)) or '(top)'}: {e.message}" for e in errors]
    spec = doc.get("spec") or {}
    flow = spec if doc.get("kind") == "Workflow" else spec.get("workflow") if doc.get("kind") == "Schedule" else None
    return out + (workflow_problems(flow) if isinstance(flow, dict) else [])
