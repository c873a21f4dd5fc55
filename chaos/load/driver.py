"""Runs Locust headless in its own process(es) and turns its records into the seed's table.

Locust (gevent) never shares a process with this code: the driver writes a JSON config,
starts `python -m locust -f chaos/load/locustfile.py` (or a master and N workers on
loopback), tails requests.jsonl for a live summary, and stops every process it started,
by process group, whatever happens.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlparse

from ..rundir.files import REQUESTS
from .clock import ENV as CLOCK_ENV, Clock
from .clock import WORKER_ENV
from . import fleet
from .errors import LoadError
from ..records import read_new_records, read_records
from .replay.run import ReplayRun
from .shapes import LoadPlan
from ..records.summary import StepSummary, format_table, summarize, summarize_steps
from .replay.notes import format_replay

LOCUSTFILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "locustfile.py")


@dataclass(slots=True)
class Timeouts:
    connect: float = 10.0
    first_token: float | str = 60.0  # seconds, or "auto": 1.5 x the P99 measured by a short calibration
    total: float | str = 300.0


@dataclass(slots=True)
class LoadConfig:
    target: str  # base URL: http://127.0.0.1:8000 or .../v1
    plan: LoadPlan
    workload: list  # [(WorkloadSpec, weight)]
    out_dir: str
    model: str | None = None
    seed: int = 0
    tokenizer: str = "auto"  # auto | byte | estimate
    stream: bool = True
    timeouts: Timeouts = field(default_factory=Timeouts)
    retries: int = 0
    backoff_s: float = 0.5
    api_key_env: str | None = None
    think_time: float = 0.0
    workers: int = 0  # 0: one local process; N: a master and N workers on loopback
    ui_port: int | None = None  # serve Locust's web UI on 127.0.0.1:PORT while running
    also: list[str] = field(default_factory=list)  # more base URLs: requests rotate over target + these
    ignore_eos: bool = True  # send vLLM's ignore_eos where the workload fixes the output length
    keep_alive: bool = True  # False: a new connection per request (`Connection: close`)
    host_ids: list[str] = field(default_factory=list)  # the instance behind each base URL, when no gateway
    limits: object = None  # chaos.targets.limits.Limits a vendor target states: start() caps the load to them
    # Locust processes on hosts (chaos.netns): "master" | "w0"... -> (namespace, address, host), and the bridge's
    # address, where a master on this machine listens for workers on hosts. Empty: all on loopback.
    places: dict = field(default_factory=dict)
    bridge: str | None = None

    def __post_init__(self):
        u = urlparse(self.target)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise LoadError(f"target must be a URL like http://127.0.0.1:8000, got {self.target!r}")
        if self.retries < 0 or self.retries > 10:
            raise LoadError("retries must be between 0 and 10")
        if self.workers < 0:
            raise LoadError("workers must be >= 0")
        if self.tokenizer not in ("auto", "byte", "estimate"):
            raise LoadError("tokenizer must be auto, byte or estimate")

    @property
    def host(self) -> str:
        u = urlparse(self.target)
        return f"{u.scheme}://{u.netloc}"

    @property
    def base_path(self) -> str:
        path = urlparse(self.target).path.rstrip("/")
        return path if path else "/v1"


@dataclass(slots=True)
class LoadResult:
    out_dir: str
    records_path: str
    steps: list[StepSummary]
    overall: StepSummary
    model: str
    tokenizer: str
    timeouts: dict
    locust_rc: int | None
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    # a timed replay's account (records.merge_accounts, plus lag and order): None for other plans
    replay: dict | None = None

    @property
    def replay_lost(self) -> int:
        """Requests of a timed replay's window that were not sent: more than 0 fails the load."""
        return (self.replay or {}).get("not_sent", 0)

    def table(self) -> str:
        head = format_replay(self.replay) + "\n" if self.replay else ""
        return head + format_table(self.steps + ([self.overall] if len(self.steps) > 1 else []))


