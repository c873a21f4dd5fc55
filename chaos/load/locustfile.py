"""The Locust side: the LLM user, the load shape, and where records go.

Runs only inside a Locust process (`import locust` patches the process with gevent),
started by chaos.load.driver with CHAOS_LOAD_CONFIG naming a JSON config. Each request
is timed by the user itself, on one monotonic clock (chaos.load.clock): intended and
actual send time, first token, every inter-token gap, end. TTFT, TPOT and E2E are also
fired as Locust request events so Locust's stats, CSV and web UI show them beside its own
time-to-headers entry.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import uuid

import gevent
from locust import FastHttpUser, LoadTestShape, constant, events, task
from locust.runners import MasterRunner, WorkerRunner

from chaos.common import parse_retry_after
from chaos.errors import Finding
from chaos.load import fleet
from chaos.load.clock import WORKER_ENV, Clock
from chaos.load.judge import fill_timing, judge_plain, judge_stream
from chaos.records.labels import merge_header
from chaos.records import RequestRecord
from chaos.load.replay.player import Replayer
from chaos.load.shapes import ArrivalSchedule, LoadPlan
from chaos.load.sse import StreamState, StreamTiming, error_code_of, read_stream
from chaos.load.workloads import Workload, WorkloadSpec

with open(os.environ["CHAOS_LOAD_CONFIG"]) as _f:
    CFG = json.load(_f)
PLAN = LoadPlan.from_dict(CFG["plan"])
WORKLOAD = Workload([(WorkloadSpec(**s), w) for s, w in CFG["workload"]["specs"]], seed=CFG["workload"]["seed"],
                    tokenizer=CFG["workload"]["tokenizer"], ignore_eos=CFG["workload"].get("ignore_eos", True))
TIMEOUTS = CFG["timeouts"]
RETRY = CFG["retry"]
RECORD_MSG = "chaos_records"
FLUSH_INTERVAL = 0.25
CLOCK = Clock.from_env()  # every timestamp: the run's one wall-clock anchor plus monotonic deltas
now = CLOCK.now


class _Timeout(Finding):
    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


class Process:
    """Per-process state: who we are, the request counter, the arrival schedule, the record sink."""

    def __init__(self):
        self.index, self.count = 0, 1
        self.next_request = 0
        self.t0: float | None = None
        self.schedule: ArrivalSchedule | None = None
        self.buffer: list[str] = []
        self.file = None
        self.runner = None
        self.worker_name = "local"
        self.in_flight = 0
        self.budget = PLAN.max_requests
        self.replayer = None
        # a worker: the master's clock minus ours (chaos.load.fleet), None until the exchanges at its start
        self.offset: float | None = None
        self.clock_samples: list[tuple[float, float, float, float]] = []
        self.clock_since: float | None = None

    def start(self, runner):
        self.runner = runner
        if isinstance(runner, WorkerRunner):
            self.index, self.count = runner.worker_index, max(1, CFG.get("workers", 1))
            # the name the run gave it where it placed it (Locust numbers workers as they connect)
            self.worker_name = os.environ.get(WORKER_ENV) or f"w{self.index}"
        if self.budget is not None:
            share, extra = divmod(PLAN.max_requests, self.count)
            self.budget = share + (1 if self.index < extra else 0)
        self.t0 = now()
        self.next_request = self.index
        if PLAN.open_loop and not PLAN.replay_speed:
            self.schedule = ArrivalSchedule(PLAN, self.t0, self.count, self.index, CFG["workload"]["seed"])

    def take_index(self) -> int | None:
        if self.budget is not None:
            if self.budget <= 0:
                return None
            self.budget -= 1
        i = self.next_request
        self.next_request += self.count
        return i

    def step_at(self, t: float) -> str | None:
        found = PLAN.stage_at(t - (self.t0 or t))
        return found[1].name if found else PLAN.stages[-1].name

    def add(self, rec: RequestRecord):
        self.buffer.append(rec)

    def flush(self, final: bool = False):
        if not self.buffer:
            return
        worker = isinstance(self.runner, WorkerRunner)
        if worker and self.offset is None and not final and self.clock_since is not None \
                and now() - self.clock_since < fleet.WAIT_S:
            return  # held until the worker's clock is set onto the master's
        recs, self.buffer = self.buffer, []
        lines = [(fleet.shift(r, self.offset) if self.offset else r).to_json() for r in recs]
        if worker:
            self.runner.send_message(RECORD_MSG, lines)
        else:
            write_lines(lines)

    def ask_clock(self):
        """A worker: EXCHANGES pings of the master's clock, one at a time; the reply handler ends each."""
        self.clock_since = now()
        for k in range(fleet.EXCHANGES):
            self.runner.send_message(fleet.PING, {"k": k, "t1": now()})
            deadline = now() + 0.5
            while len(self.clock_samples) <= k and now() < deadline:
                gevent.sleep(0.005)
        if self.clock_samples:
            found = fleet.estimate(self.clock_samples)
            self.offset = found["offset"]
            self.runner.send_message(fleet.RESULT, {"worker": self.worker_name, **found})

    def on_pong(self, data):
        self.clock_samples.append((data["t1"], data["t2"], data["t3"], now()))


