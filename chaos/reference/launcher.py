"""Start a reference server as a child process and wait until it is ready.

Used by the demo and the tests now, by the `reference` target kind later. Each
server runs in its own session (process group), so stopping it stops everything it
started.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from ..common import FAULT_TOKEN_ENV, stop_group
from ..errors import SetupError

READY = re.compile(r"listening on (http://\S+)")


class LaunchError(SetupError, RuntimeError):
    pass


@dataclass
class ServerProcess:
    proc: subprocess.Popen
    base_url: str
    output: list[str] = field(default_factory=list)
    fault_token: str | None = field(default=None, repr=False)  # send as x-chaos-fault-token on /admin/faults

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM (drain), then SIGKILL the whole group if it lingers. Returns the exit code."""
        if self.proc.poll() is None:
            stop_group(self.proc.pid, None, timeout, self.proc)
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_server(args: list[str], timeout: float = 60.0, env: dict | None = None,
                 command: str = "serve") -> ServerProcess:
    """Run `chaos reference serve ARGS` (or gateway; --port 0 unless given); return once it prints its URL.

    With --enable-fault-hooks and no CHAOS_FAULT_TOKEN in env (or this environment), a fresh token is made and
    passed by environment; it is ServerProcess.fault_token either way."""
    if "--port" not in args:
        args = [*args, "--port", "0"]
    cmd = [sys.executable, "-m", "chaos", "reference", command, *args]
    env = {**os.environ, **(env or {})}
    token = None
    if "--enable-fault-hooks" in args:
        token = env.get(FAULT_TOKEN_ENV) or secrets.token_urlsafe(24)
        env[FAULT_TOKEN_ENV] = token
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    lines: list[str] = []
    found: list[str] = []
    ready = threading.Event()

    def pump():
        for line in proc.stdout:  # keep draining so the child never blocks on a full pipe
            lines.append(line.rstrip("\n"))
            m = READY.search(line)
            if m and not found:
                found.append(m.group(1))
                ready.set()
        ready.set()

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not ready.wait(0.1):
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise LaunchError(f"server not ready after {timeout:.0f}s: {' | '.join(lines[-5:])}")
    if not found:
        proc.wait(5)
        raise LaunchError(f"server exited with {proc.returncode} before it was ready: {' | '.join(lines[-5:])}")
    return ServerProcess(proc, found[0], lines, token)


def start_gateway(primaries: list[ServerProcess], backups: list[ServerProcess] = (), args: list[str] = (),
                  names: list[str] | None = None) -> ServerProcess:
    ups = []
    for i, s in enumerate(primaries):
        ups += ["--upstream", f"{names[i] if names else f'r{i}'}={s.base_url}"]
    for i, s in enumerate(backups):
        ups += ["--backup", f"b{i}={s.base_url}"]
    return start_server([*ups, *args], command="gateway")
