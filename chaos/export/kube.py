"""Kubernetes' own spelling of things: object names, labels, and the duration strings Chaos Mesh reads.

Names and labels follow Kubernetes' rules (a DNS-1123 label or subdomain; a label's key and value), so what the
export writes is refused here, with the flag or fault that made it, rather than by the API server later.
"""

from __future__ import annotations

import re

from ..errors import InputError

DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # a namespace, a Service, a container, a port
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"  # most object names, a workflow's template names
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_VALUE = rf"({LABEL_NAME})?"  # a label's value may be empty
LABEL_KEY = rf"({DNS_SUBDOMAIN}/)?{LABEL_NAME}"

# The labels every object of an export carries: `kubectl delete ... -l llm-chaos.io/experiment=NAME` finds them.
MANAGED_BY = {"app.kubernetes.io/managed-by": "llm-chaos"}
EXPERIMENT_LABEL = "llm-chaos.io/experiment"
COMPONENT_LABEL = "app.kubernetes.io/component"


def object_name(text: str, limit: int = 63) -> str:
    """A DNS-1123 label made from a fault's or an experiment's name: kill-r1 stays kill-r1, latency#0 becomes
    latency-0. limit: Kubernetes' 63, or less where Chaos Mesh appends its own suffix (a Schedule's objects)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    name = re.sub(r"-{2,}", "-", name)[:limit].rstrip("-")
    if not name:
        raise InputError(f"{text!r} leaves nothing of a Kubernetes name (lowercase letters, digits and '-')")
    return name


def is_dns_label(text: str) -> bool:
    return re.fullmatch(DNS_LABEL, text) is not None


def label(text: str, flag: str) -> tuple[str, str]:
    """KEY=VALUE of a flag, checked against Kubernetes' label syntax."""
    key, eq, value = text.partition("=")
    if not eq or re.fullmatch(LABEL_KEY, key) is None or len(key) > 317:
        raise InputError(f"{flag} {text!r}: give a label as KEY=VALUE, e.g. app=vllm or "
                         f"app.kubernetes.io/name=vllm")
    if re.fullmatch(LABEL_VALUE, value) is None:
        raise InputError(f"{flag} {text!r}: a label's value is at most 63 letters, digits, '-', '_' or '.', "
                         f"beginning and ending with a letter or digit")
    return key, value


def go_duration(seconds: float) -> str:
    """A duration as Chaos Mesh reads it (Go's time.ParseDuration, and the CRDs' pattern for a delay's latency:
    digits and one unit): 15s, 200ms, 1500ms, 250us. Whole seconds stay seconds; the rest goes down a unit until
    it is whole (a microsecond is the finest the experiment files give)."""
    if seconds < 0:
        raise ValueError(f"a duration of {seconds:g}s")
    for unit, scale in (("s", 1), ("ms", 1_000), ("us", 1_000_000)):
        value = seconds * scale
        if abs(value - round(value)) < 1e-6 or unit == "us":
            return f"{round(value)}{unit}"
    raise AssertionError("unreachable")
