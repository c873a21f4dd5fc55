"""Send a batch of abnormal cases to one destination (a replica, or the gateway) and judge every answer, without
letting a destination that stopped answering hold the batch for hours.

A case that gets no answer, or a 5xx, makes the destination suspect: nothing more is sent until the cases in
flight have ended and a normal request has been tried. Served: the case alone failed, and the batch goes on.
Not served: the destination stopped answering after that case; the rest is not sent, and the case is named
(the seed's lesson: the input that wedged the replica is the finding).

Only the standard library, like cases.py.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from . import ABNORMAL_FAMILIES
from .abnormal import check
from .cases import HostileCase, send


@dataclass(slots=True)
class Destination:
    name: str  # r0, r1, gateway
    base_url: str  # scheme://host:port; the cases carry their own /v1/... paths
    headers: dict = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class CaseInfo:
    """What a judged case's row needs of it: not its request body (a prompt at the context limit, a naughty
    string), which a run that sends a batch every few seconds (a soak) would otherwise keep for every case."""
    name: str
    expect: tuple
    param: str | None
    code: str | None

    @classmethod
    def of(cls, case) -> CaseInfo:
        return cls(case.name, tuple(case.expect), case.param, getattr(case, "code", None))


@dataclass(slots=True)
class CaseResult:
    case: CaseInfo
    destination: str
    status: int | None
    error: dict  # the answer's error.param and error.code (empty for a 200: its completion is not kept)
    problem: str | None  # None: what a good server answers
    t_start: float
    took_s: float
    attempts: int | None = None  # x-gateway-attempts: how many upstream attempts a gateway made for it

    def row(self) -> dict:
        return {"case": self.case.name, "family": family_of(self.case.name), "destination": self.destination,
                "expected": list(self.case.expect), "param": self.case.param, "code": self.case.code,
                "observed": self.status, "observed_param": self.error.get("param"),
                "observed_code": self.error.get("code"), "took_s": round(self.took_s, 4),
                "attempts": self.attempts, "pass": self.problem is None, "problem": self.problem}


@dataclass(slots=True)
class BatchResult:
    destination: str
    results: list[CaseResult] = field(default_factory=list)
    not_sent: int = 0
    stopped_after: str | None = None  # the case after which the destination stopped answering
    interrupted: bool = False  # stopped from outside (the run ended) before every case was sent

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if r.problem is not None]

    def to_dict(self) -> dict:
        fams: dict[str, dict] = {}
        for r in self.results:
            f = fams.setdefault(family_of(r.case.name), {"cases": 0, "passed": 0})
            f["cases"] += 1
            f["passed"] += r.problem is None
        return {"destination": self.destination, "sent": len(self.results),
                "passed": len(self.results) - len(self.failed), "failed": len(self.failed),
                "not_sent": self.not_sent, "stopped_after": self.stopped_after, "interrupted": self.interrupted,
                "families": fams, "results": sorted((r.row() for r in self.results), key=lambda d: d["pass"])}


def family_of(name: str) -> str:
    """blns/12/chat -> blns; a malformed request of cases.py (named in words) -> hostile."""
    head = name.split("/", 1)[0]
    return head if head in ABNORMAL_FAMILIES else "hostile"


def _bad(status) -> bool:
    return status is None or status >= 500


def normal_request(dest: Destination, model: str, timeout: float) -> tuple[int | None, float, str]:
    """One small chat request a good server serves: (status, seconds, detail)."""
    body = {"model": model, "messages": [{"role": "user", "content": "are you still there?"}], "max_tokens": 4,
            "temperature": 0}
    req = urllib.request.Request(dest.base_url + "/v1/chat/completions", method="POST", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **dest.headers})
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, time.monotonic() - t0, ""
    except urllib.error.HTTPError as e:
        return e.code, time.monotonic() - t0, e.read(300).decode(errors="replace")
    except OSError as e:
        return None, time.monotonic() - t0, f"no answer: {getattr(e, 'reason', None) or e}"


def serves_again(dest: Destination, model: str, within_s: float, timeout: float, need: int = 3,
                 should_stop=lambda: False) -> tuple[bool, float | None, str]:
    """Does the destination serve `need` normal requests in a row, each within timeout, before within_s is over?
    (served, seconds until the first of them, what the last failure was)."""
    t0 = time.monotonic()
    streak, first, last = 0, None, ""
    while time.monotonic() - t0 < within_s and not should_stop():
        status, took, detail = normal_request(dest, model, min(timeout, max(0.5, within_s - (time.monotonic() - t0))))
        if status == 200:
            first = first if streak else time.monotonic() - t0 - took
            streak += 1
            if streak >= need:
                return True, first, ""
            continue
        streak, last = 0, f"{status or ''} {detail}".strip()[:200]
        time.sleep(0.25)
    return False, None, last or "no answer within the time"


def _culprits(suspects: list[CaseResult]) -> str:
    """The case the destination stopped answering after. With several workers, a case in flight beside the one
    that wedged the destination hangs with it, and which of them did it cannot be told from outside: every
    suspect that started before the first one ended is named, in the order they were sent ("a or b")."""
    first = min(suspects, key=lambda r: r.t_start)
    end = first.t_start + first.took_s
    together = sorted((r for r in suspects if r.t_start <= end), key=lambda r: r.t_start)
    return " or ".join(dict.fromkeys(r.case.name for r in together))


def send_batch(cases: list[HostileCase], dest: Destination, model: str, workers: int = 2, timeout: float = 10.0,
               should_stop=lambda: False, progress=lambda line: None) -> BatchResult:
    """Every case to dest, `workers` at a time, in order; each answer judged (abnormal.check)."""
    out = BatchResult(dest.name)
    suspects: list[CaseResult] = []

    def one(case):
        t0, m0 = time.time(), time.monotonic()
        status, headers, body = send(case, dest.base_url, timeout=timeout, headers=dest.headers)
        attempts = headers.get("x-gateway-attempts")
        err = body.get("error") if isinstance(body, dict) else None
        err = {k: err.get(k) for k in ("param", "code")} if isinstance(err, dict) else {}
        return CaseResult(CaseInfo.of(case), dest.name, status, err, check(case, status, body), t0,
                          time.monotonic() - m0, int(attempts) if attempts and attempts.isdigit() else None)

    todo = list(cases)
    running: set = set()
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix=f"abnormal-{dest.name}") as pool:
        while todo or running:
            while todo and len(running) < max(1, workers) and not suspects and not should_stop():
                running.add(pool.submit(one, todo.pop(0)))
            if not running:
                if should_stop():
                    out.interrupted = True
                    break
                # suspect and idle: is it the case, or the destination?
                status, _, _ = normal_request(dest, model, timeout)
                if status == 200:
                    suspects.clear()
                    continue
                out.stopped_after = _culprits(suspects)
                progress(f"{dest.name} stopped answering after case {out.stopped_after}; "
                         f"{len(todo)} cases not sent to it")
                break
            done, running = wait(running, timeout=1.0, return_when=FIRST_COMPLETED)
            for f in done:
                r = f.result()
                out.results.append(r)
                if _bad(r.status):
                    suspects.append(r)
    out.not_sent = len(todo)
    out.results.sort(key=lambda r: r.t_start)
    return out