def take_target(cfg: LoadConfig, spec, target) -> None:
    """A target file's switches (spec: ignore_eos, keep_alive) and its started target's facts (how it counts
    tokens, which replica each URL is) onto a load: the one place chaos run, load and replay take them."""
    if spec is not None:
        cfg.ignore_eos = cfg.ignore_eos and spec.ignore_eos
        cfg.keep_alive = cfg.keep_alive and spec.keep_alive
    if target is not None:
        if cfg.tokenizer == "auto":
            cfg.tokenizer = target.tokenizer  # a stack of bundled replicas behind a gateway counts bytes
        cfg.host_ids = target.replica_ids
        cfg.places, cfg.bridge = target.load_places()


def _headers(cfg: LoadConfig) -> dict:
    h = {"Content-Type": "application/json"}
    if cfg.api_key_env:
        key = os.environ.get(cfg.api_key_env)
        if not key:
            raise LoadError(f"the API key variable {cfg.api_key_env} is not set; export it first")
        h["Authorization"] = f"Bearer {key}"
    return h


def discover(cfg: LoadConfig) -> tuple[str, str]:
    """(model, tokenizer kind) from GET /v1/models; a clear error when the target is not there."""
    url = cfg.host + cfg.base_path + "/models"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=_headers(cfg)), timeout=10) as r:
            data = json.load(r).get("data") or []
    except urllib.error.HTTPError as e:
        if cfg.model:
            return cfg.model, "estimate" if cfg.tokenizer == "auto" else cfg.tokenizer
        raise LoadError(f"GET {url} answered {e.code}; pass --model if the target has no model list") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise LoadError(f"cannot reach the target at {url}: {reason}. Is it running? "
                        f"(start one with: chaos reference serve --port 8000)") from None
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    model = cfg.model or (ids[0] if ids else None)
    if not model:
        raise LoadError(f"{url} lists no models; pass --model")
    if cfg.model and ids and cfg.model not in ids:
        raise LoadError(f"model {cfg.model!r} is not served by the target (it serves: {', '.join(map(str, ids))})")
    tok = cfg.tokenizer
    if tok == "auto":
        owner = next((m.get("owned_by") for m in data if isinstance(m, dict) and m.get("id") == model), None)
        tok = "byte" if owner == "llm-chaos" else "estimate"
    return model, tok


def calibrate(cfg: LoadConfig, model: str, tokenizer: str, n: int = 6) -> tuple[float, float]:
    """Time n sequential requests of the workload: (P99 TTFT, P99 E2E) — with n small, the maximum."""
    from .workloads import Workload

    wl = Workload(cfg.workload, seed=cfg.seed + 99991, tokenizer=tokenizer, ignore_eos=cfg.ignore_eos)
    ttfts, e2es = [], []
    for i in range(n):
        req = wl.request(i)
        body = {"model": model, **req.body, "stream": True}
        path = cfg.base_path + ("/chat/completions" if req.endpoint == "chat" else "/completions")
        t0 = time.perf_counter()
        first = None
        try:
            r = urllib.request.urlopen(urllib.request.Request(cfg.host + path, json.dumps(body).encode(),
                                                              _headers(cfg)), timeout=600)
            for line in r:
                if first is None and line.startswith(b"data: {"):
                    first = time.perf_counter()
            r.close()
        except (urllib.error.URLError, OSError) as e:
            raise LoadError(f"calibration request failed ({e}); give fixed timeouts instead of auto") from None
        e2es.append(time.perf_counter() - t0)
        ttfts.append((first or time.perf_counter()) - t0)
    return max(ttfts), max(e2es)


def _on(netns: str | None, cmd: list[str]) -> list[str]:
    """cmd on a host (in its network namespace), or here."""
    if netns is None:
        return cmd
    from ..netns import in_ns

    return in_ns(netns, cmd)


def locust_config(cfg: LoadConfig, model: str, tokenizer: str, timeouts: dict, records_path: str) -> dict:
    """What every Locust process of a load reads (CHAOS_LOAD_CONFIG names it): `chaos load` writes it before it
    starts Locust, `chaos export` puts it in a ConfigMap for a master and workers in a cluster. timeouts: in
    seconds, none left "auto"."""
    return {
        "plan": cfg.plan.to_dict(),
        "workload": {"specs": [[{"name": s.name, "input_tokens": list(s.input_tokens),
                                 "output_tokens": list(s.output_tokens), "temperature": s.temperature,
                                 "replay_file": s.replay_file, "extra": s.extra}, w] for s, w in cfg.workload],
                     "seed": cfg.seed, "tokenizer": tokenizer, "ignore_eos": cfg.ignore_eos},
        "model": model, "stream": cfg.stream, "base_path": cfg.base_path,
        "hosts": [_api_base(u) for u in [cfg.target, *cfg.also]], "host_ids": cfg.host_ids,
        "records_path": records_path, "timeouts": timeouts,
        "retry": {"max": cfg.retries, "backoff_s": cfg.backoff_s, "max_delay_s": 10.0},
        "api_key_env": cfg.api_key_env, "think_time": cfg.think_time, "keep_alive": cfg.keep_alive,
        "workers": max(1, cfg.workers),
    }


