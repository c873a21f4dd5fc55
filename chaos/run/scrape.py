"""Server evidence: every instance's Prometheus /metrics, scraped through the run into RUN_DIR/metrics.jsonl.

A daemon thread GETs every instance's `metrics_url` (replicas, backups, the gateway: `/metrics` at the root of
its host, or the path its target file names) every `interval` seconds and appends one JSON line per instance per
scrape, flushed at once so a killed run keeps what it had:

    {"t": epoch, "instance": "r0", "ok": true, "values": {"running": 3.0, "kv_usage": 0.41, ...}}
    {"t": epoch, "instance": "r1", "ok": false, "values": {}, "error": "connection refused"}

`t` is the runner's clock (the records' and the journal's). A failed scrape is a line with ok false, never an
exception: a killed or paused replica is evidence. An instance that has never answered with Prometheus text
(a vendor: 404, HTML, JSON; nothing listening) is given up after GIVE_UP consecutive failures, timeouts not
counted (a busy server answers later): one last line carries
"unavailable": true and the reason, and it is scraped no more.

Keys (short and stable; a name list means the first that exists: older vLLM names after newer ones, then other
engines' names for the same thing: llama.cpp's server with --metrics, LiteLLM's proxy with its prometheus callback):

    key                         Prometheus sample(s)                         meaning
    running                     vllm:num_requests_running (sum),             requests in the running batch
                                llamacpp:requests_processing
    waiting                     vllm:num_requests_waiting (sum),             requests queued for a slot
                                llamacpp:requests_deferred
    kv_usage                    vllm:kv_cache_usage_perc,                    KV-cache blocks in use, 0-1 (max)
                                vllm:gpu_cache_usage_perc
    preemptions_total           vllm:num_preemptions_total                   sequences preempted for KV blocks
    prefix_cache_hits_total     vllm:prefix_cache_hits_total,                prompt tokens found in the prefix cache
                                vllm:gpu_prefix_cache_hits_total
    prefix_cache_queries_total  vllm:prefix_cache_queries_total,             prompt tokens looked up there
                                vllm:gpu_prefix_cache_queries_total
    prompt_tokens_total         vllm:prompt_tokens_total,                    prompt tokens computed
                                llamacpp:prompt_tokens_total
    generation_tokens_total     vllm:generation_tokens_total,                tokens generated
                                llamacpp:tokens_predicted_total
    requests_ok_total           vllm:request_success_total (sum of reasons)  requests finished
    http_errors_total           chaos:http_errors_total (sum)                error answers (reference server)
    gw_in_flight                gateway:in_flight,                           requests the gateway is serving
                                litellm_in_flight_requests
    gw_queue_depth              gateway:queue_depth                          requests waiting for a gateway slot
    gw_cache_entries            gateway:cache_entries                        answers kept for the cache fallback
    gw_served_total             gateway:served_total (sum of pools),         streams served (LiteLLM: requests
                                litellm_proxy_total_requests_metric_total    answered, failed ones included)
    gw_retries_total            gateway:retries_total                        retried attempts
    gw_retries_denied_total     gateway:retries_denied_total                 retries the retry budget refused
    gw_fallbacks_total          gateway:fallbacks_total (sum of paths)       requests served by backup or cache
    gw_rejected_total           gateway:rejected_total (sum of reasons)      refused by admission control
    gw_passed_up_total          gateway:passed_up_total (sum of reasons)     upstream errors passed to the client
    gw_midstream_failures_total gateway:midstream_failures_total             upstream failures after streaming began
    gw_upstreams_up             gateway:upstream_up (sum)                    replicas picked for traffic
    gw_ejected                  gateway:upstream_up{state="ejected"} (count) replicas ejected now
    gw_upstream_failures_total  litellm_deployment_failure_responses_total   failed calls to a replica (LiteLLM)
    gw_cooldowns_total          litellm_deployment_cooled_down_total         replicas cooled down (LiteLLM)
    up.<replica>                gateway:upstream_up{replica=...}             1 when that replica takes traffic
    breaker.<replica>           gateway:breaker_state{replica=...}           0 closed, 1 half-open, 2 open
    outstanding.<replica>       gateway:upstream_outstanding{replica=...}    requests in flight on that replica
    state.<model_id>            litellm_deployment_state{model_id=...}       0 healthy, 1 partial, 2 complete outage

Counters keep Prometheus' _total suffix, so a reader knows to take their rate. Every other numeric sample goes
in as `name{labels}`, at most EXTRA_CAP of them a line (in exposition order; histogram buckets and *_created
left out): a vendor may expose thousands of series, and a line a second must stay small.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from ..errors import Finding
from ..rundir.files import METRICS_FILE, PROMETHEUS_TARGETS
from ..rundir.journal import Event
from ..rundir.metrics import KEYS, PER_LABEL

MIN_INTERVAL = 0.1  # faster would load the servers and the runner for no better evidence
GIVE_UP = 3  # consecutive failures, never a success: this instance has no /metrics
EXTRA_CAP = 32
MAX_BODY = 8 << 20  # a /metrics larger than this is cut and counted as a failure
FINAL_TIMEOUT = 2.0  # the last scrape (kept whole as metrics-ID.txt) may take as long as save_metrics did

PER_LABEL_CAP = 64  # per-replica keys: bounded by the pool, and by this should a vendor reuse the names
_BY_NAME = {n: key for key, (names, _) in KEYS.items() for n in names}
_PER_LABEL_NAMES = {name for name, _ in PER_LABEL.values()}


class NotPrometheus(Finding, ValueError):
    pass


def parse(text: str) -> dict[str, float]:
    """The keys of one /metrics text (see the table above), then up to EXTRA_CAP other samples as name{labels}.
    Raises NotPrometheus when the text is not Prometheus exposition (or holds no sample)."""
    found: dict[str, dict[str, list[float]]] = {}  # key -> sample name -> values over label sets
    values: dict[str, float] = {}
    extras: dict[str, float] = {}
    per_label = ejected = samples = 0
    try:
        for family in text_string_to_metric_families(text):
            if not family.samples:  # a labelled counter declared before its first event (HELP/TYPE only): 0
                for name in (family.name, family.name + "_total"):
                    if name in _BY_NAME:
                        found.setdefault(_BY_NAME[name], {}).setdefault(name, [])
            for s in family.samples:
                samples += 1
                v = float(s.value)
                if not math.isfinite(v):
                    continue  # JSON has no NaN; a gauge with no value yet says nothing
                key = _BY_NAME.get(s.name)
                if key is not None:
                    found.setdefault(key, {}).setdefault(s.name, []).append(v)
                if s.name in _PER_LABEL_NAMES:
                    if s.name == "gateway:upstream_up" and s.labels.get("state") == "ejected":
                        ejected += 1
                    for prefix, (name, label) in PER_LABEL.items():
                        if name == s.name and label in s.labels and per_label < PER_LABEL_CAP:
                            values[prefix + s.labels[label]] = v
                            per_label += 1
                elif key is None and len(extras) < EXTRA_CAP and not s.name.endswith(("_bucket", "_created")):
                    extras[_series_name(s.name, s.labels)] = v
    except ValueError as e:
        raise NotPrometheus(f"not Prometheus text ({str(e)[:120]})") from None
    if not samples:
        raise NotPrometheus("not Prometheus text (no samples)")
    for key, by_name in found.items():
        names, how = KEYS[key]
        got = next(by_name[n] for n in names if n in by_name)  # the newest name the server exposes
        values[key] = max(got, default=0.0) if how == "max" else float(sum(got))
    if "gateway:upstream_up" in {n for by in found.values() for n in by}:
        values["gw_ejected"] = float(ejected)
    return {**values, **extras}


def _series_name(name: str, labels: dict) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass(slots=True)
class Fetched:
    ok: bool
    values: dict = field(default_factory=dict)
    error: str | None = None
    text: str | None = None
    timed_out: bool = False  # asked, no answer in time: a busy server, not one without metrics


def fetch(url: str, timeout: float, headers: dict | None = None) -> Fetched:
    """One GET of url, parsed. Never raises: a failure is Fetched(ok=False, error=why)."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            body = r.read(MAX_BODY + 1)
    except urllib.error.HTTPError as e:
        return Fetched(False, error=f"HTTP {e.code}")
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        return Fetched(False, error=str(reason)[:160] or type(reason).__name__,
                       timed_out=isinstance(reason, TimeoutError))
    if len(body) > MAX_BODY:
        return Fetched(False, error=f"/metrics larger than {MAX_BODY >> 20} MiB")
    text = body.decode(errors="replace")
    try:
        return Fetched(True, parse(text), text=text)
    except NotPrometheus as e:
        return Fetched(False, error=str(e))


