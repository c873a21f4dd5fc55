"""One experiment run, start to finish. Rollback is guaranteed: whatever happens after the first
fault is journaled, the `finally` reverts every fault and stops every process the run started.

Signals only set flags (the loops poll them): the first SIGINT/SIGTERM stops gracefully, a
second one makes the rollback faster but never skips it. A SIGKILLed run leaves its journal;
`chaos recover RUN_DIR` undoes what it left behind.
"""

from __future__ import annotations

import ctypes
import json
import os
import random
import signal
import threading
import time
import traceback

import psutil

from ..experiment.model import Experiment
from ..faults import FaultContext, make_fault
from ..load.driver import LoadError, LoadRun
from ..load.records import read_records
from ..load.summary import summarize_steps
from ..report.writer import write_reports
from ..targets import TargetError, make_target
from ..verify import checks as V
from ..verify.verdict import RunFacts, run_checks
from .journal import Journal
from .loadspec import load_config
from .procs import RUN_ID_ENV, kill_processes, marked, run_id_for
from .timing import restart_warnings
from .view import View

EXIT_PASSED, EXIT_FAILED, EXIT_INVALID, EXIT_ABORTED, EXIT_NOT_JUDGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
VERDICTS = {EXIT_PASSED: "passed", EXIT_FAILED: "failed", EXIT_ABORTED: "aborted", EXIT_NOT_JUDGED: "inconclusive",
            EXIT_INTERRUPTED: "interrupted"}


class Interrupted(Exception):
    pass


