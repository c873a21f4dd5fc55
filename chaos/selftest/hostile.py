"""`chaos selftest hostile`: every hostile request of cases.py, sent to replicas directly and through the gateway,
while a watcher polls /health and the gateway's view of its replicas; then the counts a good service keeps at 0.

The counts: requests sent; wrong answers (a status other than the case's good one); 5xx or no answer; engine
deaths; replicas the gateway took out of rotation (ejected, unhealthy, breaker open); KV blocks still held once
idle; /health checks that failed or took longer than the gateway's own health timeout (1 s).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from ..common import is_loopback, stop_group
from ..errors import InputError, SetupError, counts_as, handled
from .abnormal import AbnormalCase, abnormal_cases, check
from .expectations import differs_from, observed, read_table, verdict, write_table
from .batch import Destination, normal_request
from .cases import hostile_cases, send

HEALTH_TIMEOUT_S = 1.0  # the gateway's health_timeout_s: a slower /health looks like an outage to it
CANARY_SLOW_S = 0.25  # an idle server answers a GET in ~1 ms; slower means the machine, not the replica
NORMAL_TIMEOUT_S = 60.0  # the normal request sent after the cases
COUNTS = ("requests", "wrong", "errors_5xx", "engine_deaths", "replicas_out", "kv_blocks_leaked",
          "health_failures", "normal_after_failed")
PER_PATH = ("requests", "wrong", "errors_5xx")  # counted per request; the rest once, over the whole run
LABELS = {"requests": "requests sent", "wrong": "wrong answers (not the good status)",
          "errors_5xx": "5xx or no answer", "engine_deaths": "engine deaths",
          "replicas_out": "replicas taken out by the gateway", "kv_blocks_leaked": "KV blocks leaked",
          "health_failures": f"/health failures (non-200 or over {HEALTH_TIMEOUT_S:g} s)",
          "normal_after_failed": "normal requests failing afterwards"}


@dataclass(slots=True)
class Tally:
    requests: int = 0
    wrong: int = 0
    errors_5xx: int = 0
    engine_deaths: int = 0
    replicas_out: int = 0
    kv_blocks_leaked: int = 0
    health_failures: int = 0
    normal_after_failed: int = 0
    findings: list[str] = field(default_factory=list)  # one line per thing that went wrong
    unjudged: list[str] = field(default_factory=list)  # checks the overloaded machine kept from judging

    @property
    def clean(self) -> bool:
        return all(getattr(self, c) == 0 for c in COUNTS if c != "requests")


def _get(url: str, timeout: float = 5.0) -> tuple[int | None, bytes, float]:
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read(), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.monotonic() - t0
    except OSError:
        return None, b"", time.monotonic() - t0


class Canary:
    """An idle stdlib HTTP server in its own process. It does no work, so when it answers slowly the machine is
    overloaded, and a replica's slow /health at the same moment says nothing about the replica."""

    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1"],
                                     cwd=self.dir.name, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, start_new_session=True)
        line = self.proc.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (...)"
        m = re.search(r"port (\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError(f"the canary server did not start: {line.strip()!r}")
        self.url = f"http://127.0.0.1:{m.group(1)}"

    def stop(self) -> None:
        stop_group(self.proc.pid, None, 2.0, self.proc)
        self.dir.cleanup()


class Watcher(threading.Thread):
    """Polls /health of every URL, and the gateway's /gateway/state, until stopped (bounded by max_s).

    Each round checks the replicas and the idle canary at the same moment. A slow /health in a round where
    the canary was slow too (over CANARY_SLOW_S) is not judged: it is the machine's, not the replica's."""

    def __init__(self, health: dict[str, str], gateway: str | None, canary: Canary | None = None,
                 every_s: float = 0.25, max_s: float = 1800):
        super().__init__(daemon=True, name="selftest-watcher")
        self.health, self.gateway, self.canary, self.every_s, self.max_s = health, gateway, canary, every_s, max_s
        self.stop_event = threading.Event()
        self.failures: list[str] = []
        self.unjudged: list[str] = []
        self.out_of_rotation: dict[str, str] = {}  # replica -> the first state that took it out
        self.in_flight = ""  # the case being sent, named in a failure line

    def _round(self, pool: ThreadPoolExecutor) -> None:
        urls = dict(self.health) | ({"canary": self.canary.url} if self.canary else {})
        got = dict(zip(urls, pool.map(lambda u: _get(u + "/health", timeout=HEALTH_TIMEOUT_S * 5), urls.values())))
        canary_took = got.pop("canary", (None, b"", 0.0))[2]
        for name, (status, _, took) in got.items():
            if status == 200 and took <= HEALTH_TIMEOUT_S:
                continue
            line = (f"{name} /health: {status or 'no answer'} after {took:.2f}s, while sending "
                    f"{self.in_flight or 'nothing'}")
            if status == 200 and canary_took > CANARY_SLOW_S:
                self.unjudged.append(f"{line} (the idle canary took {canary_took:.2f}s: the machine is overloaded)")
            else:
                self.failures.append(line)

    def run(self) -> None:
        deadline = time.monotonic() + self.max_s
        with ThreadPoolExecutor(max_workers=len(self.health) + 1) as pool:
            while not self.stop_event.is_set() and time.monotonic() < deadline:
                self._round(pool)
                if self.gateway:
                    status, body, _ = _get(self.gateway + "/gateway/state")
                    if status == 200:
                        for name, u in json.loads(body).get("primary", {}).items():
                            if (u["state"] != "up" or u["breaker"] != "closed") and name not in self.out_of_rotation:
                                self.out_of_rotation[name] = f"{u['state']}, breaker {u['breaker']}"
                self.stop_event.wait(self.every_s)


def send_all(tally: Tally, cases, urls: list[tuple[str, str]], headers: dict, progress, watcher=None,
             table: dict | None = None, rows: list | None = None) -> None:
    """Each case to the next URL in turn (so every replica gets its share directly). With `table` (an engine's
    recorded answers) each answer is judged against that engine's own; `rows` collects every answer (--record).
    A 5xx or no answer is counted either way."""
    for i, case in enumerate(cases):
        where, url = urls[i % len(urls)]
        if watcher is not None:
            watcher.in_flight = f"{case.name!r} to {where}"
        status, _, body = send(case, url, headers=headers)
        tally.requests += 1
        obs = observed(status, body)
        code = obs["code"]
        if status is None or status >= 500:
            tally.errors_5xx += 1
        # a generated abnormal case is judged whole (status, error.param and error.code, choices on a 200)
        problem = check(case, status, body) if isinstance(case, AbnormalCase) else None
        if rows is not None:
            rows.append({"case": case.name, **obs, "verdict": verdict(case, obs, problem)})
        if table is not None:
            changed = differs_from(table["cases"].get(case.name), obs)
            if changed:
                tally.wrong += 1
                tally.findings.append(f"{where}: {case.name}: {changed}")
            elif status is None or status >= 500:  # recorded, and still a finding every time
                tally.findings.append(f"{where}: {case.name}: {status or 'no answer'} {code or ''} (as recorded: "
                                      f"a finding, never an expectation)")
        elif status not in case.expect or problem:
            tally.wrong += 1
            tally.findings.append(f"{where}: {case.name}: {status or 'no answer'} {code or ''} "
                                  f"(a good server answers {'/'.join(map(str, case.expect))})"
                                  + (f": {problem[:160]}" if problem and status in case.expect else ""))
        if (i + 1) % 25 == 0 or i + 1 == len(cases):
            progress(f"  {where if len(urls) == 1 else 'direct'}: {i + 1}/{len(cases)} sent, {tally.wrong} wrong")


def _metric(text: str, name: str) -> float | None:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


def settle(base_url: str, timeout_s: float = 30.0) -> tuple[float | None, float | None]:
    """Wait until a reference replica is idle; (kv_cache_usage_perc, requests running+waiting) then."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, body, _ = _get(base_url + "/metrics")
        text = body.decode(errors="replace") if status == 200 else ""
        usage = _metric(text, "vllm:kv_cache_usage_perc")
        busy = (_metric(text, "vllm:num_requests_running") or 0) + (_metric(text, "vllm:num_requests_waiting") or 0)
        if (busy == 0 and usage == 0) or time.monotonic() > deadline or status != 200:
            return usage, busy
        time.sleep(0.2)


def read_metric(base_url: str, name: str) -> float | None:
    """One value of a server's /metrics (the first series of that name); None when it cannot be read."""
    status, body, _ = _get(base_url + "/metrics")
    return _metric(body.decode(errors="replace"), name) if status == 200 else None


def all_cases(model: str, max_model_len: int, abnormal: bool, seed: int = 0) -> list:
    """The hostile requests, and with abnormal the generated abnormal content too (chaos.selftest.abnormal)."""
    return hostile_cases(model, max_model_len) + (abnormal_cases(seed, model, max_model_len) if abnormal else [])


def run_reference(replicas: int, preset: str, progress=print, abnormal: bool = False) -> dict:
    """Start `replicas` reference replicas and a gateway in front of them, send every case directly and through
    the gateway, and count. Everything started is stopped before returning."""
    from ..reference.launcher import start_gateway, start_server

    started = []
    try:
        progress(f"starting {replicas} reference replicas ({preset}) and a gateway ...")
        reps = []
        for i in range(replicas):  # each stopped in the end even when a later one fails to start
            reps.append(start_server(["--preset", preset, "--replica-id", f"r{i}", "--enable-fault-hooks"]))
            started.append(reps[-1])
        gw = start_gateway(reps, args=["--settings", json.dumps({"health_interval_s": 0.5})])
        started.append(gw)
        model_card = json.loads(_get(reps[0].base_url + "/v1/models")[1])["data"][0]
        model, max_model_len = model_card["id"], model_card["max_model_len"]
        cases = all_cases(model, max_model_len, abnormal)
        canary = Canary()
        started.append(canary)
        watcher = Watcher({f"r{i}": r.base_url for i, r in enumerate(reps)} | {"gateway": gw.base_url},
                          gw.base_url, canary)
        watcher.start()
        direct, through = Tally(), Tally()
        progress(f"{len(cases)} hostile cases, directly to the replicas in turn ...")
        send_all(direct, cases, [(f"r{i}", r.base_url) for i, r in enumerate(reps)], {}, progress, watcher)
        progress("... and through the gateway")
        send_all(through, cases, [("gateway", gw.base_url)], {}, progress, watcher)
        watcher.stop_event.set()
        watcher.join(10)
        total = Tally(**{c: getattr(direct, c) + getattr(through, c) for c in COUNTS},
                      findings=direct.findings + through.findings)
        total.health_failures = len(watcher.failures)
        total.findings += watcher.failures[:20]
        total.unjudged = watcher.unjudged
        total.replicas_out = len(watcher.out_of_rotation)
        total.findings += [f"gateway took {n} out: {why}" for n, why in watcher.out_of_rotation.items()]
        for i, r in enumerate(reps):
            blocks = re.search(r"(\d+) KV blocks of", " ".join(r.output))
            status, _, _ = _get(r.base_url + "/health")
            if status != 200 or r.proc.poll() is not None:
                total.engine_deaths += 1
                total.findings.append(f"r{i}: /health {status or 'no answer'}"
                                      + (f", exited {r.proc.returncode}" if r.proc.poll() is not None else ""))
                continue
            usage, busy = settle(r.base_url)
            if usage and blocks:
                total.kv_blocks_leaked += round(usage * int(blocks.group(1)))
                total.findings.append(f"r{i}: {usage:.1%} of the KV cache still held when idle ({busy:g} requests)")
        for where, url in [(f"r{i}", r.base_url) for i, r in enumerate(reps)] + [("gateway", gw.base_url)]:
            status, _, why = normal_request(Destination(where, url), model, NORMAL_TIMEOUT_S)
            if status != 200:
                total.normal_after_failed += 1
                total.findings.append(f"{where}: a normal request afterwards got {status or why}")
        return {"target": f"{replicas} reference replicas ({preset}) behind the gateway",
                "cases": len(cases), "direct": _counts(direct), "gateway": _counts(through),
                "total": _counts(total), "clean": total.clean, "findings": total.findings,
                "unjudged": total.unjudged}
    finally:
        for s in reversed(started):
            s.stop()


def run_url(url: str, model: str | None, progress=print, abnormal: bool = False, record: str | None = None,
            expect: str | None = None) -> dict:
    """Every case to one OpenAI-compatible server that is already running (loopback only). record: write what it
    answered as its expectation table; expect: judge it against such a table (chaos.selftest.expectations)."""
    table = read_table(expect) if expect else None
    status, body, _ = _get(url + "/v1/models")
    card = json.loads(body)["data"][0] if status == 200 else {}
    model = model or card.get("id")
    if not model:
        raise ValueError(f"{url}/v1/models did not name a model ({status or 'no answer'}); give --model")
    cases = all_cases(model, int(card.get("max_model_len") or 4096), abnormal)
    canary = Canary()
    try:
        watcher = Watcher({"target": url}, None, canary)
        watcher.start()
        tally, rows = Tally(), []
        progress(f"{len(cases)} hostile cases to {url} ...")
        send_all(tally, cases, [("target", url)], {}, progress, watcher, table, rows)
        watcher.stop_event.set()
        watcher.join(10)
    finally:
        canary.stop()
    tally.health_failures = len(watcher.failures)
    tally.findings += watcher.failures[:20]
    tally.unjudged = watcher.unjudged
    status, _, why = normal_request(Destination("target", url), model, NORMAL_TIMEOUT_S)
    if status != 200:
        tally.normal_after_failed = 1
        tally.findings.append(f"a normal request afterwards got {status or why}")
    if record:
        write_table(record, rows, {"target_model": model, "owned_by": card.get("owned_by"),
                                   "max_model_len": card.get("max_model_len"), "abnormal": abnormal})
        progress(f"recorded {len(rows)} answers as the expectation table {record}")
    out = {"target": url, "cases": len(cases), "total": _counts(tally), "clean": tally.clean,
           "findings": tally.findings, "unjudged": tally.unjudged}
    if table is not None:
        out["judged_against"] = expect
    return out


def _counts(t: Tally) -> dict:
    d = asdict(t)
    d.pop("findings")
    d.pop("unjudged")
    return d


def render(result: dict) -> str:
    cols = [c for c in ("direct", "gateway", "total") if c in result]
    lines = [f"hostile self-test: {result['cases']} cases, {result['target']}", "",
             f"  {'':<44}" + "".join(f"{c:>10}" for c in cols)]
    for c in COUNTS:
        cells = [str(result[col].get(c, 0)) if col == "total" or c in PER_PATH else "" for col in cols]
        lines.append(f"  {LABELS[c]:<44}" + "".join(f"{v:>10}" for v in cells))
    if result.get("judged_against"):
        lines.append(f"  (wrong answers: those that differ from the engine's own table {result['judged_against']})")
    lines.append("")
    lines += [f"  ! {f}" for f in result["findings"][:40]]
    unjudged = result.get("unjudged") or []
    if unjudged:
        lines.append(f"  {len(unjudged)} /health checks not judged (the machine was overloaded), e.g.:")
        lines += [f"  ? {u}" for u in unjudged[:3]]
    lines.append("clean: every count is 0" if result["clean"] else "NOT clean: see the lines marked !")
    return "\n".join(lines)


@handled(stream="stdout")  # this command says everything on stdout, its errors too
def cmd_selftest(args) -> int:
    def progress(line: str) -> None:
        print(line, flush=True)

    # a flag's ValueError is the user's to fix; a server that would not start (LaunchError), the setup's
    with counts_as(InputError, ValueError), counts_as(SetupError, RuntimeError, OSError):
        if args.url:
            from urllib.parse import urlparse

            if not is_loopback(urlparse(args.url).hostname):  # 127.attacker.example is a name, not 127/8
                print(f"error: {args.url} is not a loopback address; the self-test sends hostile traffic, so it "
                      f"only goes to 127.0.0.0/8 here", flush=True)
                return 2
            result = run_url(args.url.rstrip("/"), args.model, progress, args.abnormal, args.record, args.expect)
        else:
            if args.record or args.expect:
                print("error: --record and --expect go with --url (an engine of yours)", flush=True)
                return 2
            if not 1 <= args.replicas <= 8:
                print("error: --replicas must be between 1 and 8", flush=True)
                return 2
            result = run_reference(args.replicas, args.preset, progress, args.abnormal)
    print(render(result), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if result["clean"] else 1