@dataclass(slots=True)
class InstanceState:
    scraped: int = 0  # answered with Prometheus text
    failed: int = 0
    streak: int = 0  # consecutive failures that count towards giving up (timeouts do not)
    available: bool = True
    why: str | None = None  # when given up: the last failure


class Scraper:
    """Scrape `instances()` (called each time: a restart may move an instance) every `interval` seconds into
    run_dir/metrics.jsonl until stop() or max_duration, whichever comes first.

    The instances are scraped concurrently, each with `timeout` (at most 0.5 s): a paused replica (SIGSTOP: its
    socket accepts, nothing answers) costs its own scrape the timeout and holds no other back, so with several
    paused the loop still keeps its interval; sequential scrapes would add their timeouts up. An instance whose
    last scrape is still running is not asked again until it ends, so a hung one cannot pile up threads."""

    def __init__(self, instances, run_dir: str, clock=time.time, interval: float = 1.0,
                 max_duration: float = 3600.0, timeout: float = 0.5, scrub=None):
        self.instances = instances
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, METRICS_FILE)
        self.clock = clock
        self.interval = max(MIN_INTERVAL, float(interval))
        self.max_duration = max_duration
        self.timeout = min(0.5, timeout, self.interval)
        self.scrub = scrub or (lambda text: text)
        self.on_values = lambda t, instance, values: None  # each successful scrape (abort_when's metrics)
        self.states: dict[str, InstanceState] = {}
        self._busy: dict[str, object] = {}  # instance id -> its future still running
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the loop's lines and stop()'s final lines: one whole line at a time
        self._f = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._f = open(self.path, "a", buffering=1)
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="scrape")
        self._thread = threading.Thread(target=self._loop, name="metrics-scraper", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        began = time.monotonic()
        next_at = began
        try:
            while not self._stop.is_set() and time.monotonic() - began < self.max_duration:
                self.scrape_once()
                next_at += self.interval
                now = time.monotonic()
                if next_at < now:  # a slow tick: skip the missed ones instead of bursting to catch up
                    next_at = now + self.interval
                self._stop.wait(next_at - now)
        except Exception as e:  # noqa: BLE001 - a bug here must cost the evidence, never the run
            self._write({"t": round(self.clock(), 6), "instance": "*", "ok": False, "values": {},
                         "error": f"scraper stopped: {e!r}"})

    def scrape_once(self, timeout: float | None = None) -> dict[str, Fetched]:
        """One scrape of every available instance; writes its lines and returns what each got."""
        timeout = timeout or self.timeout
        t = round(self.clock(), 6)
        asked, results = {}, {}
        for inst in self.instances():
            st = self.states.setdefault(inst.id, InstanceState())
            if not st.available or inst.metrics_url is None:
                continue
            if inst.id in self._busy and not self._busy[inst.id].done():
                results[inst.id] = Fetched(False, error="still answering the previous scrape")
                continue
            asked[inst.id] = self._busy[inst.id] = self._pool.submit(fetch, inst.metrics_url, timeout,
                                                                     inst.metrics_headers())
        # urllib's timeout is per socket operation: a server trickling its answer could take longer, so wait
        # a bounded time and count whatever has not answered by then as a failure of this scrape.
        done, _ = wait(list(asked.values()), timeout=2 * timeout + 0.5)
        for iid, fut in asked.items():
            results[iid] = fut.result() if fut in done else Fetched(False, error=f"no answer within {timeout:g}s",
                                                                    timed_out=True)
        for iid, got in results.items():
            self._record(t, iid, got)
        return results

    def _record(self, t: float, iid: str, got: Fetched) -> None:
        st = self.states[iid]
        line = {"t": t, "instance": iid, "ok": got.ok, "values": got.values}
        if got.ok:
            st.scraped, st.streak = st.scraped + 1, 0
            self.on_values(t, iid, got.values)
        else:
            # a timeout is a busy server (LiteLLM's one worker under load timed out its first three scrapes),
            # not one without metrics: it does not count towards giving up
            st.failed, st.streak = st.failed + 1, st.streak + (not got.timed_out)
            line["error"] = got.error
            if st.streak >= GIVE_UP and st.scraped == 0:
                st.available, st.why = False, f"no Prometheus /metrics: {got.error} ({st.streak} tries)"
                line.update(unavailable=True, error=st.why)
        self._write(line)

    def _write(self, line: dict) -> None:
        with self._lock:
            if self._f is not None and not self._f.closed:
                self._f.write(json.dumps(line) + "\n")  # line-buffered: on disk as soon as written

    def stop(self, final: bool = False) -> list[str]:
        """Stop the loop (idempotent); with final, scrape once more (a longer timeout) and keep each answer
        whole as metrics-ID.txt, as the run has always done. Returns the ids whose text was kept."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2 * self.timeout + 2.0)
        kept = []
        if final and self._pool is not None and self._f is not None and not self._f.closed:
            for iid, got in self.scrape_once(FINAL_TIMEOUT).items():
                if got.ok:
                    with open(os.path.join(self.run_dir, f"metrics-{iid}.txt"), "w") as f:
                        f.write(self.scrub(got.text))
                    kept.append(iid)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)  # a hung fetch ends with its own timeout
        with self._lock:
            if self._f is not None:
                self._f.close()
        return kept

    def unavailable(self) -> dict[str, str]:
        return {iid: st.why for iid, st in self.states.items() if not st.available}


def write_prometheus_targets(instances, run_dir: str, run_name: str) -> str:
    """RUN_DIR/prometheus-targets.json: the run's instances in Prometheus' file_sd format, so your own Prometheus
    (file_sd_configs: [{files: [.../prometheus-targets.json]}]) scrapes what the run started, each labelled with
    its id; an abort_when query can then ask about them."""
    groups = []
    for inst in instances:
        url = getattr(inst, "metrics_url", None)
        if url is None:
            continue
        u = urllib.parse.urlparse(url)
        groups.append({"targets": [u.netloc], "labels": {"chaos_instance": inst.id, "chaos_run": run_name,
                                                         "__metrics_path__": u.path or "/metrics",
                                                         "__scheme__": u.scheme}})
    path = os.path.join(run_dir, PROMETHEUS_TARGETS)
    with open(path + ".tmp", "w") as f:
        json.dump(groups, f, indent=1)
    os.replace(path + ".tmp", path)  # Prometheus watches the file: never a half-written one
    return path


def start_for_run(run, load_duration: float, allowance: float) -> Scraper | None:
    """The runner's scraper, started once the target is up and before the load (None when the experiment turns
    scraping off). Bounded by itself: the load, a restart's allowance and five minutes of rollback, should
    the run never come to stop it."""
    write_prometheus_targets(run.target.all_instances(), run.run_dir, run.exp.name)
    interval = getattr(run.exp, "metrics_interval", 1.0)
    if not interval:
        run.notes.append("server metrics not scraped (metrics: {interval: off}); metrics-ID.txt kept at the end")
        return None
    scraper = Scraper(run.target.all_instances, run.run_dir, clock=run.now, interval=interval,
                      max_duration=load_duration + allowance + 300.0, scrub=run.public)
    run.journal.write(Event.METRICS_SCRAPING, interval=scraper.interval, file=METRICS_FILE,
                      instances=[{"id": i.id, "url": i.url, "metrics": i.metrics_url}
                                 for i in run.target.all_instances()])
    scraper.start()
    return scraper
