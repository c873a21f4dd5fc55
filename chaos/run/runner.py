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
import time
import traceback

import psutil

from ..common import parse_duration, parse_percent
from ..experiment.model import SLO, Experiment
from ..faults import FaultContext, make_fault
from ..load.driver import LoadError, LoadRun
from ..load.records import read_records
from ..load.summary import summarize_steps
from ..targets import TargetError, make_target
from ..verify import checks as V
from ..report.writer import write_reports
from .journal import Journal
from .loadspec import load_config
from .view import View

EXIT_PASSED, EXIT_FAILED, EXIT_INVALID, EXIT_ABORTED, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


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
            json.dump(self.exp.resolved, f, indent=2, default=str)
        self.journal = Journal(os.path.join(self.run_dir, "journal.jsonl"))
        me = psutil.Process()
        self.journal.write("run_started", experiment=self.exp.name, pid=me.pid, create_time=me.create_time(),
                           run_dir=os.path.abspath(self.run_dir))
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        become_subreaper()
        code = None
        try:
            self.view.start()
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
                f.write(traceback.format_exc())
            self.view.event("error", f"{self.reason} (traceback in error.txt)")
        finally:
            self._rollback()
            if self.signals:  # whatever was under way when the signal came, the run was interrupted
                code, self.reason = EXIT_INTERRUPTED, "interrupted by a signal"
            code = self._finish(code)
            self.view.stop()
            for s, h in old.items():
                signal.signal(s, h)
        return code

    def _target_up(self) -> None:
        self.target = make_target(self.exp.target, self.run_dir)
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
        cfg = load_config(self.exp.load, self.target.urls, self.target.model, self.target.api_key_env, self.run_dir)
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
                if f.applied and not f.reverted and f.revert_at is not None and elapsed >= f.revert_at:
                    self._revert(f)
            aborted = self._abort_check()
            if aborted:
                self.reason = aborted
                self.journal.write("abort", reason=aborted)
                self.view.event("abort", aborted)
                return EXIT_ABORTED
            self.view.status(self._status(elapsed, plan))
            if not running:
                return None
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
        try:
            if teardown and f.type == "kill_instance":
                f.reverted = True  # the target is going down anyway: no restart
            else:
                f.revert(self.ctx)
        finally:
            f.reverted_at = time.time()
            self.journal.write("fault_reverted", fault=f.spec.name, teardown=teardown,
                               instances=[i.journal() for i in self.target.all_instances()])
        self.view.event("fault", f"reverted {f.spec.name}" + (" (teardown)" if teardown else ""))

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
        fast = lambda: self.signals > 1  # noqa: E731
        for f in reversed(self.faults):
            if f.applied and not f.reverted:
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
        """Anything still descending from us was started by this run: stop it."""
        try:
            kids = psutil.Process().children(recursive=True)
        except psutil.Error:
            return
        for p in kids:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(kids, timeout=3)
        if kids:
            self.journal.write("orphans_stopped", pids=[p.pid for p in kids])

    def _finish(self, code: int | None) -> int:
        records = read_records(os.path.join(self.run_dir, "requests.jsonl"))
        checks = []
        if code is None or code == EXIT_FAILED and self.gate is not None and not self.gate[0]:
            checks = self._verify(records)
            if code is None:
                code = EXIT_PASSED if all(c.passed for c in checks) else EXIT_FAILED
        verdict = {EXIT_PASSED: "passed", EXIT_FAILED: "failed", EXIT_ABORTED: "aborted",
                   EXIT_INTERRUPTED: "interrupted"}.get(code, "error")
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
                        "reverted_at": getattr(f, "reverted_at", None)} for f in self.faults],
            "notes": self.notes + (self.load.notes if self.load else []),
            "requests": len(records),
        }
        self.journal.write("run_finished", verdict=verdict, exit_code=code)
        report["timeline"] = _read(os.path.join(self.run_dir, "journal.jsonl"))  # read once, run_finished included
        write_reports(self.run_dir, report, steps)
        self.journal.close()
        self.report = report
        return code

    def _verify(self, records) -> list:
        exp, out = self.exp, []
        v = exp.verify
        end = max((r.t_end or r.t_start for r in records), default=time.time())
        if self.gate is not None:
            out.append(V.Check("steady state before faults", self.gate[0], self.gate[1], "the steady-state SLO"))
        if self.gate is not None and not self.gate[0]:
            return out
        applied = [f for f in self.faults if f.applied]
        f_start = min((f.applied_at for f in applied), default=None)
        f_end = max((getattr(f, "reverted_at", None) or end for f in applied), default=None)
        if "error_rate_during_fault" in v and f_start is not None:
            bound = parse_percent(v["error_rate_during_fault"]["max"])
            w = V.overlapping(records, f_start, f_end)
            er = V.error_rate(w)
            out.append(V.Check("error rate during the fault", er is not None and er <= bound, V.fmt_pct(er),
                               f"<= {V.fmt_pct(bound)}", f"{len(w)} requests in flight between the first fault "
                                                         f"and the last revert"))
        if "slo_during_fault" in v and f_start is not None:
            out += V.slo_checks("during the fault", V.overlapping(records, f_start, f_end),
                                SLO.from_dict(v["slo_during_fault"]))
        slo = exp.steady_slo if not exp.steady_slo.is_empty() else SLO(error_rate=0.0)
        recovered = None
        if f_start is not None:
            rt = v.get("recovery_time") or {}
            width = parse_duration(rt.get("window", "5s"))
            recovered = V.recovery_point(records, f_start, end, slo, width)
            if "recovery_time" in v:
                bound = parse_duration(rt["max"])
                took = None if recovered is None else recovered - f_start
                out.append(V.Check("recovery time", took is not None and took <= bound,
                                   "never" if took is None else V.fmt_s(took), f"<= {V.fmt_s(bound)}",
                                   f"from the first fault until the requests ending in a {width:g}s window "
                                   f"meet the steady-state SLO"))
        if "slo_after" in v:
            after_from = recovered if recovered is not None else (f_end or self.load_t0 or 0)
            after = [r for r in records if r.t_start >= after_from]
            out += V.slo_checks("after recovery", after, SLO.from_dict(v["slo_after"]))
        if "status_codes" in v:
            allowed = set(v["status_codes"]["allowed"])
            seen = {}
            for r in records:
                if r.status is not None:
                    seen[r.status] = seen.get(r.status, 0) + 1
            bad = {s: n for s, n in seen.items() if s not in allowed}
            out.append(V.Check("status codes", not bad, ", ".join(f"{s}x{n}" for s, n in sorted(seen.items())),
                               f"only {sorted(allowed)}", "unexpected: " + ", ".join(map(str, sorted(bad)))
                               if bad else "connection-level failures are counted in the error rate"))
        if v.get("served_by_all") and self.target is not None:
            from_t = recovered if recovered is not None else (f_end or 0)
            served = {r.served_by for r in records if r.outcome == "ok" and r.t_start >= from_t}
            missing = [i.id for i in self.target.instances if i.id not in served]
            out.append(V.Check("every instance serves after recovery", not missing,
                               ", ".join(sorted(s for s in served if s)) or "none", "all instances",
                               "missing: " + ", ".join(missing) if missing else ""))
        if "fallback" in v and f_start is not None:
            within = parse_duration(v["fallback"]["within"])
            paths = v["fallback"].get("paths") or ["backup", "cache"]
            for path in paths:
                hits = [r for r in records if r.outcome == "ok" and r.served_by == path and r.t_start >= f_start]
                first = min((r.t_end for r in hits), default=None)
                took = None if first is None else first - f_start
                out.append(V.Check(f"fallback to {path}", took is not None and took <= within,
                                   "never" if took is None else f"after {V.fmt_s(took)}, {len(hits)} responses",
                                   f"within {V.fmt_s(within)}", "first answer from that path after the first fault"))
        health = getattr(self, "final_health", None)
        if health is not None and exp.steady_health:
            sick = [k for k, ok in health.items() if not ok]
            out.append(V.Check("steady state re-checked: health at the end", not sick,
                               "all healthy" if not sick else "unhealthy: " + ", ".join(sick), "all healthy"))
        if not exp.steady_slo.is_empty() and records:
            tail = V.window(records, end - exp.steady_window, end + 1)
            out += V.slo_checks("steady state re-checked", [r for r in tail if r.t_end is not None],
                                exp.steady_slo, min_requests=3)
        return out


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
