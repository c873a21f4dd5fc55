"""Instance faults: kill (SIGKILL or SIGTERM, N of M, restart after a delay) and pause/resume."""

from __future__ import annotations

import signal
from dataclasses import dataclass

from ..common import signal_group
from ..schemabits import DURATION, POSITIVE
from .base import Fault, FaultContext, Picks
from .params import setting

# A restarted instance needs its start-up (a reference replica: ~5 s alone here, 10-20 s on a loaded 2-core
# machine) and then time to be routed requests before the load ends; otherwise served_by_all and the checks after
# recovery cannot be judged.
STARTUP_ESTIMATE_S = {"reference": 15.0, "process": 15.0, "docker": 20.0, "stack": 20.0}
ROUTING_ESTIMATE_S = 10.0  # the gateway's health probe and ejection, then a few requests


@dataclass(slots=True, frozen=True, kw_only=True)
class KillParams(Picks):
    signal: str = setting({"enum": ["SIGKILL", "SIGTERM", "SIGINT", "SIGQUIT"]}, "SIGKILL")
    restart_after: float | None = setting(DURATION, None)  # None: down for the rest of the run


@dataclass(slots=True, frozen=True, kw_only=True)
class PauseParams(Picks):
    duration: float = setting(POSITIVE)


class InstanceFault(Fault):
    """A fault on N of the M instances the run started (processes or containers): never an openai target's."""

    needs_started_target = True
    counts_instances = True


class KillInstance(InstanceFault):
    type = "kill_instance"
    summary = "kill instances (signal, count: N of M); restart them after restart_after"
    Params = KillParams
    schema = KillParams.schema("kill instances (N of M with count); restart them after a delay")

    @classmethod
    def warnings(cls, spec, exp) -> list[str]:
        restart_after = spec.params.restart_after
        if restart_after is None:
            return []
        total = exp.load_duration
        startup = STARTUP_ESTIMATE_S.get(exp.target.kind, 15.0)
        restart_at = spec.at + restart_after
        needed = restart_at + startup + ROUTING_ESTIMATE_S
        if restart_at >= total:
            return [f"fault {spec.name}: the restart at {restart_at:g}s comes after the load ends ({total:g}s), so "
                    f"it never happens; checks that need the instance back are not judged"]
        if needed > total:
            return [f"fault {spec.name}: the restart begins at {restart_at:g}s; with ~{startup:g}s to start and "
                    f"~{ROUTING_ESTIMATE_S:g}s to be routed requests, the load ({total:g}s) may end first and "
                    f"served_by_all is then not judged: make the load at least {needed:g}s"]
        return []

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.sig = getattr(signal, spec.params.signal)
        ra = spec.params.restart_after
        self.revert_at = None if ra is None else spec.at + ra

    def plan(self, ctx: FaultContext) -> dict:
        return {**super().plan(ctx), "signal": self.sig.name}

    def leaves_down(self) -> bool:
        return self.revert_at is None  # no restart_after: killed for the rest of the run

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        for inst in self.victims:
            self.target.kill_instance(inst, self.sig)  # a process group, or a container on a docker target

    slow_revert = True  # a restart waits for health: the runner runs it beside the schedule, not in its way

    def revert(self, ctx: FaultContext) -> None:
        already, self.reverted = self.reverted, True
        if already or not self.applied:
            return
        down = [inst for inst in self.victims if inst.state != "up"]
        # All at once: one start-up for N victims, not N start-ups in a row (two replicas took ~23 s that way).
        self.target.restart_instances(down, ctx.should_stop)

    def describe(self) -> str:
        after = "" if self.revert_at is None else f", restarted after {self.revert_at - self.spec.at:g}s"
        return f"{self.sig.name} {self.victim_ids()} at {self.spec.at:g}s{after}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        return "killed instances are not restarted by recover; the run's processes are stopped instead"


class PauseInstance(InstanceFault):
    type = "pause_instance"
    summary = "freeze instances (SIGSTOP the process group, docker pause) for duration, then resume"
    Params = PauseParams
    schema = PauseParams.schema("SIGSTOP the instance's process group (docker pause), SIGCONT after duration")

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.revert_at = spec.at + spec.params.duration

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        for inst in self.victims:
            self.target.pause_instance(inst)

    def revert(self, ctx: FaultContext) -> None:
        self.reverted = True
        for inst in self.victims:
            if inst.state == "paused" or self.applied:
                self.target.resume_instance(inst)

    def describe(self) -> str:
        return f"pause {self.victim_ids()} at {self.spec.at:g}s for {self.spec.params.duration:g}s"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        done = []
        for inst in plan.get("instances", []):
            if inst.get("container"):
                from ..targets.docker import unpause_container
                if unpause_container(inst["container"], inst.get("engine")):
                    done.append(f"unpaused container {inst['container'][:12]}")
            elif signal_group(inst.get("pid"), inst.get("create_time"), signal.SIGCONT):
                done.append(f"SIGCONT to process group {inst['pid']} ({inst['id']})")
        return "; ".join(done) or "nothing paused was left"
