"""The timed replay's dispatcher, run inside a Locust process (chaos.load.locustfile): it reads the log as a
stream and spawns each send at its intended time, and accounts for every request of its window."""

from __future__ import annotations

import json
import os

import gevent
import gevent.lock
import gevent.pool
from locust.runners import WorkerRunner

from ..accounts import ReplayAccount
from .opts import ReplayOptions
from .log import iter_replay
from ..workloads import replay_request


class Replayer:
    """A timed replay: every request of this process's share of the log window, once, in time order, at its
    intended time (t0 + offset / speed, open loop: a late send is never caught up by spacing the rest).

    One greenlet reads the log as a stream and sleeps until each request's time; each send is its own greenlet, so
    a burst never waits for a free user (only for one of max_users slots, and that wait counts as lag: t_start is
    taken after the slot). A request counts as owed from the moment it is read, and the end of the run accounts
    for each one: sent, or not sent with why (records.ReplayAccount, written as replay-<worker>.json)."""

    def __init__(self, user, proc, plan, workload, cfg: dict, now):
        """user: the LLMUser that sends (run_request); proc: the locustfile's per-process state; now: its clock."""
        self.user, self.proc, self.plan, self.workload, self.now = user, proc, plan, workload, now
        self.timeouts, self.retry = cfg["timeouts"], cfg["retry"]
        self.acct = ReplayAccount(self.proc.worker_name)
        self.sends = gevent.pool.Group()
        self.slots = gevent.lock.BoundedSemaphore(self.plan.stages[0].users)
        self.path = os.path.join(os.path.dirname(cfg["records_path"]), f"replay-{self.proc.worker_name}.json")

    def run(self):
        stopped = True
        try:
            self._write()  # an account from the start: a process killed later still leaves one (done: false)
            self._dispatch()
            # every send is bounded by its own timeouts, retries included; this only bounds the wait for them
            drain = self.timeouts["total"] * (self.retry["max"] + 1) + self.retry["max"] * self.retry.get("max_delay_s", 10.0) + 5
            self.sends.join(timeout=drain)
            stopped = False
        finally:
            self.acct.done = True
            if self.sends:
                self.sends.kill(block=False)  # their records say cancelled: they were sent
            self._write()
        if not stopped:
            self._end_run()

    def _dispatch(self):
        spec = next(s for s, _ in self.workload.specs if s.name == "replay")
        limit = self.plan.max_requests  # the window: the first max_requests of the log (passes repeat), else all of it
        passes = max(1, limit) if limit else 1  # iter_replay stops after a pass with nothing readable
        t0 = None  # the replay's start: when its first request is ready (the reorder window, and with --scrub the
        # scrubbing, of the first 1,000 lines are read before it; a start taken before that made them all late)
        newest = -1.0
        n = 0  # readable requests of the whole log seen so far, every process's share
        for item in iter_replay(spec.replay_file, passes=passes, options=ReplayOptions.of(spec.extra)):
            if item.entry is None and item.filtered:
                self.acct.filtered += 1  # not a request of this replay: never owed
                continue
            if item.entry is None:
                self.acct.skipped += 1
                if len(self.acct.skipped_lines) < 20:
                    self.acct.skipped_lines.append(item.lineno)
                continue
            if limit is not None and n >= limit:
                break
            if t0 is None:
                t0 = self.now()
            mine = n % self.proc.count == self.proc.index
            n += 1
            if not mine:
                continue
            self.acct.window += 1
            offset = item.offset_s / self.plan.replay_speed
            if offset < newest:
                self.acct.late_in_log += 1
            newest = max(newest, offset)
            if t0 + offset - self.proc.t0 >= self.plan.duration:
                # the rest of the window falls after the plan: counted by the driver from its pre-scan, not read
                self.acct.miss("duration", item.lineno)
                self.acct.cut = "duration"
                return
            t_sched = t0 + offset
            gevent.sleep(max(0.0, t_sched - self.now()))
            self.sends.spawn(self._send, replay_request(item.entry, self.workload.counter, item.offset_s, item.lineno,
                                                        self.workload.ignore_eos), t_sched)
            # Let the send start now: the next read may be long (a new pass fills its reorder window, scrubbing
            # 1,000 lines), and file reads never yield to gevent: that send went out 100-160 ms late.
            gevent.sleep(0)
            if limit is not None and n >= limit:
                break  # the window is read: not a line more (reading on would start the next pass)

    def _send(self, req, t_sched: float):
        with self.slots:
            self.acct.sent += 1
            rec = self.user.run_request(req, t_sched, req.source_line or 0)
        self.proc.add(rec)
        self.user._fire_timings(rec)

    def _write(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.acct.to_dict(), f)
        os.replace(tmp, self.path)

    def _end_run(self):
        """The window is done: a local run ends now (a distributed one when its plan does)."""
        runner = self.user.environment.runner
        if runner is not None and not isinstance(runner, WorkerRunner):
            self.proc.flush()
            gevent.spawn_later(0.1, runner.quit)
