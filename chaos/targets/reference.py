"""N replicas of the bundled reference server, each its own process group; optionally backup replicas and
the resilient gateway in front of them (the load then goes through the gateway)."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace

from ..common import FAULT_TOKEN_ENV, parse_duration, parse_percent
from .base import Instance, Target, TargetError


def gateway_settings(g: dict) -> dict:
    """The target file's gateway: mapping, as GatewaySettings fields."""
    out = {}

    def dur(v):
        return "auto" if v == "auto" else parse_duration(v)

    for key, field in (("retries", "retries"), ("max_concurrency", "max_concurrency"), ("max_queue", "max_queue"),
                       ("cache_size", "cache_size")):
        if key in g:
            out[field] = g[key]
    for key, field in (("first_token_timeout", "first_token_timeout"), ("total_timeout", "total_timeout"),
                       ("backoff", "backoff_base_s"), ("queue_timeout", "queue_timeout_s"),
                       ("health_interval", "health_interval_s"), ("stream_idle_timeout", "stream_idle_timeout_s")):
        if key in g:
            out[field] = dur(g[key])
    e = g.get("eject") or {}
    if "after_failures" in e:
        out["eject_after_failures"] = e["after_failures"]
    if "for" in e:
        out["eject_for_s"] = parse_duration(e["for"])
    b = g.get("breaker") or {}
    if "error_rate" in b:
        out["breaker_error_rate"] = parse_percent(b["error_rate"])
    if "min_requests" in b:
        out["breaker_min_requests"] = b["min_requests"]
    if "window" in b:
        out["breaker_window"] = b["window"]
    if "open" in b:
        out["breaker_open_s"] = parse_duration(b["open"])
    return out


@dataclass(slots=True, frozen=True)
class ReferenceSettings:
    """A reference target's own settings (its section of the file, validated): how each replica is served."""

    model_name: str = "chaos-reference"
    preset: str = "small"
    threads: int | None = None  # None: one torch thread a replica where several share the cores, else torch's
    max_model_len: int | None = None
    args: tuple[str, ...] = ()  # more `chaos reference serve` arguments
    gateway: dict | None = None  # the gateway's settings as GatewaySettings fields; None: no gateway
    backups: int = 0  # the gateway's backup replicas
    backup_preset: str = "tiny"

    @classmethod
    def from_dict(cls, s: dict) -> ReferenceSettings:
        g = s.get("gateway")
        backup = (g or {}).get("backup") or {}
        return cls(model_name=s.get("model_name", "chaos-reference"), preset=s.get("preset", "small"),
                   threads=s.get("threads"), max_model_len=s.get("max_model_len"), args=tuple(s.get("args", ())),
                   gateway=None if g is None else gateway_settings(g), backups=backup.get("replicas", 0),
                   backup_preset=backup.get("preset", "tiny"))

    def for_backups(self) -> ReferenceSettings:
        return replace(self, preset=self.backup_preset, args=())


class ReferenceTarget(Target):
    kind = "reference"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        self.conf = ReferenceSettings.from_dict(spec.settings)
        self.model = self.conf.model_name
        self.allow_remote = spec.allow_remote
        self.plan_hosts()
        for i in range(spec.replicas):
            self.instances.append(Instance.placed(i, f"r{i}", os.path.join(out_dir, f"replica-r{i}.log"), self.hosts))
        self.backups: list[Instance] = []
        self.gateway: Instance | None = None
        if self.conf.gateway is not None:
            for i in range(self.conf.backups):
                self.backups.append(Instance.placed(i, f"b{i}", os.path.join(out_dir, f"backup-b{i}.log"),
                                                    self.hosts))
            self.gateway = Instance.placed(0, "gw", os.path.join(out_dir, "gateway.log"), self.hosts, front=True)

    @property
    def fronted(self) -> list[Instance]:
        return [self.gateway] if self.gateway else list(self.instances)

    def all_instances(self) -> list[Instance]:
        return self.instances + self.backups + ([self.gateway] if self.gateway else [])

    def command(self, inst: Instance) -> list[str]:
        if inst is self.gateway:
            cmd = [sys.executable, "-m", "chaos", "reference", "gateway", "--host", inst.bind_address, "--port",
                   str(inst.port), "--drain-timeout", "5",
                   "--settings", json.dumps(self.conf.gateway)]
            for p in self.instances:  # through each replica's link, where it has one
                cmd += ["--upstream", f"{p.id}={self.front(p)}"]
            for b in self.backups:
                cmd += ["--backup", f"{b.id}={self.front(b)}"]
            return cmd + self._remote_args(inst)
        s = self.conf.for_backups() if inst in self.backups else self.conf
        # Replicas share the cores here: one torch thread each unless the file says otherwise.
        threads = s.threads if s.threads is not None else 1 if len(self.instances) + len(self.backups) > 1 else 0
        cmd = [sys.executable, "-m", "chaos", "reference", "serve", "--host", inst.bind_address, "--port",
               str(inst.port), "--replica-id", inst.id, "--preset", s.preset, "--model-name", self.model,
               "--threads", str(threads), "--enable-fault-hooks", "--drain-timeout", "5"]
        if s.max_model_len is not None:
            cmd += ["--max-model-len", str(s.max_model_len)]
        return cmd + self._remote_args(inst) + list(s.args)

    def routing_delay(self) -> float:
        if self.gateway is None:
            return 0.0
        from ..reference.gateway.settings import GatewaySettings

        g = {**{f: getattr(GatewaySettings(), f) for f in ("health_interval_s", "eject_for_s", "breaker_open_s")},
             **self.conf.gateway}
        # The gateway sees the replica at its next health probe; an ejection or an open breaker may outlast that.
        return g["health_interval_s"] + max(g["eject_for_s"], g["breaker_open_s"])

    def _remote_args(self, inst: Instance) -> list[str]:
        """Replicas and the gateway refuse a non-loopback --host unless the target file said allow_remote, or the
        address is a host's the run made (a bridge no other machine is on)."""
        return ["--allow-remote"] if self.allow_remote or inst.host else []

    def start_instance(self, inst: Instance) -> None:
        env = None if inst is self.gateway else {FAULT_TOKEN_ENV: self.fault_token}  # restarts reuse the token
        self.launch(inst, self.command(inst), env)

    def up(self, should_stop=lambda: False) -> None:
        replicas = self.instances + self.backups
        for inst in replicas:
            self.start_instance(inst)
        for inst in replicas:
            self.wait_healthy(inst, self.spec.startup_timeout, should_stop)
        if self.gateway is not None:
            self.start_instance(self.gateway)
            self.wait_healthy(self.gateway, self.spec.startup_timeout, should_stop)
        if not self.instances:
            raise TargetError("the target has no replicas")