def _api_base(url: str) -> str:
    u = urlparse(url)
    return f"{u.scheme}://{u.netloc}{u.path.rstrip('/') or '/v1'}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoadRun(ReplayRun):
    """One load test: start(), then poll() until done (or stop()), then result()."""

    def __init__(self, cfg: LoadConfig, progress=print, clock: Clock | None = None):
        """clock: the timeline the records are stamped on; a run passes its own, so its journal, faults and
        scrapes share the records' timeline (by default the load anchors one when it starts)."""
        self.cfg = cfg
        self.progress = progress
        self.procs: list[subprocess.Popen] = []
        self.main: subprocess.Popen | None = None
        self.records_path = os.path.join(cfg.out_dir, REQUESTS)
        self.t_start = 0.0
        self.interrupted = False
        self.ended_early: str | None = None  # why the caller ended a bounded load before its end (end_early)
        self.notes: list[str] = []
        self.model = cfg.model or ""
        self.tokenizer = cfg.tokenizer
        self.timeouts: dict = {}
        self._tail_offset = 0
        self._tail: list = []  # the records of the live line's window, no more: a run's whole file is GBs
        self._seen = 0
        self._clock = clock
        self._logs = []
        self.mono_start = time.monotonic()
        self.replay_window: tuple[int, bool] | None = None  # (requests owed, counted as lines) for a timed replay
        self.replay: dict | None = None
        self.replay_options = None  # replay.opts.ReplayOptions of a replay workload (scrub, filter)
        self.replay_filtered = 0  # lines of the log its filter drops (the pre-scan's count)
        self.replay_facts: dict | None = None  # replay.notes.replay_facts, once the records are read

    # -- start --------------------------------------------------------------------------------
    def start(self) -> None:
        cfg = self.cfg
        os.makedirs(cfg.out_dir, exist_ok=True)
        if cfg.limits is not None:  # before anything is sent, calibration included
            from .limits import apply_limits

            self.notes += apply_limits(cfg, cfg.limits)
        self.model, self.tokenizer = discover(cfg)
        from .workloads import Workload

        try:  # sizes are judged with the tokenizer just found; a bad one must not reach the Locust process
            wl = Workload(cfg.workload, seed=cfg.seed, tokenizer=self.tokenizer, ignore_eos=cfg.ignore_eos)
        except ValueError as e:
            raise LoadError(str(e)) from None
        self._replay_input(wl)
        if cfg.plan.replay_speed:
            self._plan_replay(wl)
        t = cfg.timeouts
        first, total = t.first_token, t.total
        if "auto" in (first, total):
            p99_ttft, p99_e2e = calibrate(cfg, self.model, self.tokenizer)
            if first == "auto":
                first = max(1.0, 1.5 * p99_ttft)
            if total == "auto":
                total = max(2.0, 1.5 * p99_e2e)
            self.notes.append(f"timeouts from calibration (1.5 x P99 of {6} requests): first token {first:.2f}s, "
                              f"total {total:.2f}s")
        self.timeouts = {"connect": t.connect, "first_token": float(first), "total": float(total)}
        open(self.records_path, "w").close()
        config = locust_config(cfg, self.model, self.tokenizer, self.timeouts, os.path.abspath(self.records_path))
        config_path = os.path.join(cfg.out_dir, "load-config.json")
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2)
        env = {**os.environ, "CHAOS_LOAD_CONFIG": os.path.abspath(config_path), "PYTHONUNBUFFERED": "1"}
        base = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--host", cfg.host, "--loglevel", "WARNING",
                "--stop-timeout", f"{max(0, round(cfg.plan.stop_timeout))}s"]
        main = base + ["--csv", os.path.join(cfg.out_dir, "locust"), "--html",
                       os.path.join(cfg.out_dir, "locust.html"), "--only-summary"]
        if cfg.ui_port:
            main += ["--web-host", "127.0.0.1", "--web-port", str(cfg.ui_port), "--autostart", "--autoquit", "5"]
            self.progress(f"Locust web UI: http://127.0.0.1:{cfg.ui_port}")
        else:
            main += ["--headless"]
        master_ns, master_at, _ = cfg.places.get("master", (None, cfg.bridge if cfg.places else "127.0.0.1", None))
        if cfg.workers:
            port = _free_port()
            main += ["--master", "--master-bind-host", master_at, "--master-bind-port", str(port),
                     "--expect-workers", str(cfg.workers)]
        self._clock = self._clock or Clock()  # the run's one anchor: the Locust processes get it
        env[CLOCK_ENV] = self._clock.to_env()
        self.t_start = self._clock.now()
        self.mono_start = time.monotonic()
        self.main = self._spawn(_on(master_ns, main), env, "locust-master.log" if cfg.workers else "locust.log")
        for i in range(cfg.workers):
            ns = cfg.places.get(f"w{i}", (None,))[0]
            self._spawn(_on(ns, base + ["--worker", "--master-host", master_at, "--master-port", str(port)]),
                        {**env, WORKER_ENV: f"w{i}"}, f"locust-worker{i}.log")

    def _spawn(self, cmd, env, log_name) -> subprocess.Popen:
        log = open(os.path.join(self.cfg.out_dir, log_name), "w")
        self._logs.append(log)
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                             stdin=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    # -- while running --------------------------------------------------------------------------
    def poll(self) -> bool:
        """True while the load test is still running. Once it has ended, a timed replay's account is read (and its
        loss noted), so a caller that never asks for result() still sees it in notes and in .replay."""
        running = self.main is not None and self.main.poll() is None
        if not running and self.main is not None and self.replay is None and self.replay_window is not None:
            self.account_replay()
        return running

    def new_records(self) -> list:
        """Records written since the last call (whole lines only)."""
        records, self._tail_offset = read_new_records(self.records_path, self._tail_offset)
        return records

    def live_line(self, window_s: float = 10.0) -> str:
        new = self.new_records()
        self._seen += len(new)
        # "now" on the records' timeline, not time.time(): record times are an anchor plus monotonic deltas, so
        # after a wall-clock step time.time() would put every record outside the window (or inside it for good).
        # Locust's processes share this clock's anchor, and it goes on while no request ends (an outage shows as
        # "no completed requests").
        now = self._clock.now()
        self._tail = recent = [r for r in self._tail + new if (r.t_end or r.t_start) >= now - window_s]
        s = summarize(recent, "recent", self.cfg.plan.open_loop, window_s) if recent else None
        elapsed = time.monotonic() - self.mono_start
        stage = self.cfg.plan.stage_at(elapsed)
        name = stage[1].name if stage else "ending"
        if s is None:
            return f"[{elapsed:5.0f}s] {name:<14} no completed requests in the last {window_s:.0f}s"
        p95 = s.e2e.get("p95")
        return (f"[{elapsed:5.0f}s] {name:<14} total {self._seen:>6}  last {window_s:.0f}s: {len(recent):>5} done, "
                f"err {s.error_rate * 100:5.1f}%, P95 E2E {'-' if p95 is None else f'{p95 * 1000:.0f} ms'}, "
                f"{s.output_tps:.0f} tok/s")

    def stop(self, grace: float = 10.0) -> None:
        """Ask Locust to stop (it writes its stats), then make sure every process we started is gone."""
        self.interrupted = True
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        self.reap(grace)

    @contextmanager
    def running(self):
        """Started, and whatever happens inside stopped: Ctrl-C stops Locust and keeps what was recorded (the
        load counts as interrupted), an error stops every process we started before it goes on up."""
        try:
            self.start()
            yield self
        except KeyboardInterrupt:
            self.progress("interrupted: stopping Locust and keeping what was recorded ...")
            self.stop()
        finally:
            if self.procs and any(p.poll() is None for p in self.procs):
                self.stop()

    def end_early(self, why: str, grace: float = 5.0) -> None:
        """Stop the load before its plan ends because the caller has what it needed (a capacity level decided):
        not an interruption, and said in notes and summary.json."""
        self.stop(grace)
        self.interrupted, self.ended_early = False, why
        self.notes.append(f"ended early: {why}")

    def reap(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the group: anything the process left behind
            except (ProcessLookupError, PermissionError):
                pass
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass
        for log in self._logs:
            log.close()
        self._logs = []
        if self.replay is None and self.replay_window is not None:
            self.account_replay()  # every way a run ends passes here: a caller that only stop()s still sees it

    def wait(self, interval: float = 5.0) -> None:
        """Block until Locust ends (it always does: the plan is bounded), reporting every interval s."""
        limit = self.cfg.plan.duration + self.cfg.plan.stop_timeout + 60
        next_report = time.monotonic() + interval if interval else float("inf")
        while self.poll():
            time.sleep(0.2)
            now = time.monotonic()
            if now - self.mono_start > limit:
                self.notes.append(f"Locust did not stop by itself within {limit:.0f}s; it was stopped")
                self.stop()
                break
            if now >= next_report:
                self.progress(self.live_line())
                next_report += interval
        self.reap(15.0)

    # -- after --------------------------------------------------------------------------------
    def fleet_facts(self, records) -> None:
        """With workers: each one's clock offset from the master's, and any the master lost, into the notes."""
        if not self.cfg.workers:
            return
        said = fleet.offsets_note(fleet.read_offsets(self.cfg.out_dir), self.cfg.workers)
        hosts = {w: p[2] for w, p in self.cfg.places.items()}
        end = min(self._clock.now(), self.t_start + self.cfg.plan.duration)  # an interrupted load ended sooner
        for note in [said] + fleet.silent_workers(records, self.cfg.workers, self.t_start, end, hosts):
            if note and note not in self.notes:
                self.notes.append(note)

    def result(self) -> LoadResult:
        records = read_records(self.records_path)
        plan = self.cfg.plan
        durations = {s.name: s.duration for s in plan.stages}
        steps = summarize_steps(records, [s.name for s in plan.stages], plan.open_loop, durations)
        overall = summarize(records, "all", plan.open_loop)
        replay = self.account_replay(records) if self.replay_window is not None else None
        if replay is not None:
            replay["lag"] = overall.lag
        facts = self.input_facts(records) or {}
        self.fleet_facts(records)
        rc = self.main.returncode if self.main is not None else None
        if rc not in (0, 1, None) and not self.interrupted and not self.ended_early:
            log = os.path.join(self.cfg.out_dir, "locust-master.log" if self.cfg.workers else "locust.log")
            tail = open(log).read()[-600:] if os.path.exists(log) else ""
            self.notes.append(f"Locust exited with {rc}: {tail.strip()}")
        res = LoadResult(self.cfg.out_dir, self.records_path, steps, overall, self.model, self.tokenizer,
                         self.timeouts, rc, self.interrupted, self.notes, replay)
        with open(os.path.join(self.cfg.out_dir, "summary.json"), "w") as f:
            json.dump({"target": self.cfg.target, "model": self.model, "tokenizer": self.tokenizer,
                       "token_counts": "exact" if self.tokenizer == "byte" else "estimate",
                       "timeouts": self.timeouts, "ignore_eos": self.cfg.ignore_eos,
                       "keep_alive": self.cfg.keep_alive, "plan": plan.to_dict(),
                       "limits": self.cfg.limits.to_dict() if self.cfg.limits is not None else None,
                       "interrupted": self.interrupted, "ended_early": self.ended_early,
                       "locust_exit_code": rc, "notes": self.notes, "replay": replay, "scrub": facts.get("scrub"),
                       "replay_filter": {"filter": facts["filter"], "filtered": facts["filtered"]}
                       if facts.get("filter") else None, "replay_failed": facts.get("failed"),
                       "overall": overall.to_dict(),
                       "steps": [s.to_dict() for s in steps]}, f, indent=2)
        with open(os.path.join(self.cfg.out_dir, "summary.txt"), "w") as f:
            f.write(res.table() + "\n")
        return res


def run_load(cfg: LoadConfig, progress=print, interval: float = 5.0) -> LoadResult:
    run = LoadRun(cfg, progress)
    with run.running():
        run.wait(interval)
    return run.result()
