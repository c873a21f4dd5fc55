"""Runs the engine on its own thread and hands outputs to asyncio tasks.

torch releases the GIL inside its kernels, so the HTTP event loop stays responsive
while a step computes. Requests and aborts cross into the engine thread through an
inbox; each step's outputs cross back in one call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import AsyncIterator

from ...errors import ServiceError
from ..config import EngineConfig
from .llm_engine import LLMEngine, RequestOutput
from .sequence import SamplingParams


class EngineDeadError(ServiceError, RuntimeError):
    pass


class AsyncEngine:
    def __init__(self, config: EngineConfig):
        self.engine = LLMEngine(config)
        self.config = config
        self._inbox: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._streams: dict[str, asyncio.Queue] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.dead: BaseException | None = None
        # Fault hooks (see chaos.reference.faults): read by the engine thread each step.
        self.step_delay = 0.0
        self.step_slowdown = config.step_slowdown  # each step takes this factor of its measured time
        self._slowdown_owed = 0.0  # seconds of slowdown not yet waited (see _slow_down)
        self._hang_until = 0.0
        self._hang_cancel = threading.Event()
        self._stalls = config.build.stall_draw()  # the build's own stalls (--stall-fraction), not a fault hook
        self._pace = config.build.pace_draw()
        self.last_step_time = time.monotonic()
        self.step_observer = None  # called (seconds, num_tokens) after each step, on the engine thread

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self._stop.set()
        self._hang_cancel.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    @property
    def num_running(self) -> int:
        return self.engine.num_running

    @property
    def num_waiting(self) -> int:
        return max(0, len(self._streams) - self.engine.num_running)

    # -- fault hooks --------------------------------------------------------------------------
    def hang(self, seconds: float) -> None:
        self._hang_cancel.clear()
        self._hang_until = time.monotonic() + seconds
        self._wake.set()

    def end_hang(self) -> None:
        self._hang_until = 0.0
        self._hang_cancel.set()

    def inject_failure(self, message: str) -> None:
        def fail():
            raise RuntimeError(message)
        self._inbox.put(("call", fail))
        self._wake.set()

    def set_step_slowdown(self, factor: float) -> None:
        self._slowdown_owed = 0.0  # a new factor starts with nothing owed and no credit from the last one
        self.step_slowdown = factor

    def _slow_down(self, elapsed: float) -> None:
        """Wait (step_slowdown - 1) x this step's time. A timed wait overshoots by ~0.1 ms, a tenth of a tiny
        model's step, so the wait actually taken is counted against what is owed: over many steps the engine
        spends exactly factor x its compute time, even where a single step's wait is below the timer's grain."""
        self._slowdown_owed += (self.step_slowdown - 1.0) * elapsed
        if self._slowdown_owed > 0:
            t0 = time.perf_counter()
            self._stop.wait(self._slowdown_owed)
            self._slowdown_owed -= time.perf_counter() - t0

    def set_block_cap(self, cap: int | None) -> None:
        self._inbox.put(("call", lambda: self.engine.block_manager.set_block_cap(cap)))
        self._wake.set()

    # -- requests -------------------------------------------------------------------------------
    async def generate(self, request_id: str, prompt_ids: list[int],
                       params: SamplingParams) -> AsyncIterator[RequestOutput]:
        """Outputs of one request as they are produced. Leaving early aborts it and frees its blocks."""
        if self.dead is not None:
            raise EngineDeadError(f"the engine has stopped: {self.dead!r}")
        if request_id in self._streams:
            raise ValueError(f"duplicate request id {request_id!r}")
        q: asyncio.Queue = asyncio.Queue()
        self._streams[request_id] = q
        pace, t0 = self._pace.next(), time.monotonic()
        self._inbox.put(("add", request_id, prompt_ids, params))
        self._wake.set()
        finished = False
        try:
            while True:
                item = await q.get()
                if isinstance(item, BaseException):
                    raise EngineDeadError(f"the engine has stopped: {item!r}")
                t, out = item
                if pace > 1.0:  # the request's whole timeline from its arrival stretched by its pace factor
                    wait = t0 + pace * (t - t0) - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
                finished = out.finished
                yield out
                if finished:
                    return
        finally:
            self._streams.pop(request_id, None)
            if not finished:
                self._inbox.put(("abort", request_id))
                self._wake.set()

    # -- the engine thread --------------------------------------------------------------------
    def _drain_inbox(self) -> None:
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return
            kind = item[0]
            if kind == "add":
                _, rid, prompt_ids, params = item
                try:
                    self.engine.add_request(rid, prompt_ids, params)
                except Exception as e:  # one request's input: it fails alone, the engine serves on
                    status = 400 if isinstance(e, ValueError) else 500
                    self._deliver([RequestOutput(rid, finish_reason="error", error=str(e), error_status=status)])
            elif kind == "abort":
                self.engine.abort_request(item[1])
            elif kind == "call":
                item[1]()

    def _deliver(self, outputs: list[RequestOutput]) -> None:
        if outputs and self._loop is not None:
            self._loop.call_soon_threadsafe(self._dispatch, outputs)

    def _dispatch(self, outputs) -> None:
        if isinstance(outputs, BaseException):
            for q in self._streams.values():
                q.put_nowait(outputs)
            return
        now = time.monotonic()  # when the engine's output reached the loop: a paced request is held from here
        for out in outputs:
            q = self._streams.get(out.request_id)
            if q is not None:
                q.put_nowait((now, out))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                remaining = self._hang_until - time.monotonic()
                if remaining > 0:
                    self._hang_cancel.wait(min(remaining, 0.5))
                    continue
                self._drain_inbox()
                if not self.engine.has_unfinished_requests():
                    self._wake.wait(0.5)
                    self._wake.clear()
                    self.last_step_time = time.monotonic()
                    continue
                t0 = time.perf_counter()
                outputs = self.engine.step()
                elapsed = time.perf_counter() - t0
                self.last_step_time = time.monotonic()
                if self.step_observer is not None:
                    self.step_observer(elapsed)
                if self.step_slowdown > 1.0:
                    self._slow_down(elapsed)  # before delivering: the step's own tokens come out late
                if stall := self._stalls.next():
                    self._stop.wait(stall)
                self._deliver(outputs)
                if self.step_delay > 0:
                    self._stop.wait(self.step_delay)
        except BaseException as e:  # the engine is dead: every waiter must hear it
            self.dead = e
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._dispatch, e)
            raise
