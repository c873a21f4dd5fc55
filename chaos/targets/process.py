"""Any command line that serves an OpenAI-compatible API on {port}."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field

from ..common import env_text
from .base import Instance, Target, TargetError


@dataclass(slots=True, frozen=True)
class CommandSettings:
    """A process or docker target's own settings (its section of the file, validated): what each instance runs
    and where it answers."""

    command: tuple[str, ...] | None = None  # its words; {port}, {host} and {replica} are filled in per instance
    model: str | None = None
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    env: dict[str, str] = field(default_factory=dict)  # as text: a boolean is passed as true or false

    @classmethod
    def from_dict(cls, s: dict, **more) -> CommandSettings:
        cmd = s.get("command")
        words = None if cmd is None else tuple(shlex.split(cmd) if isinstance(cmd, str) else map(str, cmd))
        return cls(command=words, model=s.get("model"), health_path=s.get("health_path", "/health"),
                   metrics_path=s.get("metrics_path", "/metrics"), env=env_text(s.get("env")), **more)

    def words(self, inst: Instance) -> list[str] | None:
        """The command for one instance, or None when there is none (a docker image's own)."""
        if self.command is None:
            return None
        return [w.replace("{port}", str(inst.port)).replace("{replica}", str(inst.index))
                .replace("{host}", inst.bind_address) for w in self.command]


class CommandTarget(Target):
    """A kind whose instances each run a command of the file's (a process, a container), named PREFIX0...:
    their settings read once, their ports found."""

    Settings: type[CommandSettings] = CommandSettings
    prefix, log_name = "p", "process"  # p0 logs to process-p0.log

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        self.conf = self.Settings.from_dict(spec.settings)
        self.model, self.health_path = self.conf.model, self.conf.health_path
        self.plan_hosts()
        for i in range(spec.replicas):
            iid = f"{self.prefix}{i}"
            self.instances.append(Instance.placed(i, iid, os.path.join(out_dir, f"{self.log_name}-{iid}.log"),
                                                  self.hosts, metrics_path=self.conf.metrics_path))


class ProcessTarget(CommandTarget):
    kind = "process"

    def command(self, inst: Instance) -> list[str]:
        if not any("{port}" in w for w in self.conf.command):
            raise TargetError("the process target's command must contain {port}, where it should listen")
        return self.conf.words(inst)

    def start_instance(self, inst: Instance) -> None:
        self.launch(inst, self.command(inst), self.conf.env)

    def up(self, should_stop=lambda: False) -> None:
        for inst in self.instances:
            self.start_instance(inst)
        for inst in self.instances:
            self.wait_healthy(inst, self.spec.startup_timeout, should_stop)
