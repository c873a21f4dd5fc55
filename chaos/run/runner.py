"""One experiment run, start to finish. Rollback is guaranteed: whatever happens after the first
fault is journaled, the `finally` reverts every fault and stops every process the run started.

Signals only set flags (the loops poll them): the first SIGINT/SIGTERM stops gracefully, a
second one makes the rollback faster but never skips it. A SIGKILLed run leaves its journal;
`chaos recover RUN_DIR` undoes what it left behind.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import threading
import time
import traceback

import psutil

from ..errors import Interrupted, exit_code
from ..experiment.loadspec import load_config
from ..experiment.model import Experiment
from ..experiment.variables import Masker
from ..faults import FAULT_TYPES, FaultContext, FaultError, make_fault, wanted_links
from ..host import HOST_FILE, HostSampler
from ..load.clock import Clock
from ..load.driver import LoadError, LoadRun, take_target
from ..rundir.files import JOURNAL, RESOLVED
from ..targets import TargetError, make_target
from ..targets.links import Links
from ..verify import checks as V
from ..verify.stats import scipy_stats
from ..rundir.journal import Event, Journal, journal_spawn
from ..rundir.procs import RUN_ID_ENV, become_subreaper, create_time, marked, run_id_for
from .scrape import start_for_run
from .stops import preflight_stops, start_stops
from .timing import restart_warnings
from .view import View
from .wrapup import (
    EXIT_ABORTED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    finish,
    reap_orphans,
    save_metrics,
)

# A restart still stopping its instances when the load ends: how much longer than startup_timeout the run waits
# for it (a process group's stop takes its 2 s grace and a reap; a container's stop, a little more).
STOP_ALLOWANCE_S = 15.0
# The longest a run waits, before its load, for the checks' imports (0.6 s on a quiet box): past it the load starts
# anyway, and the first check that needs them waits for the rest.
WARM_IMPORTS_MAX_S = 120.0


def _warm_imports() -> None:
    try:
        scipy_stats()
    except Exception:  # noqa: BLE001 - the verifier's own import says what is wrong, where it matters
        pass


def default_run_dir(name: str) -> str:
    base = os.path.join("reports", f"{name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    path, n = base, 1
    while os.path.exists(path):  # two runs in the same second keep separate journals
        n += 1
        path = f"{base}-{n}"
    return path


class Runner:
    def __init__(self, exp: Experiment, run_dir: str | None = None, view: View | None = None):
        self.exp = exp
        self.run_dir = run_dir or default_run_dir(exp.name)
        self.view = view or View("plain")
        self.view.scrub = self.public
        self.signals = 0
        # The wall clock, read once, when the run begins: the journal, the faults, the scrapes and (handed to
        # Locust) every record are stamped on this one timeline, immune to clock steps.
        self.clock = Clock()
        self.started = self.clock.wall0
        self.started_m = time.monotonic()  # every duration and the schedule
        self.mask = getattr(exp, "mask", None) or Masker()
        self.target = None
        self.load: LoadRun | None = None
        self.load_t0: float | None = None  # wall time the load started (records are unix seconds)
        self.load_m0: float | None = None  # the same moment, monotonic: faults, aborts and restarts run on it
        self.faults = []
        # The records the live checks look at (the gate, abort_when, the status line): only the last few
        # windows' worth, so a long run neither grows in memory nor rescans every record each tick; the
        # verdict reads requests.jsonl whole, once, at the end (wrapup.py).
        self.recent: list = []
        self.num_records = 0
        self.notes: list[str] = []
        self.gate = None  # (passed, detail) of the steady-state gate
        self.reason: str | None = None
        self.rng = random.Random(exp.load.seed)
        self.ctx = FaultContext(rng=self.rng, should_stop=lambda: self.signals > 1,
                                log=lambda m: self.view.event("note", m))
        self.run_id = run_id_for(self.run_dir)
        self.tearing_down = False
        self.restarts: list[threading.Thread] = []  # slow reverts (restarts) running beside the schedule
        self.up_since: dict = {}  # instance id -> last health pass, as the load ended
        self.final_health = None
        self.scraper = None  # chaos.run.scrape.Scraper: /metrics through the run, from before the load
        self.stops = None  # chaos.run.stops.Stops: abort_when on scraped metrics and PromQL
        self.host: HostSampler | None = None  # the host's CPU, load and pressure, every second of the run

    def now(self) -> float:
        """Unix seconds on the records' clock (chaos.load.clock): a wall-clock step (NTP, a VM stalled or
        resumed) moves neither the fault times nor the journal against the records."""
        return self.clock.now()

    def public(self, obj):
        """obj with every secret scrubbed: the experiment's secret variables and API key (its mask, from
        chaos.experiment), and, once the target exists, this run's fault token. Applied to everything the run
        writes or prints."""
        return self.mask(obj)

    # -- signals ------------------------------------------------------------------------------------
    def _on_signal(self, signum, frame):
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            self.view.event("interrupt", f"{name}: stopping; faults will be reverted (again to hurry)")
        else:
            self.view.event("interrupt", f"{name} again: reverting faster")

    def should_stop(self) -> bool:
        return self.signals > 0

    # -- the run --------------------------------------------------------------------------------------
    def execute(self) -> int:
        # First: a signal from here on stops the run cleanly (before, the process dies having started nothing).
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.run_dir, RESOLVED), "w") as f:
            json.dump(self.public(self.exp.resolved), f, indent=2, default=str)
        self.journal = Journal(os.path.join(self.run_dir, JOURNAL), scrub=self.public, clock=self.now)
        me = psutil.Process()
        self.journal.write(Event.RUN_STARTED, experiment=self.exp.name, pid=me.pid, create_time=me.create_time(),
                           run_dir=os.path.abspath(self.run_dir), run_id=self.run_id)
        # Every process the run starts inherits the mark, so recover finds even one that left its group.
        old_mark = os.environ.get(RUN_ID_ENV)
        os.environ[RUN_ID_ENV] = self.run_id
        become_subreaper()
        # The checks need scipy.stats (0.6 s to import): imported while the target starts, which is waiting, and
        # done before the load starts (_start_load waits for it).
        self.warm_imports = threading.Thread(target=_warm_imports, name="warm-imports", daemon=True)
        self.warm_imports.start()
        code = None
        try:
            self._sample_host()
            self.view.start()
            for w in restart_warnings(self.exp):
                self.notes.append(f"warning: {w}")
                self.view.event("warning", w)
            self._target_up()
            self._start_load()
            code = self._main_loop()
        except Interrupted as e:
            code, self.reason = exit_code(e), "interrupted by a signal"
        except (TargetError, LoadError, FaultError) as e:  # the errors a run expects; any other is a bug, below
            code, self.reason = exit_code(e), str(e)
            self.view.event("error", str(e))
        except Exception as e:  # a bug of ours: keep the traceback, still roll back
            code, self.reason = EXIT_INVALID, f"internal error: {e!r}"
            with open(os.path.join(self.run_dir, "error.txt"), "w") as f:
                f.write(self.public(traceback.format_exc()))
            self.view.event("error", f"{self.reason} (traceback in error.txt)")
        finally:
            try:
                self._rollback()
            finally:  # stopped there before the target went down; again here (idempotent) if the rollback raised
                if self.scraper is not None:
                    self.scraper.stop()
                if self.host is not None:
                    self.host.stop()
            if self.signals:  # whatever was under way when the signal came, the run was interrupted
                code, self.reason = EXIT_INTERRUPTED, "interrupted by a signal"
            code = finish(self, code)
            self.view.stop()
            for s, h in old.items():
                signal.signal(s, h)
            if old_mark is None:
                os.environ.pop(RUN_ID_ENV, None)
            else:
                os.environ[RUN_ID_ENV] = old_mark
        return code

    def _sample_host(self) -> None:
        """From the first moment: a neighbour that slows the target's start shows too. A container's processes
        are not the runner's descendants; they carry the run's mark, and are found by it."""
        kind = self.exp.target.kind
        extra = (lambda: [p.pid for p in marked(self.run_id)]) if kind == "docker" else None
        self.host = HostSampler(os.path.join(self.run_dir, HOST_FILE), clock=self.now, extra_pids=extra).start()
        self.journal.write(Event.HOST_SAMPLING, interval=self.host.interval, file=HOST_FILE, ncpu=self.host.ncpu)

    def _journal_spawn(self, inst) -> None:
        journal_spawn(self.journal, inst, restart=self.load is not None)

    def _target_up(self) -> None:
        preflight_stops(self.exp)  # a Prometheus abort_when cannot ask ends the run before anything starts
        for spec in self.exp.faults:  # what this machine lacks for a fault (root, netem) ends it here too
            FAULT_TYPES[spec.type].preflight(spec)
        self.target = make_target(self.exp.target, self.run_dir)
        token = getattr(self.target, "fault_token", None)
        if token:  # one more secret to mask, in a Masker of the run's own (the experiment's stays as it was)
            self.mask = self.mask.with_secret(token)
        self.target.on_spawn = self._journal_spawn
        self.target.on_hosts = lambda layout: self.journal.write(Event.HOSTS_CREATING, layout=layout)  # before
        self.target.clock = self.now  # up_since on the records' clock
        self.journal.write(Event.TARGET_STARTING, kind=self.target.kind, instances=[i.journal() for i in
                                                                                 self.target.all_instances()])
        names = ", ".join(i.id for i in self.target.all_instances())
        self.view.event("target", f"starting {self.exp.target.kind} target: {names}")
        try:
            self._links_up()
            self.target.up(self.should_stop)
        finally:
            # Journal what exists even if up failed half way, so recover can stop it.
            self.journal.write(Event.TARGET_STARTED, instances=[i.journal() for i in self.target.all_instances()])
        if self.should_stop():
            raise Interrupted()
        self.view.event("target", "healthy: " + ", ".join(f"{i.id} {i.url}" for i in self.target.all_instances()))

    def _links_up(self) -> None:
        """The links' proxies, before the target: a gateway is started pointing at its replicas' links."""
        wanted = wanted_links(self.exp)
        if not wanted:
            return
        # Proxy names go into the Toxiproxy API's URL paths, and a user's server may hold other runs' proxies.
        tag = hashlib.sha256(f"{self.run_id}:{self.started}".encode()).hexdigest()[:8]
        links = Links(self.target, wanted, self.run_dir, run_tag=tag)
        links.on_spawn = self._journal_spawn
        links.on_created = lambda info: self.journal.write(Event.LINKS_CREATING, **info)  # before any fault, fsynced
        self.target.links = links
        self.journal.write(Event.LINKS, links=links.describe())
        links.up(self.should_stop)
        self.journal.write(Event.LINKS_UP, links=links.describe())
        for line in links.summary():
            self.view.event("link", line)

    def _await_warm_imports(self) -> None:
        """Whatever the warm-up thread still has to import, before the load: the steady-state gate needs
        scipy.stats, and a main loop that waits for an import holds the fault schedule back. In CI the import ran at
        nice 19 beside a busy neighbour, the gate waited ~15 s for it, and each fault 4 s in was applied after the
        load had ended. Here, before the load, a slow import costs only a later start."""
        began = time.monotonic()
        said = False
        while self.warm_imports.is_alive() and time.monotonic() - began < WARM_IMPORTS_MAX_S:
            if self.should_stop():
                raise Interrupted()
            if not said and time.monotonic() - began > 2.0:
                said = True
                self.view.event("verifier", "loading scipy.stats before the load starts (the machine is busy)")
            self.warm_imports.join(0.2)
        if said:
            self.journal.write(Event.WARM_IMPORTS, waited_s=round(time.monotonic() - began, 3))

    def _start_load(self) -> None:
        self._await_warm_imports()
        cfg = load_config(self.exp.load, self.target.urls, self.target.model, self.target.api_key_env, self.run_dir,
                          ignore_eos=self.exp.target.ignore_eos)
        take_target(cfg, self.exp.target, self.target)
        cfg.limits = self.target.limits  # a vendor's stated rate and token limits: the load keeps to them
        self.scraper = start_for_run(self, cfg.plan.duration, self.exp.target.startup_timeout + STOP_ALLOWANCE_S)
        self.stops = start_stops(self, self.scraper)
        self.load = LoadRun(cfg, progress=lambda m: None, clock=self.clock)
        self.load.start()
        self.load_t0, self.load_m0 = self.load.t_start, self.load.mono_start
        procs = [{"pid": p.pid, "create_time": create_time(p.pid)} for p in self.load.procs]
        self.journal.write(Event.LOAD_STARTED, processes=procs, plan=cfg.plan.to_dict()["kind"],
                           duration=cfg.plan.duration)
        where = ", ".join(self.target.urls)
        self.view.event("load", f"{cfg.plan.kind} load for {cfg.plan.duration:.0f}s against {where}, "
                                f"model {self.load.model}")

    def _main_loop(self) -> int | None:
        pending = sorted((make_fault(s, self.target) for s in self.exp.faults), key=lambda f: f.spec.at)
        self.faults = list(pending)
        plan = self.load.cfg.plan
        while True:
            if self.should_stop():
                raise Interrupted()
            running = self.load.poll()
            self._take(self.load.new_records())
            elapsed = time.monotonic() - self.load_m0
            while pending and elapsed >= pending[0].spec.at:
                f = pending.pop(0)
                if self.gate is None:
                    self.gate = self._steady_gate()
                    if not self.gate[0]:
                        self.journal.write(Event.STEADY_STATE_FAILED, detail=self.gate[1])
                        self.reason = f"steady state not met before faults ({self.gate[1]}); no faults injected"
                        self.view.event("steady-state", self.reason)
                        return EXIT_FAILED
                    self.journal.write(Event.STEADY_STATE_OK, detail=self.gate[1])
                self._apply(f)
            for f in self.faults:
                if f.applied and not (f.reverted or f.reverting) and f.revert_at is not None \
                        and elapsed >= f.revert_at:
                    self._revert(f)
            aborted = self._abort_check() or self._stop_condition()
            if aborted:
                self.reason = aborted
                self.journal.write(Event.ABORT, reason=aborted)
                self.view.event("abort", aborted)
                return EXIT_ABORTED
            self.view.status(self._status(elapsed, plan))
            if not running:
                self._await_restarts()
                self.up_since = {i.id: i.up_since for i in self.target.instances}
                return None
            time.sleep(0.2)

    def _take(self, new: list) -> None:
        """Count new records and keep those the live checks can still look at."""
        self.num_records += len(new)
        keep_from = self.now() - max(self.exp.steady_window, self.exp.abort_for or 0, 10.0) - 5.0
        self.recent = [r for r in self.recent + new if (r.t_end or r.t_start) >= keep_from]

    def _await_restarts(self) -> None:
        """The load is over but a restart is still under way: wait for it to end, so the checks and the final
        health see how it ended rather than the runner's hurry. The restart bounds itself: its instances have
        startup_timeout from their start, all together, to pass the health check (Target.restart_instances);
        the deadline here only guards against a stop that hangs (e.g. a container engine that does not answer)."""
        deadline = time.monotonic() + self.exp.target.startup_timeout + STOP_ALLOWANCE_S
        while any(t.is_alive() for t in self.restarts) and time.monotonic() < deadline:
            if self.should_stop():
                raise Interrupted()
            time.sleep(0.2)

    def _steady_gate(self) -> tuple[bool, str]:
        now = self.now()
        if self.exp.steady_health:
            sick = [i.id for i in self.target.instances if not self.target.healthy(i)]
            if sick:
                return False, f"unhealthy: {', '.join(sick)}"
        slo = self.exp.steady_slo
        if slo.is_empty():
            return True, "no steady-state SLO given; health only"
        w = V.window(self.recent, now - self.exp.steady_window, now)
        got = V.slo_checks("steady state", [r for r in w if r.t_end is not None], slo, min_requests=3,
                           judge_few=True)
        bad = [f"{c.name.split()[-1]} {c.measured} (needs {c.threshold})" for c in got if not c.passed]
        return (not bad), ("; ".join(bad) if bad else
                           "; ".join(f"{c.name.split()[-1]} {c.measured}" for c in got))

    def _apply(self, f) -> None:
        plan = f.plan(self.ctx)
        self.journal.write(Event.FAULT_APPLYING, fault=f.spec.name, type=f.type, plan=plan)  # before, always
        f.applied_at = self.now()
        try:
            f.apply(self.ctx)
        finally:
            self.journal.write(Event.FAULT_APPLIED, fault=f.spec.name, description=f.describe(), error=f.apply_error)
            if f.apply_error:
                self.notes.append(f"{f.spec.name}: {f.apply_error}")
        self.view.event("fault", f"applied {f.spec.name}: {f.describe()}")

    def _revert(self, f, teardown: bool = False) -> None:
        if f.slow_revert and not teardown:
            f.reverting = True  # taken: neither the loop nor the rollback starts it a second time
            self.journal.write(Event.FAULT_REVERTING, fault=f.spec.name)
            t = threading.Thread(target=self._slow_revert, args=(f,), name=f"revert-{f.spec.name}", daemon=True)
            self.restarts.append(t)
            t.start()
            return
        try:
            if teardown and f.slow_revert:
                f.reverted = True  # the target is going down anyway: no restart
            else:
                f.revert(self.ctx)
        finally:
            f.reverted_at = self.now()
            self.journal.write(Event.FAULT_REVERTED, fault=f.spec.name, teardown=teardown,
                               instances=[i.journal() for i in self.target.all_instances()],
                               **({"evidence": f.evidence} if getattr(f, "evidence", None) else {}))
            said = f.evidence_text()
            if said:
                self.notes.append(f"{f.spec.name}: {said}")
        self.view.event("fault", f"reverted {f.spec.name}" + (" (teardown)" if teardown else ""))

    def _slow_revert(self, f) -> None:
        """A restart, in its own thread: the schedule, abort_when and the view go on meanwhile (two replicas
        restarting used to hold the main loop ~23 s). Stops waiting as soon as the run is being torn down."""
        ctx = FaultContext(rng=self.rng, should_stop=lambda: self.signals > 0 or self.tearing_down, log=self.ctx.log)
        began = time.monotonic()
        try:
            f.revert(ctx)
            took = time.monotonic() - began
            if f.victims:
                self.notes.append(f"{f.spec.name}: {', '.join(i.id for i in f.victims)} restarted together "
                                  f"{began - self.load_m0:.1f}s into the load, healthy after {took:.1f}s")
        except Exception as e:  # noqa: BLE001 - a failed restart is the target's finding, not a crash of the run
            f.revert_error = str(e)
            if not (self.signals or self.tearing_down):
                self.notes.append(f"{f.spec.name}: restart failed: {e}")
                self.view.event("error", f"restart of {f.spec.name} failed: {e}")
        finally:
            f.reverted_at = self.now()
            self.journal.write(Event.FAULT_REVERTED, fault=f.spec.name, teardown=False, error=getattr(f, "revert_error",
                                                                                                   None),
                               instances=[i.journal() for i in self.target.all_instances()])
        self.view.event("fault", f"reverted {f.spec.name} (took {time.monotonic() - began:.1f}s)")

    def _abort_check(self) -> str | None:
        rate, span = self.exp.abort_error_rate, self.exp.abort_for
        if rate is None or self.load_m0 is None or time.monotonic() - self.load_m0 < span:
            return None
        now = self.now()
        w = [r for r in self.recent if r.t_end is not None and r.t_end >= now - span]
        if len(w) < 5:
            return None
        er = V.error_rate(w)
        if er is not None and er >= rate:
            return f"error rate {er * 100:.1f}% over the last {span:g}s reached abort_when ({rate * 100:g}%)"
        return None

    def _stop_condition(self) -> str | None:
        return self.stops.check(self.now()) if self.stops is not None else None

    def _status(self, elapsed, plan) -> dict:
        now = self.now()
        recent = [r for r in self.recent if r.t_end is not None and r.t_end >= now - 10]
        p95 = V.latency(recent, 95)
        er = V.error_rate(recent)
        u = plan.users_at(elapsed)
        active = [f.spec.name for f in self.faults if f.applied and not f.reverted]
        return {"name": self.exp.name, "elapsed": elapsed, "total": plan.duration, "users": u[0] if u else 0,
                "requests": self.num_records, "rolling_p95": V.fmt_s(p95), "error_rate": V.fmt_pct(er),
                "active_faults": ", ".join(active) or "none",
                "instances": " ".join(f"{i.id}:{i.state}" for i in self.target.all_instances())}

    # -- always --------------------------------------------------------------------------------------
    def _rollback(self) -> None:
        fast = lambda: self.signals > 1
        self.tearing_down = True  # a restart still waiting for health gives up now, one still stopping never starts
        for f in self.faults:
            f.halt()  # background work (an abnormal-input batch) ends before anything is reverted
        for t in self.restarts:
            t.join(10.0)
        for f in reversed(self.faults):
            # apply_error: apply was attempted and may have taken in part; revert is safe after a failed apply
            if (f.applied or f.apply_error) and not (f.reverted or f.reverting):
                try:
                    self._revert(f, teardown=True)
                except Exception as e:
                    self.notes.append(f"reverting {f.spec.name} failed: {e!r}; run chaos recover {self.run_dir}")
        if self.load is not None:
            if self.load.poll():
                self.load.stop(grace=1.0 if fast() else 5.0)
            else:
                self.load.reap(1.0)
            self._take(self.load.new_records())
            self.journal.write(Event.LOAD_STOPPED, records=self.num_records)
        if self.target is not None:
            try:
                if self.target.starts_processes and not self.should_stop():
                    health = {i.id: self.target.healthy(i) for i in self.target.all_instances()}
                    self.final_health = health
                    self.journal.write(Event.FINAL_HEALTH, health=health)
                    if self.scraper is None:  # scraping off: the one /metrics of the end, as before
                        self.notes += save_metrics(self.target, self.run_dir)
            finally:  # before the target stops, whatever failed above; its last scrape is kept as metrics-ID.txt
                if self.stops is not None:
                    self.stops.stop()
                    self.notes += self.stops.problems
                if self.scraper is not None:
                    self.scraper.stop(final=self.final_health is not None and not self.should_stop())
            late = [t for t in self.restarts if t.is_alive()]  # still stopping its instances (a slow stop)
            try:
                self.target.down(grace=0.5 if fast() else 5.0)
                for t in late:  # it starts nothing now (tearing_down), but it may have just before: stop that too
                    t.join(STOP_ALLOWANCE_S)
                if late:
                    self.target.down(grace=0.5)
            finally:
                self.journal.write(Event.TARGET_STOPPED)
                if self.target.hosts is not None and self.target.hosts_removed:
                    self.journal.write(Event.HOSTS_REMOVED, removed=self.target.hosts_removed)
                if self.target.links is not None:
                    problems = self.target.links.down(grace=0.5 if fast() else 2.0)
                    self.notes += [f"{p}; run chaos recover {self.run_dir}" for p in problems]
                    # Only when every one went: a proxy left on the user's server is recover's to delete.
                    self.journal.write(Event.LINKS_REMOVED if not problems else Event.LINKS_LEFT, problems=problems)
            for t in late:
                if t.is_alive():
                    self.notes.append(f"{t.name} did not end with the run; run chaos recover {self.run_dir}")
        pids = reap_orphans(self.run_id)  # after the restarts' last join: nothing of the run spawns after this
        if pids:
            self.journal.write(Event.ORPHANS_STOPPED, pids=pids)
