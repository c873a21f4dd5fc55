"""Server-side fault hooks, off unless the server runs with --enable-fault-hooks.

Experiments drive them over HTTP (POST /admin/faults, DELETE /admin/faults[/NAME]).
Each hook has apply and revert; reverting one that is not active does nothing.
"""

from __future__ import annotations

import os
import random
import signal
import time
from typing import TYPE_CHECKING

from .protocol import APIError

if TYPE_CHECKING:  # openapi.py reads HOOKS in the gateway, which must not import torch
    from .engine.async_engine import AsyncEngine

HOOKS = {
    "step_delay_ms": "add this many milliseconds to every engine step (slow decode)",
    "step_slowdown": "make every engine step take this factor (1.0-10.0) of its own time: after each step, wait "
                     "(factor - 1) x its measured duration before its tokens go out (1.2: 20 % slower)",
    "hang_s": "stop the engine for this many seconds (streams stall; /health still answers)",
    "kv_block_cap": "cap the usable KV-cache blocks (forces preemption; a request that cannot fit fails)",
    "fail_fraction": "answer this fraction (0-1) of generation requests with HTTP 500",
    "engine_error": "make the engine thread fail at its next step (/health and new requests turn 503, open "
                    "streams get an error event); cannot be reverted",
    "crash": "kill this server process now (SIGKILL; exit_code given: exit with it instead); cannot be reverted",
    "wedge_on": "arm a trigger: the first request whose prompt is of this class (nul, control, emoji, rtl, "
                "near_context) wedges the engine: it and every later request hang until the process restarts "
                "(the seed's replica that needed a restart); reverting disarms it but does not unwedge",
}

# A class of bad input that wedges a replica, as a prompt's text or length shows it.
WEDGE_CLASSES = {
    "nul": lambda text, n, ctx: "\x00" in text,
    "control": lambda text, n, ctx: any(c < " " and c not in "\t\n\r" for c in text),
    "emoji": lambda text, n, ctx: any(ord(c) >= 0x1F000 for c in text),
    "rtl": lambda text, n, ctx: any(c in "\u200f\u202b\u202e\u2067" for c in text),
    "near_context": lambda text, n, ctx: n >= 0.9 * ctx,
}
WEDGE_FOREVER_S = 10 * 365 * 24 * 3600


class ServerFaults:
    def __init__(self, engine: AsyncEngine, seed: int | None = None):
        self.engine = engine
        self.rng = random.Random(seed)
        self.active: dict[str, float | int | str] = {}
        self.wedged_by: str | None = None  # the class of input that wedged the engine; only a restart clears it

    def describe(self) -> dict:
        return {"active": dict(self.active), "available": HOOKS,
                **({"wedged_by": self.wedged_by} if self.wedged_by else {})}

    def check_wedge(self, prompt_ids: list[int], max_model_len: int) -> None:
        """With wedge_on armed, a prompt of its class wedges the engine for good (this request included)."""
        cls = self.active.get("wedge_on")
        if cls is None or self.wedged_by is not None:
            return
        text = self.engine.engine.tokenizer.decode(prompt_ids) if cls != "near_context" else ""
        if WEDGE_CLASSES[cls](text, len(prompt_ids), max_model_len):
            self.wedged_by = cls
            self.engine.hang(WEDGE_FOREVER_S)

    def apply(self, spec: dict) -> dict:
        if not isinstance(spec, dict) or not spec:
            raise APIError(400, f"give one or more of {sorted(HOOKS)}", param="body")
        for name in spec:
            if name not in HOOKS:
                raise APIError(400, f"unknown fault hook {name!r}; known: {sorted(HOOKS)}", param=name)
        for name, value in spec.items():
            getattr(self, f"_apply_{name}")(value)
        return self.describe()

    def revert(self, name: str | None = None) -> dict:
        names = list(self.active) if name is None else [name]
        for n in names:
            if n not in HOOKS:
                raise APIError(404, f"unknown fault hook {n!r}", param="name")
            if n in self.active:
                getattr(self, f"_revert_{n}")()
                del self.active[n]
        return self.describe()

    def should_fail(self) -> bool:
        f = self.active.get("fail_fraction", 0.0)
        return f > 0 and self.rng.random() < f

    @staticmethod
    def _num(name, value, lo, hi, integer=False):
        ok = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok or not lo <= value <= hi:
            kind = "an integer" if integer else "a number"
            raise APIError(400, f"{name} must be {kind} in [{lo}, {hi}], got {value!r}", param=name)
        return value

    def _apply_step_delay_ms(self, v):
        self.engine.step_delay = self._num("step_delay_ms", v, 0, 60_000) / 1000
        self.active["step_delay_ms"] = v

    def _revert_step_delay_ms(self):
        self.engine.step_delay = 0.0

    def _apply_step_slowdown(self, v):
        self.engine.set_step_slowdown(float(self._num("step_slowdown", v, 1.0, 10.0)))
        self.active["step_slowdown"] = v

    def _revert_step_slowdown(self):
        self.engine.set_step_slowdown(self.engine.config.step_slowdown)

    def _apply_hang_s(self, v):
        self.engine.hang(self._num("hang_s", v, 0, 3600))
        self.active["hang_s"] = v

    def _revert_hang_s(self):
        self.engine.end_hang()

    def _apply_kv_block_cap(self, v):
        self.engine.set_block_cap(self._num("kv_block_cap", v, 1, 1 << 30, integer=True))
        self.active["kv_block_cap"] = v

    def _revert_kv_block_cap(self):
        self.engine.set_block_cap(None)

    def _apply_fail_fraction(self, v):
        self.active["fail_fraction"] = self._num("fail_fraction", v, 0, 1)

    def _revert_fail_fraction(self):
        pass

    def _apply_engine_error(self, v):
        self.engine.inject_failure("injected fault: engine_error")
        self.active["engine_error"] = time.time()

    def _revert_engine_error(self):
        pass

    def _apply_crash(self, v):
        import asyncio

        if not (v is True or (isinstance(v, dict) and set(v) <= {"exit_code"})):
            raise APIError(400, 'crash takes true or {"exit_code": N}', param="crash")
        exit_code = v.get("exit_code") if isinstance(v, dict) else None
        if exit_code is not None:
            exit_code = self._num("crash.exit_code", exit_code, 0, 255, integer=True)
        def die():
            if exit_code is None:
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(int(exit_code))
        # Let the admin response go out first.
        asyncio.get_running_loop().call_later(0.05, die)
        self.active["crash"] = time.time()

    def _revert_crash(self):
        pass

    def _apply_wedge_on(self, v):
        if v not in WEDGE_CLASSES:
            raise APIError(400, f"wedge_on must be one of {sorted(WEDGE_CLASSES)}, got {v!r}", param="wedge_on")
        self.active["wedge_on"] = v

    def _revert_wedge_on(self):
        pass  # disarmed; a wedged engine stays wedged (engine.hang is not ended): that is the fault
