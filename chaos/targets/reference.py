"""N replicas of the bundled reference server, each its own process group."""

from __future__ import annotations

import os
import sys

from .base import Instance, Target, TargetError, free_port, spawn


class ReferenceTarget(Target):
    kind = "reference"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        s = spec.settings
        self.model = s.get("model_name", "chaos-reference")
        for i in range(spec.replicas):
            port = free_port()
            self.instances.append(Instance(i, f"r{i}", f"http://127.0.0.1:{port}", port,
                                           log_path=os.path.join(out_dir, f"replica-r{i}.log")))

    def command(self, inst: Instance) -> list[str]:
        s = self.spec.settings
        # Replicas share the cores here: one torch thread each unless the file says otherwise.
        threads = s.get("threads", 1 if self.spec.replicas > 1 else 0)
        cmd = [sys.executable, "-m", "chaos", "reference", "serve", "--host", "127.0.0.1", "--port", str(inst.port),
               "--replica-id", inst.id, "--preset", s.get("preset", "small"), "--model-name", self.model,
               "--threads", str(threads), "--enable-fault-hooks", "--drain-timeout", "5"]
        if "max_model_len" in s:
            cmd += ["--max-model-len", str(s["max_model_len"])]
        return cmd + list(s.get("args", []))

    def start_instance(self, inst: Instance) -> None:
        inst.proc, inst.create_time = spawn(self.command(inst), inst.log_path)
        inst.pid = inst.proc.pid
        inst.state = "starting"

    def up(self, should_stop=lambda: False) -> None:
        for inst in self.instances:
            self.start_instance(inst)
        for inst in self.instances:
            self.wait_healthy(inst, self.spec.startup_timeout, should_stop)
        if not self.instances:
            raise TargetError("the target has no replicas")