def become_subreaper() -> None:
    """Orphans of our children re-parent to us, so a double-forking command cannot escape teardown."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
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
        self.started = time.time()
        self.target = None
        self.load: LoadRun | None = None
        self.load_t0: float | None = None
        self.faults = []
        self.records = []
        self.notes: list[str] = []
        self.gate = None  # (passed, detail) of the steady-state gate
        self.reason: str | None = None
        self.rng = random.Random(exp.load.get("seed", 0))
        self.ctx = FaultContext(rng=self.rng, should_stop=lambda: self.signals > 1,
                                log=lambda m: self.view.event("note", m))
        self.run_id = run_id_for(self.run_dir)
        self.tearing_down = False
        self.restarts: list[threading.Thread] = []  # slow reverts (restarts) running beside the schedule
        self.up_since: dict = {}  # instance id -> last health pass, as the load ended
        self.final_health = None

    def public(self, obj):
        """obj with every secret scrubbed: the experiment's secret variables and API key (its mask, from
        chaos.experiment), and this run's fault token. Applied to everything the run writes or prints."""
        mask = getattr(self.exp, "mask", None)
        if mask is not None:
            obj = mask(obj)
        token = getattr(self.target, "fault_token", None)
        if not token:
            return obj
        if isinstance(obj, str):
            return obj.replace(token, "***")
        text = json.dumps(obj, default=str)
        return json.loads(text.replace(token, "***")) if token in text else obj

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
        os.makedirs(self.run_dir, exist_ok=True)
        with open(os.path.join(self.run_dir, "experiment.resolved.json"), "w") as f:
            json.dump(self.public(self.exp.resolved), f, indent=2, default=str)
        self.journal = Journal(os.path.join(self.run_dir, "journal.jsonl"), scrub=self.public)
        me = psutil.Process()
        self.journal.write("run_started", experiment=self.exp.name, pid=me.pid, create_time=me.create_time(),
                           run_dir=os.path.abspath(self.run_dir), run_id=self.run_id)
        # Every process the run starts inherits the mark, so recover finds even one that left its group.
        old_mark = os.environ.get(RUN_ID_ENV)
        os.environ[RUN_ID_ENV] = self.run_id
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        become_subreaper()
        code = None
        try:
            self.view.start()
            for w in restart_warnings(self.exp):
                self.notes.append(f"warning: {w}")
                self.view.event("warning", w)
            self._target_up()
            self._start_load()
            code = self._main_loop()
        except Interrupted:
            code, self.reason = EXIT_INTERRUPTED, "interrupted by a signal"
        except (TargetError, LoadError) as e:
            code, self.reason = EXIT_INVALID, str(e)
            self.view.event("error", str(e))
        except Exception as e:  # a bug of ours: keep the traceback, still roll back
            code, self.reason = EXIT_INVALID, f"internal error: {e!r}"
            with open(os.path.join(self.run_dir, "error.txt"), "w") as f:
                f.write(self.public(traceback.format_exc()))
            self.view.event("error", f"{self.reason} (traceback in error.txt)")
        finally:
            self._rollback()
            if self.signals:  # whatever was under way when the signal came, the run was interrupted
                code, self.reason = EXIT_INTERRUPTED, "interrupted by a signal"
            code = self._finish(code)
            self.view.stop()
            for s, h in old.items():
                signal.signal(s, h)
            if old_mark is None:
                os.environ.pop(RUN_ID_ENV, None)
            else:
                os.environ[RUN_ID_ENV] = old_mark
        return code

    def _journal_spawn(self, inst) -> None:
        """Journaled the moment the process (or container) exists, before any health wait, and fsynced."""
        try:
            pgid = os.getpgid(inst.pid) if inst.pid else None
        except OSError:
            pgid = None
        self.journal.write("process_started", instance={**inst.journal(), "pgid": pgid},
                           restart=self.load is not None)

    def _target_up(self) -> None:
        self.target = make_target(self.exp.target, self.run_dir)
        self.target.on_spawn = self._journal_spawn
        self.journal.write("target_starting", kind=self.target.kind, instances=[i.journal() for i in
                                                                                 self.target.all_instances()])
        names = ", ".join(i.id for i in self.target.all_instances())
        self.view.event("target", f"starting {self.exp.target.kind} target: {names}")
        try:
            self.target.up(self.should_stop)
        finally:
            # Journal what exists even if up failed half way, so recover can stop it.
            self.journal.write("target_started", instances=[i.journal() for i in self.target.all_instances()])
        if self.should_stop():
            raise Interrupted()
        self.view.event("target", "healthy: " + ", ".join(f"{i.id} {i.url}" for i in self.target.all_instances()))

    def _start_load(self) -> None:
        cfg = load_config(self.exp.load, self.target.urls, self.target.model, self.target.api_key_env, self.run_dir,
                          ignore_eos=self.exp.target.ignore_eos)
        self.load = LoadRun(cfg, progress=lambda m: None)
        self.load.start()
        self.load_t0 = self.load.t_start
        procs = [{"pid": p.pid, "create_time": _ctime(p.pid)} for p in self.load.procs]
        self.journal.write("load_started", processes=procs, plan=cfg.plan.to_dict()["kind"],
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
            self.records += self.load.new_records()
            elapsed = time.time() - self.load_t0
            while pending and elapsed >= pending[0].spec.at:
                f = pending.pop(0)
                if self.gate is None:
                    self.gate = self._steady_gate()
                    if not self.gate[0]:
                        self.journal.write("steady_state_failed", detail=self.gate[1])
                        self.reason = f"steady state not met before faults ({self.gate[1]}); no faults injected"
                        self.view.event("steady-state", self.reason)
                        return EXIT_FAILED
                    self.journal.write("steady_state_ok", detail=self.gate[1])
                self._apply(f)
            for f in self.faults:
                if f.applied and not (f.reverted or f.reverting) and f.revert_at is not None \
                        and elapsed >= f.revert_at:
                    self._revert(f)
            aborted = self._abort_check()
            if aborted:
                self.reason = aborted
                self.journal.write("abort", reason=aborted)
                self.view.event("abort", aborted)
                return EXIT_ABORTED
            self.view.status(self._status(elapsed, plan))
            if not running:
                self._await_restarts()
                self.up_since = {i.id: i.up_since for i in self.target.instances}
                return None
            time.sleep(0.2)

    def _await_restarts(self) -> None:
        """The load is over but a restart is still waiting for health: wait for it (bounded), so the checks and
        the final health see how it ended rather than the runner's hurry."""
        deadline = time.monotonic() + self.exp.target.startup_timeout + 5
        while any(t.is_alive() for t in self.restarts) and time.monotonic() < deadline:
            if self.should_stop():
                raise Interrupted()
            time.sleep(0.2)

    def _steady_gate(self) -> tuple[bool, str]:
        now = time.time()
        if self.exp.steady_health:
            sick = [i.id for i in self.target.instances if not self.target.healthy(i)]
            if sick:
                return False, f"unhealthy: {', '.join(sick)}"
        slo = self.exp.steady_slo
        if slo.is_empty():
            return True, "no steady-state SLO given; health only"
        w = V.window(self.records, now - self.exp.steady_window, now)
        got = V.slo_checks("steady state", [r for r in w if r.t_end is not None], slo, min_requests=3)
        bad = [f"{c.name.split()[-1]} {c.measured} (needs {c.threshold})" for c in got if not c.passed]
        return (not bad), ("; ".join(bad) if bad else
                           "; ".join(f"{c.name.split()[-1]} {c.measured}" for c in got))

    def _apply(self, f) -> None:
        plan = f.plan(self.ctx)
        self.journal.write("fault_applying", fault=f.spec.name, type=f.type, plan=plan)  # before, always
        f.applied_at = time.time()
        try:
            f.apply(self.ctx)
        finally:
            self.journal.write("fault_applied", fault=f.spec.name, description=f.describe())
        self.view.event("fault", f"applied {f.spec.name}: {f.describe()}")

    def _revert(self, f, teardown: bool = False) -> None:
        if f.slow_revert and not teardown:
            f.reverting = True  # taken: neither the loop nor the rollback starts it a second time
            self.journal.write("fault_reverting", fault=f.spec.name)
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
            f.reverted_at = time.time()
            self.journal.write("fault_reverted", fault=f.spec.name, teardown=teardown,
                               instances=[i.journal() for i in self.target.all_instances()])
        self.view.event("fault", f"reverted {f.spec.name}" + (" (teardown)" if teardown else ""))

    def _slow_revert(self, f) -> None:
        """A restart, in its own thread: the schedule, abort_when and the view go on meanwhile (two replicas
        restarting used to hold the main loop ~23 s). Stops waiting as soon as the run is being torn down."""
        ctx = FaultContext(rng=self.rng, should_stop=lambda: self.signals > 0 or self.tearing_down, log=self.ctx.log)
        began = time.time()
        try:
            f.revert(ctx)
            took = time.time() - began
            if f.victims:
                self.notes.append(f"{f.spec.name}: {', '.join(i.id for i in f.victims)} restarted together "
                                  f"{began - self.load_t0:.1f}s into the load, healthy after {took:.1f}s")
        except Exception as e:  # noqa: BLE001 - a failed restart is the target's finding, not a crash of the run
            f.revert_error = str(e)
            if not (self.signals or self.tearing_down):
                self.notes.append(f"{f.spec.name}: restart failed: {e}")
                self.view.event("error", f"restart of {f.spec.name} failed: {e}")
        finally:
            f.reverted_at = time.time()
            self.journal.write("fault_reverted", fault=f.spec.name, teardown=False, error=getattr(f, "revert_error",
                                                                                                   None),
                               instances=[i.journal() for i in self.target.all_instances()])
        self.view.event("fault", f"reverted {f.spec.name} (restart took {f.reverted_at - began:.1f}s)")

    def _abort_check(self) -> str | None:
        rate, span = self.exp.abort_error_rate, self.exp.abort_for
        if rate is None or self.load_t0 is None or time.time() - self.load_t0 < span:
            return None
        now = time.time()
        w = [r for r in self.records if r.t_end is not None and r.t_end >= now - span]
        if len(w) < 5:
            return None
        er = V.error_rate(w)
        if er is not None and er >= rate:
            return f"error rate {er * 100:.1f}% over the last {span:g}s reached abort_when ({rate * 100:g}%)"
        return None

    def _status(self, elapsed, plan) -> dict:
        now = time.time()
        recent = [r for r in self.records if r.t_end is not None and r.t_end >= now - 10]
        p95 = V.latency(recent, 95)
        er = V.error_rate(recent)
        u = plan.users_at(elapsed)
        active = [f.spec.name for f in self.faults if f.applied and not f.reverted]
        return {"name": self.exp.name, "elapsed": elapsed, "total": plan.duration, "users": u[0] if u else 0,
                "requests": len(self.records), "rolling_p95": V.fmt_s(p95), "error_rate": V.fmt_pct(er),
                "active_faults": ", ".join(active) or "none",
                "instances": " ".join(f"{i.id}:{i.state}" for i in self.target.all_instances())}

    # -- always --------------------------------------------------------------------------------------
    def _rollback(self) -> None:
        fast = lambda: self.signals > 1
        self.tearing_down = True  # a restart still waiting for health gives up now
        for t in self.restarts:
            t.join(10.0)
        for f in reversed(self.faults):
            if f.applied and not (f.reverted or f.reverting):
                try:
                    self._revert(f, teardown=True)
                except Exception as e:
                    self.notes.append(f"reverting {f.spec.name} failed: {e!r}; run chaos recover {self.run_dir}")
        if self.load is not None:
            if self.load.poll():
                self.load.stop(grace=1.0 if fast() else 5.0)
            else:
                self.load._reap(1.0)
            self.records = self.records + self.load.new_records()
            self.journal.write("load_stopped", records=len(self.records))
        if self.target is not None:
            if self.target.starts_processes and not self.should_stop():
                health = {i.id: self.target.healthy(i) for i in self.target.all_instances()}
                self.final_health = health
                self.journal.write("final_health", health=health)
                self._save_metrics()
            try:
                self.target.down(grace=0.5 if fast() else 5.0)
            finally:
                self.journal.write("target_stopped")
        self._reap_orphans()

    def _save_metrics(self) -> None:
        """Keep each instance's /metrics as the run ends (metrics-ID.txt) and note the counters that explain
        what the engine did under the faults."""
        import urllib.request

        for inst in self.target.all_instances():
            try:
                with urllib.request.urlopen(inst.url + "/metrics", timeout=2) as r:
                    text = r.read().decode(errors="replace")
            except OSError:
                continue
            with open(os.path.join(self.run_dir, f"metrics-{inst.id}.txt"), "w") as f:
                f.write(text)
            found = {}
            for line in text.splitlines():
                for name in ("vllm:num_preemptions_total", "vllm:prefix_cache_hits_total", "gateway:retries_total"):
                    if line.startswith(name):
                        found[name.split(":")[1]] = found.get(name.split(":")[1], 0) + float(line.rsplit(" ", 1)[1])
            if any(found.values()):
                self.notes.append(f"{inst.id} at the end: " + ", ".join(f"{k} {v:g}" for k, v in found.items()))

    def _reap_orphans(self) -> None:
        """Anything still descending from us, or carrying this run's mark, was started by this run: stop it."""
        try:
            kids = psutil.Process().children(recursive=True)
        except psutil.Error:
            kids = []
        seen = {p.pid for p in kids}
        kids += [p for p in marked(self.run_id) if p.pid not in seen]
        kill_processes(kids)
        if kids:
            self.journal.write("orphans_stopped", pids=[p.pid for p in kids])

    def _finish(self, code: int | None) -> int:
        records = read_records(os.path.join(self.run_dir, "requests.jsonl"))
        checks = []
        if code is None or code == EXIT_FAILED and self.gate is not None and not self.gate[0]:
            checks = self._verify(records)
            if code is None:
                code = {"passed": EXIT_PASSED, "failed": EXIT_FAILED,
                        "not_judged": EXIT_NOT_JUDGED}[V.verdict_of(checks)]
        verdict = VERDICTS.get(code, "error")
        unjudged = [c for c in checks if c.passed is None]
        if unjudged and code == EXIT_NOT_JUDGED:
            self.reason = "nothing failed, but the run could not judge: " + "; ".join(c.name for c in unjudged)
        for c in unjudged:  # also in the notes, which every report format shows
            self.notes.append(f"not judged: {c.name}: {c.detail.removeprefix('not judged: ')}")
        plan = self.load.cfg.plan if self.load else None
        steps = summarize_steps(records, [s.name for s in plan.stages], plan.open_loop,
                                {s.name: s.duration for s in plan.stages}) if plan else []
        report = {
            "experiment": {"name": self.exp.name, "description": self.exp.description, "file": self.exp.path},
            "verdict": verdict, "exit_code": code, "reason": self.reason, "started": self.started,
            "duration_s": time.time() - self.started, "load_started": self.load_t0,
            "target": self.target.describe() if self.target else {"kind": self.exp.target.kind,
                                                                   "name": self.exp.target.name},
            "checks": [c.to_dict() for c in checks],
            "steps": [s.to_dict() for s in steps],
            "faults": [{"name": f.spec.name, "type": f.type, "description": f.describe(), "applied": f.applied,
                        "reverted": f.reverted, "applied_at": getattr(f, "applied_at", None),
                        "reverted_at": getattr(f, "reverted_at", None), "revert_error": f.revert_error}
                       for f in self.faults],
            "notes": self.notes + (self.load.notes if self.load else []),
            "requests": len(records),
        }
        self.journal.write("run_finished", verdict=verdict, exit_code=code)
        report["timeline"] = _read(os.path.join(self.run_dir, "journal.jsonl"))  # read once, run_finished included
        report = self.public(report)
        write_reports(self.run_dir, report, steps, mask=self.public)  # the Markdown is scrubbed again, whole
        self.journal.close()
        self.report = report
        return code

    def _verify(self, records) -> list:
        facts = RunFacts(gate=self.gate, faults=self.faults, target=self.target, final_health=self.final_health,
                         load_t0=self.load_t0, up_since=self.up_since)
        return run_checks(self.exp, records, facts)


def _ctime(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _read(path: str) -> list[dict]:
    from .journal import read_journal

    try:
        return read_journal(path)
    except FileNotFoundError:
        return []
