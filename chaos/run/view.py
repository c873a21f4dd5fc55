"""What a person watching a run sees: a rich live panel on a terminal, plain lines otherwise, JSON with --json."""

from __future__ import annotations

import json
import sys
import time


class View:
    def __init__(self, mode: str = "auto"):
        if mode == "auto":
            mode = "live" if sys.stdout.isatty() else "plain"
        self.mode = mode
        self._live = None
        self._last_plain = 0.0
        self.scrub = lambda obj: obj  # the runner's: secrets never reach the terminal

    def start(self):
        if self.mode == "live":
            from rich.live import Live

            self._live = Live(refresh_per_second=4, transient=False)
            self._live.start()

    def stop(self):
        if self._live is not None:
            self._live.stop()
            self._live = None

    def event(self, kind: str, message: str, **fields):
        message, fields = self.scrub(message), self.scrub(fields)
        if self.mode == "json":
            print(json.dumps({"t": round(time.time(), 3), "event": kind, "message": message, **fields}), flush=True)
        elif self._live is not None:
            self._live.console.print(f"[bold]{kind}[/bold] {message}")
        else:
            print(f"{kind}: {message}", flush=True)

    def status(self, s: dict):
        s = self.scrub(s)
        if self.mode == "json":
            now = time.time()
            if now - self._last_plain >= 5:
                self._last_plain = now
                print(json.dumps({"t": round(now, 3), "event": "status", **s}), flush=True)
            return
        if self._live is not None:
            from rich.table import Table

            t = Table(title=f"{s['name']}  {s['elapsed']:.0f}s / {s['total']:.0f}s", show_header=False)
            for k in ("users", "requests", "rolling_p95", "error_rate", "active_faults", "instances"):
                t.add_row(k.replace("_", " "), str(s.get(k, "")))
            self._live.update(t)
            return
        now = time.time()
        if now - self._last_plain >= 5:
            self._last_plain = now
            print(f"[{s['elapsed']:5.0f}s] users {s['users']}  requests {s['requests']}  P95 {s['rolling_p95']}  "
                  f"errors {s['error_rate']}  faults: {s['active_faults']}  instances: {s['instances']}", flush=True)
