"""The reference server's own fault hooks: slow steps, a hang, a KV-cache cap, failing a fraction."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from .base import Fault, FaultContext

HOOKS = ("step_delay_ms", "hang_s", "kv_block_cap", "fail_fraction")


TOKEN_HEADER = "x-chaos-fault-token"


def _call(method: str, url: str, body: dict | None = None, token: str | None = None) -> bool:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **({TOKEN_HEADER: token} if token else {})}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


class ServerHook(Fault):
    type = "server_hook"
    summary = "reference server hooks: step_delay_ms, hang_s, kv_block_cap, fail_fraction (for duration)"

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.hooks = {k: v for k, v in spec.params.items() if k in HOOKS}
        d = spec.params.get("duration")
        self.revert_at = None if d is None else spec.at + d
        self.urls: list[str] = []

    def plan(self, ctx: FaultContext) -> dict:
        if self.spec.params.get("instance", "all") == "all":
            victims = self.target.instances
        else:
            victims = self._pick(ctx)
        self.urls = [i.url for i in victims]
        return {"urls": self.urls, "hooks": sorted(self.hooks)}

    def touches(self, inst) -> bool:
        return inst.url in self.urls

    @property
    def _token(self) -> str | None:
        return getattr(self.target, "fault_token", None)  # the run's own; it never goes to the journal

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        for url in self.urls:
            if not _call("POST", url + "/admin/faults", self.hooks, self._token):
                ctx.log(f"server_hook: {url} did not accept {self.hooks}")

    def revert(self, ctx: FaultContext) -> None:
        self.reverted = True
        for url in self.urls:
            for name in self.hooks:
                _call("DELETE", f"{url}/admin/faults/{name}", token=self._token)

    def describe(self) -> str:
        hooks = ", ".join(f"{k}={v}" for k, v in self.hooks.items())
        dur = "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"
        return f"{hooks} on {len(self.urls) or 'the'} instance(s) at {self.spec.at:g}s{dur}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        # The run's fault token died with it (it is never written down), so the hooks cannot be switched off
        # over HTTP; they live only in the replicas' memory, and recover stops those replicas next.
        return "hooks end with the replicas, which recover stops"
