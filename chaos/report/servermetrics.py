"""report.json's "server_metrics" and its Markdown section, from the scraper's metrics.jsonl (chaos/run/scrape.py
writes it and holds the key table).

The file is read twice, streaming, so a long run costs no more memory than the points kept: the first pass
counts each instance's scrapes, the second keeps every k-th point, so that no series holds more than about
MAX_POINTS. Counters (keys ending _total) also get a per-second rate series, key + "_rate"; a rate point is
the counter's increase over its span of scrapes divided by that span, a restart's reset to zero counted as
the new value (what the restarted server did since it came up), so thinning the series never loses a burst.
Only the table's keys make series; the extra name{labels} samples stay in the file.
"""

from __future__ import annotations

import json
import math
import os
import statistics

from ..rundir.files import METRICS_FILE
from ..rundir.metrics import named

MAX_POINTS = 2000

# counter key -> how the Markdown says its increase ("r0: 12 preemptions, 340 prefix-cache hits")
COUNTER_WORDS = {
    "preemptions_total": "preemptions", "prefix_cache_hits_total": "prefix-cache hits",
    "prefix_cache_queries_total": "prefix-cache queries", "requests_ok_total": "requests finished",
    "http_errors_total": "error answers", "prompt_tokens_total": "prompt tokens",
    "generation_tokens_total": "tokens generated", "gw_served_total": "streams served",
    "gw_retries_total": "retries", "gw_retries_denied_total": "retries denied", "gw_fallbacks_total": "fallbacks",
    "gw_rejected_total": "rejected", "gw_passed_up_total": "errors passed up",
    "gw_midstream_failures_total": "midstream failures", "gw_upstream_failures_total": "failed calls to replicas",
    "gw_cooldowns_total": "cooldowns",
}


def _lines(path: str):
    with open(path) as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the last line of a killed run may be cut
            if isinstance(rec, dict) and isinstance(rec.get("instance"), str) and isinstance(rec.get("t"),
                                                                                             (int, float)):
                yield rec


class _Series:
    """One key of one instance: every k-th point, the last one always; for a counter, its rate too."""

    __slots__ = ("k", "counter", "points", "rates", "last", "n", "prev", "inc", "span", "pairs", "moved")

    def __init__(self, k: int, counter: bool):
        self.k, self.counter = k, counter
        self.points: list[list[float]] = []
        self.rates: list[list[float]] = []
        self.last = None
        self.n = self.pairs = 0
        self.prev = None  # the previous point, for the rate
        self.inc = self.span = self.moved = 0.0

    def add(self, t: float, v: float) -> None:
        point = [round(t, 3), round(v, 6)]
        if self.n % self.k == 0:
            self.points.append(point)
        self.last, self.n = point, self.n + 1
        if self.counter:
            if self.prev is not None and t > self.prev[0]:
                step = v - self.prev[1] if v >= self.prev[1] else v  # below: the server restarted from zero
                self.inc, self.span, self.pairs = self.inc + step, self.span + (t - self.prev[0]), self.pairs + 1
                self.moved += step
                if self.pairs % self.k == 0:
                    self._rate(t)
            self.prev = (t, v)

    def _rate(self, t: float) -> None:
        self.rates.append([round(t, 3), round(self.inc / self.span, 6)])
        self.inc = self.span = 0.0

    def finish(self) -> None:
        if self.last is not None and (not self.points or self.points[-1] is not self.last):
            self.points.append(self.last)
        if self.span > 0:
            self._rate(self.prev[0])


