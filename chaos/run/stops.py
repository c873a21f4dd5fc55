"""Stop conditions on the stack's own monitoring, beside abort_when's error rate: a scraped metric of an instance,
or a PromQL query against a Prometheus server (AWS FIS stops an experiment on a CloudWatch alarm, Gremlin on a
failed health check; here, on what the user's own dashboards already watch).

    abort_when:
      for: 10s
      metrics:
        - {instance: gw, key: gw_cooldowns_total, above: 3}     # a key of chaos/run/scrape.py, or name{labels}
        - {key: waiting, above: 50}                            # instance: any (the default)
      prometheus:
        url: http://127.0.0.1:9090
        query: sum(rate(litellm_deployment_failure_responses_total[30s])) > 2

A condition stops the run when it has held at every observation for the whole window (`for`), like a Prometheus
alert's `for:`. A metric holds when the scraped value is above the bound; a query holds when it returns any sample
(alerting semantics: write the comparison into the query). A scrape that fails and a query that cannot be asked
are not observations: they neither hold nor break a condition (one not seen holding for STALE_S no longer fires);
the first failure of the query is said once.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

from ..common import parse_duration
from ..rundir.journal import Event

QUERY_EVERY_S = 2.0
QUERY_TIMEOUT_S = 2.0


@dataclass(slots=True)
class MetricStop:
    key: str
    above: float
    instance: str = "any"

    def describe(self) -> str:
        return f"{self.key} of {self.instance} above {self.above:g}"


@dataclass(slots=True)
class PromStop:
    url: str
    query: str
    every: float = QUERY_EVERY_S

    def describe(self) -> str:
        return f"Prometheus query {self.query!r}"


STALE_S = 5.0  # a condition last seen holding longer ago than this (its instance no longer answers) does not fire


@dataclass(slots=True)
class Held:
    """Since when a condition has held without a break (None: it does not hold now), when it was last seen
    holding, and what was seen."""

    since: float | None = None
    last: float | None = None
    seen: str = ""


def ask_prometheus(url: str, query: str, timeout: float = QUERY_TIMEOUT_S) -> list[dict]:
    """The query's result vector (instant query, now). Raises OSError or ValueError saying why it failed."""
    full = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(full, timeout=timeout) as r:
            doc = json.loads(r.read(4 << 20))
    except urllib.error.HTTPError as e:
        body = e.read(2000).decode(errors="replace")
        try:
            body = json.loads(body).get("error", body)
        except ValueError:
            pass
        raise ValueError(f"HTTP {e.code}: {body}") from None
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise ValueError(f"not a Prometheus answer: {str(doc)[:200]}")
    result = doc.get("data", {}).get("result")
    if isinstance(result, list):
        return result
    return [] if result is None else [{"value": result}]  # a scalar or string answer: present


@dataclass
class Stops:
    metrics: list[MetricStop]
    prometheus: PromStop | None
    span: float
    clock: object = time.time
    held: dict = field(default_factory=dict)  # condition description -> Held
    problems: list[str] = field(default_factory=list)  # said once each (the journal's notes)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return bool(self.metrics) or self.prometheus is not None

    def observe(self, name: str, holds: bool, seen: str, t: float) -> None:
        with self._lock:
            h = self.held.setdefault(name, Held())
            if holds:
                h.since = h.since if h.since is not None else t
                h.last, h.seen = t, seen
            else:
                h.since, h.last, h.seen = None, None, ""

    def feed_scrape(self, t: float, instance: str, values: dict) -> None:
        """One instance's successful scrape (the scraper calls this from its thread)."""
        for m in self.metrics:
            if m.instance not in ("any", instance):
                continue
            v = values.get(m.key)
            if not isinstance(v, (int, float)):
                continue
            name = m.describe() if m.instance != "any" else f"{m.key} of {instance} above {m.above:g}"
            self.observe(name, v > m.above, f"{m.key} of {instance} = {v:g}", t)

    def start(self) -> None:
        if self.prometheus is None:
            return
        self._thread = threading.Thread(target=self._poll, name="abort-prometheus", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        p, said = self.prometheus, False
        while not self._stop.is_set():
            try:
                result = ask_prometheus(p.url, p.query)
                summary = ", ".join(_sample_text(s) for s in result[:3]) + (" ..." if len(result) > 3 else "")
                self.observe(p.describe(), bool(result), f"it returned {summary}", self.clock())
            except (OSError, ValueError) as e:
                if not said:
                    said = True
                    with self._lock:
                        self.problems.append(f"abort_when: could not ask {p.url}: {e}")
            self._stop.wait(p.every)

    def check(self, now: float) -> str | None:
        """The reason to stop, once a condition has held for the whole window."""
        with self._lock:
            for name, h in self.held.items():
                if h.since is not None and now - h.since >= self.span and now - h.last <= STALE_S:
                    return f"{name} held for {now - h.since:.1f}s (abort_when for {self.span:g}s): {h.seen}"
        return None


def _sample_text(s: dict) -> str:
    metric = s.get("metric") or {}
    name = metric.get("__name__", "")
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    value = s.get("value")
    v = value[1] if isinstance(value, list) and len(value) == 2 else value
    return f"{name}{{{labels}}} {v}" if (name or labels) else f"{v}"


def from_experiment(abort: dict, span: float, clock=time.time) -> Stops:
    metrics = [MetricStop(m["key"], float(m["above"]), m.get("instance", "any")) for m in abort.get("metrics") or []]
    p = abort.get("prometheus")
    prom = PromStop(p["url"].rstrip("/"), p["query"], parse_duration(p.get("every", QUERY_EVERY_S))) if p else None
    return Stops(metrics, prom, span, clock)


def preflight_stops(exp) -> None:
    """Before anything starts: a Prometheus that cannot be asked (down, or the query does not parse) is the user's
    error, said at once with exit 2, not discovered when the run should have stopped."""
    p = (exp.abort_stops or {}).get("prometheus")
    if not p:
        return
    from ..targets import TargetError

    try:
        ask_prometheus(p["url"], p["query"])
    except (OSError, ValueError) as e:
        raise TargetError(f"abort_when: cannot ask Prometheus at {p['url']}: {e}; start it, or fix the query (it "
                          f"is asked before the run starts, then every few seconds)") from None


def start_stops(run, scraper) -> Stops | None:
    """The run's stop conditions beyond the error rate, watching from before the load (None when it has none)."""
    if not run.exp.abort_stops:
        return None
    from ..targets import TargetError

    stops = from_experiment(run.exp.abort_stops, run.exp.abort_for, clock=run.now)
    if stops.metrics and scraper is None:
        raise TargetError("abort_when: metrics needs the scraper: remove metrics: {interval: off}")
    if scraper is not None:
        scraper.on_values = stops.feed_scrape
    run.journal.write(Event.STOP_CONDITIONS, conditions=[m.describe() for m in stops.metrics]
                      + ([stops.prometheus.describe()] if stops.prometheus else []), window_s=stops.span)
    stops.start()
    return stops
