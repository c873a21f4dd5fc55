"""What an export needs to know about the cluster that the experiment file cannot say: where the service's pods
are, which pod each instance of the experiment is, where the load sends, and what the load's pods run.

An experiment names instances as the run starts them (r0, r1, b0 for a backup, gw for the gateway) and links by
those names; in a cluster they are pods. A Deployment's replicas are interchangeable, so by default a fault on
rN (or on instance N) takes any one pod of --selector (Chaos Mesh's mode one). --instance ID=POD pins it to a pod
by name (a StatefulSet's llm-1 keeps its name across a restart), --instance ID=KEY=VALUE to the pods with that
label. A backup (bN) and a gateway (gw) are other pods than the replicas: a fault on one needs --instance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .. import __version__
from ..errors import InputError
from .kube import DNS_SUBDOMAIN, is_dns_label, label

PAUSE_AS = ("loss", "pod-failure")
LOCUST_PORT = 5557  # the master's port for its workers (Locust's default)


@dataclass(slots=True, frozen=True)
class Placement:
    """Where one instance of the experiment runs in the cluster: a pod by name, or the pods with a label."""

    pod: str | None = None
    label: tuple[str, str] | None = None

    def __post_init__(self):
        if (self.pod is None) == (self.label is None):
            raise InputError("an instance is one pod (ID=POD) or the pods of a label (ID=KEY=VALUE)")
        if self.pod is not None and re.fullmatch(DNS_SUBDOMAIN, self.pod) is None:
            raise InputError(f"--instance: {self.pod!r} is not a pod name (lowercase letters, digits, '-', '.')")

    @classmethod
    def parse(cls, text: str) -> tuple[str, Placement]:
        """--instance ID=POD or ID=KEY=VALUE."""
        ident, eq, where = text.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]{0,31}", ident) or not where:
            raise InputError(f"--instance {text!r}: give ID=POD (r1=llm-1) or ID=KEY=VALUE "
                             f"(gw=app.kubernetes.io/name=gateway), ID as the experiment names it (r0, r1, b0, gw)")
        if "=" in where:
            return ident, cls(label=label(where, f"--instance {ident}="))
        return ident, cls(pod=where)

    def selector(self, namespace: str) -> dict:
        """Chaos Mesh's selector of these pods."""
        if self.pod is not None:
            return {"pods": {namespace: [self.pod]}}
        return {"namespaces": [namespace], "labelSelectors": dict([self.label])}


@dataclass(slots=True)
class ExportConfig:
    service: str  # the Kubernetes Service in front of the pods: where the load sends, and what to port-forward
    namespace: str = "default"
    selector: dict[str, str] = field(default_factory=dict)  # the replicas' pods; empty: app=SERVICE
    instances: dict[str, Placement] = field(default_factory=dict)
    port: int = 8000  # the port the service's pods (and the Service) listen on: HTTPChaos proxies it
    url: str | None = None  # the base URL the load sends to; None: http://SERVICE.NAMESPACE.svc:PORT/v1
    model: str | None = None  # None: the target file's model
    image: str = f"llm-chaos:{__version__}"  # an image with this llm-chaos installed (Locust comes with it)
    workers: int = 2
    api_key_secret: str | None = None  # the Secret holding the target's api_key_env; None: SERVICE-api-key
    schedule: str | None = None  # a cron expression: the faults as a Schedule, the load as a CronJob
    pause_as: str = "loss"
    local_port: int = 8000  # the port-forward's local port, for the faults run beside

    def __post_init__(self):
        for what, name in (("--namespace", self.namespace), ("--service", self.service)):
            if not is_dns_label(name):
                raise InputError(f"{what} {name!r} is not a Kubernetes name: at most 63 lowercase letters, digits "
                                 f"and '-', beginning and ending with a letter or digit")
        if not self.selector:
            self.selector = {"app": self.service}
        for what, port in (("--port", self.port), ("--local-port", self.local_port)):
            if not 1 <= port <= 65535:
                raise InputError(f"{what} {port}: a port from 1 to 65535")
        if not 1 <= self.workers <= 256:
            raise InputError(f"--workers {self.workers}: from 1 to 256 Locust workers")
        if self.url is None:
            self.url = f"http://{self.service}.{self.namespace}.svc:{self.port}/v1"
        elif not re.match(r"^https?://[^/?#@\s]+(/[^?#\s]*)?$", self.url):
            raise InputError(f"--url {self.url!r}: give the service's base URL as the load's pods reach it, e.g. "
                             f"http://vllm.llm.svc:8000/v1 (no credentials, query or fragment)")
        if self.api_key_secret is not None and not re.fullmatch(DNS_SUBDOMAIN, self.api_key_secret):
            raise InputError(f"--api-key-secret {self.api_key_secret!r} is not a Kubernetes name")
        if self.schedule is not None:
            from croniter import croniter

            if len(self.schedule.split()) != 5 or not croniter.is_valid(self.schedule):
                raise InputError(f"--schedule {self.schedule!r} is not a cron expression: five fields, minute hour "
                                 f"day-of-month month day-of-week, e.g. \"0 3 * * 1\" (Mondays 03:00)")
        if self.pause_as not in PAUSE_AS:
            raise InputError(f"--pause-as {self.pause_as!r}: one of {', '.join(PAUSE_AS)}")
        if not re.fullmatch(r"[^\s]{1,255}", self.image):
            raise InputError(f"--image {self.image!r}: an image reference such as registry.example/llm-chaos:0.1.0")

    @property
    def base_path(self) -> str:
        path = re.sub(r"^https?://[^/]+", "", self.url).rstrip("/")
        return path or "/v1"

    def replicas(self) -> dict:
        """Chaos Mesh's selector of the replicas' pods (--selector)."""
        return {"namespaces": [self.namespace], "labelSelectors": dict(self.selector)}