def summarize_metrics(path: str, interval_s: float | None = None) -> dict | None:
    """The "server_metrics" object of report.json; None when there is no file (scraping off, or the run ended
    before it began). interval_s: as scraped (None: the median spacing of the scrapes)."""
    if not os.path.exists(path):
        return None
    instances: dict[str, dict] = {}
    for rec in _lines(path):  # pass 1: counts, to choose each instance's k
        if rec["instance"] == "*":
            continue
        st = instances.setdefault(rec["instance"], {"scraped": 0, "failed": 0, "available": True, "why": None})
        if rec.get("ok"):
            st["scraped"] += 1
        else:
            st["failed"] += 1
        if rec.get("unavailable"):
            st["available"], st["why"] = False, rec.get("error")
    series: dict[str, dict[str, _Series]] = {}
    times: dict[str, list[float]] = {}
    last_ok: dict[str, float] = {}  # instance -> t of its previous ok scrape
    for rec in _lines(path):  # pass 2: the points kept
        iid = rec["instance"]
        if not rec.get("ok") or iid not in instances or not isinstance(rec.get("values"), dict):
            continue
        k = max(1, math.ceil(instances[iid]["scraped"] / MAX_POINTS))
        if len(times.setdefault(iid, [])) < 50:
            times[iid].append(rec["t"])
        for key, v in rec["values"].items():
            if named(key) and isinstance(v, (int, float)) and math.isfinite(v):
                s = series.setdefault(key, {}).get(iid)
                if s is None:
                    s = series[key][iid] = _Series(k, key.endswith("_total"))
                    if s.counter and iid in last_ok:  # a counter that appears late was 0 until then
                        s.prev = (last_ok[iid], 0.0)
                s.add(rec["t"], float(v))
        last_ok[iid] = rec["t"]
    out: dict[str, dict] = {}
    for key in sorted(series):
        for iid, s in series[key].items():
            s.finish()
            out.setdefault(key, {})[iid] = s.points
            if s.counter:
                out.setdefault(key + "_rate", {})[iid] = s.rates
                if s.moved:
                    instances[iid].setdefault("moved", {})[key] = round(s.moved, 6)
    if interval_s is None:
        gaps = [b - a for ts in times.values() for a, b in zip(ts, ts[1:]) if b > a]
        interval_s = round(statistics.median(gaps), 3) if gaps else None
    return {"file": os.path.basename(path) or METRICS_FILE, "interval_s": interval_s, "instances": instances,
            "series": dict(sorted(out.items()))}


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e12:
        return f"{int(v)}"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def counter_lines(summary: dict) -> list[str]:
    """One line per instance whose counters moved: "r0: 12 preemptions, 340 prefix-cache hits"."""
    out = []
    for iid, st in (summary.get("instances") or {}).items():
        moved = st.get("moved") or {}
        words = [f"{_fmt(moved[k])} {w}" for k, w in COUNTER_WORDS.items() if moved.get(k)]
        if words:
            out.append(f"{iid}: " + ", ".join(words))
    return out


def markdown_section(summary: dict | None, t0: float | None) -> list[str]:
    """## Server metrics: who was scraped, then per instance a table of each key (gauges as scraped, counters as
    their rate per second): min / median / max (and when, from t0) / at the end; keys that stayed 0 in one line;
    then what the counters did over the run."""
    lines = ["## Server metrics", ""]
    if not summary:
        return lines + ["Not scraped (metrics interval off, or the run ended before the load).", ""]
    inst = summary.get("instances") or {}
    every = f"every {summary['interval_s']:g}s " if summary.get("interval_s") else ""
    told = []
    for iid, st in inst.items():
        if st.get("available", True):
            told.append(f"{iid} {st['scraped']} scrapes" + (f" ({st['failed']} failed)" if st["failed"] else ""))
        else:
            told.append(f"{iid} unavailable: {st.get('why')}")
    lines += [f"/metrics scraped {every}into `{summary.get('file')}`: " + "; ".join(told) + ".", ""]
    series = summary.get("series") or {}
    for iid in inst:
        rows, zero = [], []
        for key, by in series.items():
            pts = by.get(iid)
            if not pts or (key.endswith("_total") and key + "_rate" in series):
                continue  # a counter is shown by its rate; its total by the counter lines below
            vals = [p[1] for p in pts]
            if not any(vals):
                zero.append(key)
                continue
            top = max(pts, key=lambda p: p[1])
            at = f"{round(top[0] - t0, 1) + 0.0:+.1f}s" if t0 is not None else ""  # + 0.0: never "-0.0s"
            rows.append(f"| {key}{' (per s)' if key.endswith('_rate') else ''} | {_fmt(min(vals))} | "
                        f"{_fmt(statistics.median(vals))} | {_fmt(top[1])} | {at} | {_fmt(vals[-1])} |")
        if not rows and not zero:
            continue
        lines += [f"### {iid}", ""]
        if rows:
            lines += ["| metric | min | median | max | max at | end |", "|---|---|---|---|---|---|", *rows, ""]
        if zero:
            lines += [f"Always 0: {', '.join(zero)}.", ""]
    moved = counter_lines(summary)
    if moved:
        lines += ["Over the run:", "", *[f"- {m}" for m in moved], ""]
    return lines