PROC = Process()
_out = {"file": None}


def write_lines(lines: list[str]):
    if _out["file"] is None:
        _out["file"] = open(CFG["records_path"], "a", buffering=1)
    _out["file"].write("\n".join(lines) + "\n")
    _out["file"].flush()


def _flusher():
    while True:
        gevent.sleep(FLUSH_INTERVAL)
        PROC.flush()


@events.init.add_listener
def _on_init(environment, **_):
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        runner.register_message(RECORD_MSG, lambda environment, msg, **kw: write_lines(msg.data))
        runner.register_message(fleet.PING, lambda environment, msg, **kw: runner.send_message(
            fleet.PONG, {**msg.data, "t2": now(), "t3": now()}, client_id=msg.node_id))
        runner.register_message(fleet.RESULT, lambda environment, msg, **kw: fleet.write_offset(
            os.path.dirname(CFG["records_path"]), msg.data.pop("worker"), msg.data))
    elif runner is not None:
        if isinstance(runner, WorkerRunner):
            skew = float(os.environ.get(fleet.SKEW_ENV) or 0)
            if skew:  # a test: this worker's clock off by skew, as another host's
                CLOCK.wall0 += skew
            runner.register_message(fleet.PONG, lambda environment, msg, **kw: PROC.on_pong(msg.data))
        gevent.spawn(_flusher)


@events.test_start.add_listener
def _on_test_start(environment, **_):
    if not isinstance(environment.runner, MasterRunner):
        PROC.start(environment.runner)
        if isinstance(environment.runner, WorkerRunner):
            gevent.spawn(PROC.ask_clock)


@events.test_stop.add_listener
def _on_test_stop(environment, **_):
    PROC.flush(final=True)


@events.quitting.add_listener
def _on_quitting(environment, **_):
    PROC.flush(final=True)
    if _out["file"] is not None:
        _out["file"].close()
        _out["file"] = None


def classify_exception(e: BaseException) -> tuple[str, str | None, str]:
    """(outcome, timeout_kind, message) for a transport failure."""
    msg = f"{type(e).__name__}: {e}"[:200]
    if isinstance(e, _Timeout):
        return "timeout", e.kind, f"{e.kind} timeout"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timeout", "connect", msg
    if isinstance(e, ConnectionRefusedError) or getattr(e, "errno", None) == errno.ECONNREFUSED:
        return "connect_error", None, msg
    if isinstance(e, (ConnectionResetError, BrokenPipeError)) or getattr(e, "errno", None) in (
            errno.ECONNRESET, errno.EPIPE):
        return "reset", None, msg
    name = type(e).__name__
    if name in ("HTTPConnectionClosed",):
        return "reset", None, msg
    if name in ("HTTPParseError",):
        return "stream_error", None, msg
    return "connect_error", None, msg


def retry_cause(rec: RequestRecord) -> str:
    """What made this attempt worth retrying: its status, or how the transport failed."""
    if rec.outcome == "http_error" and rec.status:
        return str(rec.status)
    return f"timeout:{rec.timeout_kind}" if rec.outcome == "timeout" and rec.timeout_kind else rec.outcome


def _retry_delay(attempt: int, headers) -> float:
    ra = parse_retry_after(headers)
    backoff = RETRY["backoff_s"] * (2 ** attempt)
    return min(RETRY.get("max_delay_s", 10.0), ra if ra is not None else backoff)


