"""Input faults: a batch of abnormal requests, each with the answer a good service gives, sent to every replica
directly and through the gateway while the load runs.

The batch is the seed's abnormal-input test: BLNS strings, special characters, repeated content, prompts at the
context limit, empty input, prompt injection (chaos.selftest.abnormal) and malformed requests (invalid JSON,
truncated and huge bodies, wrong types: chaos.selftest.cases). It runs in its own thread so the schedule, the
live checks and abort_when go on; the fault lasts until the batch and the check after it are done.

After the batch every destination must serve normal requests again within `serve_within`. One that does not
is restarted at the fault's revert, and asked again: served then, it "needed a restart", the failure the
seed's replicas showed, named with the case after which it stopped answering.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ..schemabits import duration, integer
from ..selftest import ABNORMAL_FAMILIES
from .base import Fault, FaultContext
from .params import Params, setting

FAMILIES = (*ABNORMAL_FAMILIES, "hostile")  # the generated families, and cases.py's malformed requests


def _get_json(url: str, headers: dict, timeout: float = 10.0):
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as r:
        return json.loads(r.read())


@dataclass(slots=True, frozen=True, kw_only=True)
class InputParams(Params):
    cases: list[str] | None = setting({"type": "array", "minItems": 1, "uniqueItems": True,
                                       "items": {"enum": list(FAMILIES)},
                                       "description": "case families to send (default: all)"}, None)
    via: list[str] | None = setting({"type": "array", "minItems": 1, "uniqueItems": True,
                                     "items": {"enum": ["replicas", "gateway"]},
                                     "description": "send to each replica directly, through the gateway, or both "
                                                    "(default both; without a gateway: the replicas)"}, None)
    seed: int = setting(integer(0, 2**63 - 1), 0)
    workers: int = setting(integer(1, 16), 2)
    timeout: float = setting(duration(positive=True, maximum=600), 10.0)
    serve_within: float = setting(duration(positive=True, maximum=3600), 10.0)
    restart: bool = setting({"type": "boolean", "description": "restart a replica that does not serve after the "
                                                               "batch (default true), to prove it needed a restart"},
                            True)
    max_model_len: int | None = setting(integer(64, 10_000_000), None)  # when /v1/models gives none


class AbnormalInputs(Fault):
    type = "abnormal_inputs"
    family = "input"
    summary = "send every abnormal case (BLNS, special chars, context limit, malformed bodies...) to the replicas " \
              "and through the gateway; each answer judged, then normal service checked"
    slow_revert = True  # a replica that needs a restart is restarted at revert, beside the schedule
    Params = InputParams
    schema = InputParams.schema("every abnormal input with its expected answer, to each replica and through the "
                                "gateway; then normal service is checked")

    def __init__(self, spec, target):
        super().__init__(spec, target)
        p = spec.params
        self.families = list(p.cases or FAMILIES)
        self.via = list(p.via or ("replicas", "gateway"))
        self.seed, self.workers, self.restart = p.seed, p.workers, p.restart
        self.timeout, self.serve_within = p.timeout, p.serve_within
        self.destinations: list = []
        self.batches: dict[str, object] = {}  # destination -> BatchResult
        self.serving: dict[str, dict] = {}  # destination -> {served, after_s, detail}
        self.restarted: dict[str, dict] = {}  # replica id -> {served, detail} after its restart
        self.gateway_view: dict = {}  # retries and ejections the batch caused at the gateway
        self.cases_total = 0
        self.model: str | None = None  # from the first destination's /v1/models
        self.error: str | None = None  # the batch could not run at all
        self.done = threading.Event()
        self.complete = False  # the batch and the check after it ran to their end
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        problems = []
        if fault.get("via") == ["gateway"] and target.gateway is None:
            problems.append((("via",), "via: [gateway] needs a target with a gateway; this one has none (send to "
                                       "the replicas: via: [replicas])"))
        if target.kind == "openai" and not target.base_url.startswith("http://"):
            problems.append((("type",), "abnormal_inputs sends raw HTTP/1.1 (bodies no client library would send) "
                                        "and needs an http:// target; this base_url is https"))
        return problems

    # -- where the cases go -------------------------------------------------------------------------------------
    def _headers(self) -> dict:
        h = getattr(self.target, "_headers", None)
        return h() if callable(h) else {}

    def plan(self, ctx: FaultContext) -> dict:
        from ..selftest.batch import Destination

        base = lambda url: re.sub(r"/v1/?$", "", url)
        gw = getattr(self.target, "gateway", None)
        dests = []
        if "replicas" in self.via or gw is None:
            dests += [Destination(i.id, base(i.url)) for i in self.target.instances]
        if "gateway" in self.via and gw is not None:
            dests.append(Destination("gateway", base(self.target.urls[0])))
        self.destinations = dests
        self.victims = []
        return {"destinations": {d.name: d.base_url for d in dests}, "cases": self.families, "seed": self.seed}

    # -- the batch ------------------------------------------------------------------------------------------------
    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        self._t0 = time.monotonic()
        for d in self.destinations:
            d.headers = self._headers()  # the key only in memory, never in the plan that is journaled
        self._thread = threading.Thread(target=self._run, args=(ctx,), name=f"abnormal-{self.spec.name}",
                                        daemon=True)
        self._thread.start()

    def _cases(self, card: dict) -> list:
        from ..selftest.abnormal import abnormal_cases
        from ..selftest.batch import family_of
        from ..selftest.cases import hostile_cases

        model, ctx_len = card["id"], int(card.get("max_model_len") or self.spec.params.max_model_len or 0)
        if not ctx_len:
            raise ValueError(f"{model}: /v1/models gives no max_model_len; set max_model_len on the fault")
        cases = [c for c in abnormal_cases(self.seed, model, ctx_len) if family_of(c.name) in self.families]
        if "hostile" in self.families:
            cases += hostile_cases(model, ctx_len)
        return cases

    def _run(self, ctx: FaultContext) -> None:
        from ..selftest.batch import send_batch, serves_again

        stop = lambda: self._stop.is_set() or ctx.should_stop()
        try:
            first = self.destinations[0]
            card = _get_json(first.base_url + "/v1/models", first.headers)["data"][0]
            self.model = card["id"]
            cases = self._cases(card)
            self.cases_total = len(cases)
            watch = _gateway_watch(self.target) if any(d.name == "gateway" for d in self.destinations) else None
            # The replicas together, then the gateway: the gateway's copies of the huge bodies would otherwise meet
            # the direct ones at the same replica, which rightly answers 503 server_busy, and the gateway rightly
            # retries: the batch's own overload, not what the target does with one client's bad input.
            phases = [[d for d in self.destinations if d.name != "gateway"],
                      [d for d in self.destinations if d.name == "gateway"]]
            for phase in (p for p in phases if p):
                with ThreadPoolExecutor(max_workers=len(phase)) as pool:
                    got = pool.map(lambda d: send_batch(cases, d, self.model, self.workers, self.timeout, stop,
                                                        ctx.log), phase)
                    self.batches.update({b.destination: b for b in got})
            if watch:
                self.gateway_view = watch()
            for d in self.destinations:
                if stop():
                    break
                ok, after, detail = serves_again(d, self.model, self.serve_within, self.timeout, should_stop=stop)
                self.serving[d.name] = {"served": ok, "after_s": after, "detail": detail}
            self.complete = not stop() and all(not b.interrupted for b in self.batches.values())
        except Exception as e:  # noqa: BLE001 - a batch that cannot run is reported, never a crash of the run
            self.error = f"{type(e).__name__}: {e}"
            ctx.log(f"{self.spec.name}: the abnormal batch could not run: {self.error}")
        finally:
            if not self._stop.is_set():
                self.revert_at = self.spec.at + (time.monotonic() - self._t0)  # the runner reverts it now
            self.done.set()

    def halt(self) -> None:
        """The run is ending: stop sending and wait for the batch thread (bounded)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    # -- after ----------------------------------------------------------------------------------------------------
    def broken(self) -> list:
        """Replicas that did not serve normal requests after the batch."""
        return [i for i in self.target.instances if self.serving.get(i.id, {}).get("served") is False]

    def revert(self, ctx: FaultContext) -> None:
        from ..selftest.batch import Destination, serves_again

        already, self.reverted = self.reverted, True
        if already or not self.applied:
            return
        self.halt()
        broken = self.broken() if self.restart else []
        if not broken or not getattr(self.target, "starts_processes", False):
            return
        self.victims = broken  # so served_by_all judges them from their restart on
        self.target.restart_instances(broken, ctx.should_stop)
        for inst in broken:
            ok, after, detail = serves_again(Destination(inst.id, inst.url, self._headers()), self.model,
                                             self.serve_within, self.timeout, should_stop=ctx.should_stop)
            self.restarted[inst.id] = {"served": ok, "after_s": after, "detail": detail}

    def describe(self) -> str:
        where = ", ".join(d.name for d in self.destinations) or "the target"
        n = f"{self.cases_total} " if self.cases_total else ""
        return f"{n}abnormal cases ({', '.join(self.families)}) to {where} at {self.spec.at:g}s"

    def results(self) -> dict:
        """What the report shows: per destination every case with expected, observed and pass/fail."""
        return {"fault": self.spec.name, "cases": self.cases_total, "families": self.families,
                "serve_within_s": self.serve_within,
                "error": self.error, "finished": self.complete,
                "destinations": {k: b.to_dict() for k, b in self.batches.items()},
                "serving_after": self.serving, "restarted": self.restarted, "gateway": self.gateway_view}


def _gateway_watch(target):
    """Start watching the gateway's own view while the batch runs (hostile.Watcher: the replicas it takes out of
    rotation) and note its retries counter; returns the call that stops the watch and says what it saw. A client's
    bad input must cause neither a retry storm nor healthy replicas ejected."""
    from ..selftest.hostile import Watcher, read_metric

    url = target.gateway.url
    retries0 = read_metric(url, "gateway:retries_total")
    watcher = Watcher({}, url)
    watcher.start()

    def finish() -> dict:
        watcher.stop_event.set()
        watcher.join(10)
        r1 = read_metric(url, "gateway:retries_total")
        retries = None if r1 is None or retries0 is None else r1 - retries0
        return {"retries": retries, "out_of_rotation": dict(watcher.out_of_rotation)}

    return finish
