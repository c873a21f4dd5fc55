"""The reference server's own fault hooks: slow steps, a hang, a KV-cache cap, failing a fraction."""

from __future__ import annotations

from dataclasses import dataclass

from ..schemabits import INSTANCE, POSITIVE, integer, number
from .admin import call, post_each
from .base import Fault, FaultContext, FaultError
from .params import Params, setting

HOOKS = ("step_delay_ms", "step_slowdown", "hang_s", "kv_block_cap", "fail_fraction", "wedge_on")


@dataclass(slots=True, frozen=True, kw_only=True)
class HookParams(Params):
    instance: int | str = setting({"anyOf": [INSTANCE, {"const": "all"}]}, "all")
    duration: float | None = setting(POSITIVE, None)
    step_delay_ms: float | None = setting(number(0, 60_000), None)
    step_slowdown: float | None = setting(number(1, 10), None)
    hang_s: float | None = setting(number(0, 3600), None)
    kv_block_cap: int | None = setting(integer(1, 1 << 30), None)
    fail_fraction: float | None = setting(number(0, 1), None)
    # chaos.reference.faults.WEDGE_CLASSES (its import costs aiohttp; a test keeps them equal)
    wedge_on: str | None = setting({"enum": ["control", "emoji", "near_context", "nul", "rtl"],
                                    "description": "a class of input that wedges the replica until restarted"},
                                   None)


class ServerHook(Fault):
    type = "server_hook"
    summary = ("reference server hooks: step_delay_ms, step_slowdown, hang_s, kv_block_cap, fail_fraction, wedge_on "
               "(for duration)")
    Params = HookParams
    schema = HookParams.schema("the reference server's own fault hooks (slow steps, a hang, a KV cap, failing a "
                               "fraction with 500, wedging on a class of input)")
    needs_started_target = True

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.hooks = {k: v for k in HOOKS if (v := getattr(spec.params, k)) is not None}
        d = spec.params.duration
        self.revert_at = None if d is None else spec.at + d
        self.urls: list[str] = []  # the replicas asked
        self.accepted: list[str] = []  # those that took the hooks: the ones the fault really touched

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        problems = []
        if target.kind != "reference":
            problems.append((("type",), "server_hook needs a reference target"))
        if not any(k in fault for k in HOOKS):
            problems.append(((), f"server_hook needs one of {', '.join(HOOKS)}"))
        return problems

    def plan(self, ctx: FaultContext) -> dict:
        if self.spec.params.instance == "all":
            victims = self.target.instances
        else:
            victims = self._pick(ctx)
        self.urls = [i.url for i in victims]
        return {"urls": self.urls, "hooks": sorted(self.hooks)}

    def touches(self, inst) -> bool:
        return inst.url in self.accepted

    @property
    def _token(self) -> str | None:
        return getattr(self.target, "fault_token", None)  # the run's own; it never goes to the journal

    def apply(self, ctx: FaultContext) -> None:
        """Raises FaultError when no replica took the hooks: the run must not judge a fault that never happened.
        When only some refused, apply_error says which and the fault counts for the others."""
        self.applied = True
        self.accepted, refused = post_each(self.urls, "/admin/faults", self.hooks, self._token)
        for url, why in refused.items():
            ctx.log(f"server_hook: {url} did not accept {self.hooks}: {why}")
        if refused:
            self.apply_error = "refused by " + "; ".join(f"{url}: {why}" for url, why in refused.items())
        if self.urls and not self.accepted:
            self.applied = False
            raise FaultError(f"fault {self.spec.name}: no instance accepted the hooks, so the fault never "
                             f"happened ({self.apply_error})")

    def revert(self, ctx: FaultContext) -> None:
        self.reverted = True
        for url in self.urls:  # the refused ones too: harmless, and one may have taken the hooks after all
            for name in self.hooks:
                call("DELETE", f"{url}/admin/faults/{name}", token=self._token)

    def describe(self) -> str:
        hooks = ", ".join(f"{k}={v}" for k, v in self.hooks.items())
        dur = "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"
        n = len(self.urls) or "the"
        if self.apply_error and self.urls:
            n = f"{len(self.accepted)} of {len(self.urls)}"
        return f"{hooks} on {n} instance(s) at {self.spec.at:g}s{dur}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        # The run's fault token died with it (it is never written down), so the hooks cannot be switched off
        # over HTTP; they live only in the replicas' memory, and recover stops those replicas next.
        return "hooks end with the replicas, which recover stops"