class LLMUser(FastHttpUser):
    """Streams OpenAI-compatible requests and times each one by itself."""

    wait_time = constant(CFG.get("think_time", 0.0))
    connection_timeout = TIMEOUTS["connect"]
    network_timeout = TIMEOUTS["total"]
    # a timed replay sends from one user per process, up to the plan's max_users requests at once on its pool
    concurrency = PLAN.stages[0].users if PLAN.replay_speed else 1
    max_retries = 0

    @task
    def one_request(self):
        if PROC.t0 is None:
            PROC.start(self.environment.runner)
        if now() - PROC.t0 >= PLAN.duration:
            gevent.sleep(0.5)  # the plan is over: start nothing new while Locust stops the users
            return
        if PLAN.replay_speed:
            if PROC.replayer is None:  # one dispatcher a process sends the whole log; other users only wait
                PROC.replayer = Replayer(self, PROC, PLAN, WORKLOAD, CFG, now)
                PROC.replayer.run()
            gevent.sleep(0.5)
            return
        # The budget is taken before any sleep to an arrival slot: a request counts as in flight from then, so the
        # budget's end waits for the sleepers instead of ending the run under them, and a user past the budget
        # stops now instead of sleeping to a slot it could not use (256 users at 1/s: minutes of idling).
        index = PROC.take_index()
        if index is None:
            self._budget_spent()
            return
        PROC.in_flight += 1
        try:
            if PROC.schedule is not None:
                t_sched = PROC.schedule.next()
                if t_sched is None:
                    gevent.sleep(0.5)  # the plan is over; the shape ends the run
                    return
                gevent.sleep(max(0.0, t_sched - now()))
            else:
                t_sched = now()
            rec = self.run_request(WORKLOAD.request(index), t_sched, index)
        finally:
            PROC.in_flight -= 1
        PROC.add(rec)
        self._fire_timings(rec)

    def _budget_spent(self):
        runner = self.environment.runner
        if PROC.in_flight == 0 and not isinstance(runner, WorkerRunner) and runner is not None:
            PROC.flush()
            gevent.spawn_later(0.1, runner.quit)
        gevent.sleep(0.5)

    def _fire_timings(self, rec: RequestRecord):
        fire = self.environment.events.request.fire
        failed = rec.outcome not in ("ok",)
        exc = Exception(f"{rec.outcome}: {rec.error_code or rec.error or ''}") if failed else None
        base = dict(request_type="LLM", context={}, response=None, url=None, start_time=rec.t_start)
        if rec.t_end is not None:
            fire(name=f"E2E {rec.case}", response_time=(rec.t_end - rec.t_sched) * 1000,
                 response_length=rec.output_tokens, exception=exc, **base)
        if rec.t_first is not None:  # from the intended send time, as the summary counts open-loop latency
            fire(name=f"TTFT {rec.case}", response_time=(rec.t_first - rec.t_sched) * 1000, response_length=0,
                 exception=None, **base)
            if rec.output_tokens > 1 and rec.t_end is not None:
                tpot = (rec.t_end - rec.t_first) / (rec.output_tokens - 1)
                fire(name=f"TPOT {rec.case}", response_time=tpot * 1000, response_length=0, exception=None, **base)

    def run_request(self, req, t_sched: float, index: int = 0) -> RequestRecord:
        stream = CFG["stream"]
        body = {"model": CFG["model"], **req.body, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        hosts = CFG["hosts"]  # absolute API bases; several rotate (client-side balancing, no health checks)
        path = hosts[index % len(hosts)] + ("/chat/completions" if req.endpoint == "chat" else "/completions")
        asked = body.get("max_tokens", body.get("max_completion_tokens"))
        rec = RequestRecord(id=uuid.uuid4().hex, case=req.case, endpoint=req.endpoint, stream=stream,
                            t_sched=t_sched, t_start=t_sched, input_tokens=req.input_tokens,
                            input_tokens_source=req.input_tokens_source, worker=PROC.worker_name,
                            step=PROC.step_at(t_sched), ignore_eos=body.get("ignore_eos") is True,
                            fixed_output=req.fixed_output, source_line=req.source_line, scrubbed=req.scrubbed,
                            stability_key=req.stability_key,
                            requested_tokens=asked if isinstance(asked, int) and not isinstance(asked, bool) else None)
        ids = CFG.get("host_ids") or []
        if len(ids) == len(hosts):  # no gateway: the replica it was sent to, unless the answer names another
            rec.served_by = ids[index % len(ids)]
        # One id for every attempt of this request: the fault proxy's log names requests by it (chaos.records.labels).
        headers = {"x-request-id": rec.id, "Content-Type": "application/json"}
        if not CFG.get("keep_alive", True):
            headers["Connection"] = "close"  # the target's keep_alive: false (and _detached closes it, whatever
            # the server answers)
        key_env = CFG.get("api_key_env")
        if key_env and os.environ.get(key_env):
            headers["Authorization"] = "Bearer " + os.environ[key_env]
        data = json.dumps(body)
        rec.t_start = now()  # the actual send time: after the body is encoded, before the request is built
        attempt = 0
        while True:
            resp_headers = self._attempt(path, data, headers, rec, req)
            # Safe to retry only while nothing was streamed; statuses as openai-python retries them.
            transport = rec.outcome in ("connect_error", "reset", "timeout") and rec.t_first is None
            status = rec.outcome == "http_error" and (rec.status in (408, 409, 429) or (rec.status or 0) >= 500)
            retryable = transport or status
            if rec.error_code == "insufficient_quota" or not retryable or attempt >= RETRY["max"]:
                return rec
            delay = _retry_delay(attempt, resp_headers)
            rec.retries += 1
            if rec.status:
                rec.retry_statuses.append(rec.status)
            rec.retry_causes.append(retry_cause(rec))
            gevent.sleep(delay)
            attempt += 1

    def _attempt(self, path, data, headers, rec: RequestRecord, req):
        """One try; fills rec. Returns the response headers (for Retry-After) or None."""
        rec.outcome, rec.status, rec.error_code, rec.error, rec.timeout_kind = "ok", None, None, None, None
        rec.t_first = rec.t_end = None
        timing = StreamTiming()
        state = StreamState()
        resp_headers = None
        resp = close = None
        total = gevent.Timeout(TIMEOUTS["total"], _Timeout("total"))
        total.start()
        try:
            first = gevent.Timeout(TIMEOUTS["first_token"], _Timeout("first_token"))
            first.start()
            try:
                resp = self.client.request("POST", path, data=data, headers=headers, stream=True,
                                           name=f"{req.case} (headers)")
                err = getattr(resp, "error", None)
                if err is not None and getattr(resp, "_response", None) is None:
                    raise err
                if not CFG.get("keep_alive", True):
                    close = _detached(resp)
                resp_headers = resp.headers
                rec.status = resp.status_code
                if resp.headers is not None:
                    # the bundled gateway's header, else LiteLLM's deployment id (its model_info id: r0, r1)
                    rec.served_by = (resp.headers.get("x-served-by") or resp.headers.get("x-litellm-model-id")
                                     or rec.served_by)
                    rec.fault = merge_header(rec.fault, resp.headers)  # kept across retries
                if rec.status >= 400:
                    payload = resp.content
                    rec.outcome = "http_error"
                    rec.error_code, rec.error = error_code_of(payload)
                    rec.t_end = now()
                    return resp_headers
                if not rec.stream:
                    payload = resp.content
                    rec.t_end = now()
                    judge_plain(payload, rec, req)
                    rec.t_first = rec.t_end if rec.output_tokens else None
                    return resp_headers
                raw = resp._response
                read_stream(lambda: raw.readline(b"\n"), state, timing, on_first=first.cancel)
            finally:
                first.cancel()
            rec.t_end = now()
            fill_timing(rec, timing, CLOCK)
            judge_stream(state, rec, req)
            self._finish_response(raw)
        except _Timeout as t:
            rec.outcome, rec.timeout_kind, rec.error = "timeout", t.kind, f"no {'first token' if t.kind == 'first_token' else 'end'} within the {t.kind} timeout"
            rec.t_end = now()
            fill_timing(rec, timing, CLOCK)
            self._discard(resp)
        except gevent.GreenletExit:
            rec.outcome, rec.error, rec.t_end = "cancelled", "the load test stopped", now()
            fill_timing(rec, timing, CLOCK)
            self._discard(resp)
            PROC.add(rec)
            raise
        except Exception as e:  # transport failures
            rec.outcome, rec.timeout_kind, rec.error = classify_exception(e)
            rec.t_end = now()
            fill_timing(rec, timing, CLOCK)
            self._discard(resp)
        finally:
            total.cancel()
            if close is not None:
                close()
        return resp_headers

    @staticmethod
    def _finish_response(raw):
        """Read what follows [DONE] (the chunked terminator often comes in a later write) so the connection
        goes back to the pool instead of being closed: a new connection per request costs time and, over
        TLS, a handshake."""
        try:
            with gevent.Timeout(1.0, False):
                while raw.readline(b"\n"):
                    pass
            raw.release()  # complete: returned to the pool (unless _detached); cut short: closed
        except Exception:
            pass

    @staticmethod
    def _discard(resp):
        raw = getattr(resp, "_response", None)
        if raw is not None:
            try:
                raw.release()  # an unfinished response: the pool closes its socket
            except Exception:
                pass


def _detached(resp):
    """The target's keep_alive: false. Take the response's connection out of geventhttpclient's hands before
    the body is read (it pools a connection the moment a message completes, by the response's headers alone,
    whatever the request said); the returned call closes it and frees its slot in the pool."""
    raw = getattr(resp, "_response", None)
    pool, sock = getattr(raw, "_pool", None), getattr(raw, "_sock", None)
    if pool is None or sock is None:
        return None
    raw._pool = None  # its release() then leaves the socket to us
    return lambda: pool.release_socket(sock)


class PlanShape(LoadTestShape):
    """Users over time from the plan; None ends the run (Locust then stops every user)."""

    def tick(self):
        t = self.get_run_time()
        found = PLAN.users_at(t)
        if found is None:
            return None
        users, spawn_rate, _ = found
        if PLAN.replay_speed:
            users = max(1, CFG.get("workers", 1))  # one dispatcher a process (Replayer); it spawns the sends
        return users, spawn_rate
