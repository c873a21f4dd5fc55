"""Any command line that serves an OpenAI-compatible API on {port}."""

from __future__ import annotations

import os
import shlex

from ..common import env_text
from .base import Instance, Target, TargetError, free_port


class ProcessTarget(Target):
    kind = "process"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        self.model = spec.settings.get("model")
        for i in range(spec.replicas):
            port = free_port()
            self.instances.append(Instance(i, f"p{i}", f"http://127.0.0.1:{port}", port,
                                           log_path=os.path.join(out_dir, f"process-p{i}.log"),
                                           metrics_path=spec.settings.get("metrics_path", "/metrics")))

    def command(self, inst: Instance) -> list[str]:
        cmd = self.spec.settings["command"]
        parts = shlex.split(cmd) if isinstance(cmd, str) else [str(p) for p in cmd]
        if not any("{port}" in p for p in parts):
            raise TargetError("the process target's command must contain {port}, where it should listen")
        return [p.replace("{port}", str(inst.port)).replace("{replica}", str(inst.index)) for p in parts]

    def start_instance(self, inst: Instance) -> None:
        self.launch(inst, self.command(inst), env_text(self.spec.settings.get("env")))

    def up(self, should_stop=lambda: False) -> None:
        for inst in self.instances:
            self.start_instance(inst)
        for inst in self.instances:
            self.wait_healthy(inst, self.spec.startup_timeout, should_stop)
