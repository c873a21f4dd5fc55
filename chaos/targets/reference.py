"""N replicas of the bundled reference server, each its own process group; optionally backup replicas and
the resilient gateway in front of them (the load then goes through the gateway)."""

from __future__ import annotations

import json
import os
import sys

from ..common import FAULT_TOKEN_ENV, parse_duration, parse_percent
from .base import Instance, Target, TargetError, free_port


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


class ReferenceTarget(Target):
    kind = "reference"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        s = spec.settings
        self.model = s.get("model_name", "chaos-reference")
        self.allow_remote = spec.allow_remote
        for i in range(spec.replicas):
            port = free_port()
            self.instances.append(Instance(i, f"r{i}", f"http://127.0.0.1:{port}", port,
                                           log_path=os.path.join(out_dir, f"replica-r{i}.log")))
        self.gateway_conf = s.get("gateway")
        self.backups: list[Instance] = []
        self.gateway: Instance | None = None
        if self.gateway_conf is not None:
            for i in range((self.gateway_conf.get("backup") or {}).get("replicas", 0)):
                port = free_port()
                self.backups.append(Instance(i, f"b{i}", f"http://127.0.0.1:{port}", port,
                                             log_path=os.path.join(out_dir, f"backup-b{i}.log")))
            port = free_port()
            self.gateway = Instance(0, "gw", f"http://127.0.0.1:{port}", port,
                                    log_path=os.path.join(out_dir, "gateway.log"), front=True)

    @property
    def fronted(self) -> list[Instance]:
        return [self.gateway] if self.gateway else list(self.instances)

    def all_instances(self) -> list[Instance]:
        return self.instances + self.backups + ([self.gateway] if self.gateway else [])

    def command(self, inst: Instance) -> list[str]:
        s = self.spec.settings
        if inst is self.gateway:
            cmd = [sys.executable, "-m", "chaos", "reference", "gateway", "--host", "127.0.0.1", "--port",
                   str(inst.port), "--drain-timeout", "5",
                   "--settings", json.dumps(gateway_settings(self.gateway_conf))]
            for p in self.instances:  # through each replica's link, where it has one
                cmd += ["--upstream", f"{p.id}={self.front(p)}"]
            for b in self.backups:
                cmd += ["--backup", f"{b.id}={self.front(b)}"]
            return cmd + self._remote_args()
        if inst in self.backups:
            preset = (self.gateway_conf.get("backup") or {}).get("preset", "tiny")
            s = {**s, "preset": preset, "args": []}
        # Replicas share the cores here: one torch thread each unless the file says otherwise.
        threads = s.get("threads", 1 if len(self.instances) + len(self.backups) > 1 else 0)
        cmd = [sys.executable, "-m", "chaos", "reference", "serve", "--host", "127.0.0.1", "--port", str(inst.port),
               "--replica-id", inst.id, "--preset", s.get("preset", "small"), "--model-name", self.model,
               "--threads", str(threads), "--enable-fault-hooks", "--drain-timeout", "5"]
        if "max_model_len" in s:
            cmd += ["--max-model-len", str(s["max_model_len"])]
        return cmd + self._remote_args() + list(s.get("args", []))

    def routing_delay(self) -> float:
        if self.gateway is None:
            return 0.0
        from ..reference.gateway.settings import GatewaySettings

        g = {**{f: getattr(GatewaySettings(), f) for f in ("health_interval_s", "eject_for_s", "breaker_open_s")},
             **gateway_settings(self.gateway_conf)}
        # The gateway sees the replica at its next health probe; an ejection or an open breaker may outlast that.
        return g["health_interval_s"] + max(g["eject_for_s"], g["breaker_open_s"])

    def _remote_args(self) -> list[str]:
        """Replicas and the gateway refuse a non-loopback --host unless the target file said allow_remote."""
        return ["--allow-remote"] if self.allow_remote else []

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
