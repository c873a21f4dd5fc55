"""report.html: a run for people, with interactive figures, in one self-contained file (see docs/reports.md).

In order: the header and verdict, the checks, latency over time with the fault windows shaded and the journal's
events marked, throughput and errors over time, the TTFT distribution, latency per step, the phases / recovery /
stability / diagnosis sections when the report has them, the server's metrics, then notes, faults and the
timeline. Every section tolerates its part of the report missing; a run without requests says so instead of
drawing empty plots. The page for two runs compared is chaos.report.comparehtml's (also importable from here).
"""

from __future__ import annotations

import os
import re
import time

import numpy as np

from ..host import HostSummary
from ..records.columns import Columns
from ..rundir.metrics import KEYS
from . import plots
from . import series as binned
from ..rundir.files import METRICS_FILE, REPORT_HTML, REQUESTS
from .comparehtml import comparison_html  # noqa: F401 - the comparison page shares this page's shell
from .timeline import event_detail
from .page import Page, badge, cell, esc
from .servermetrics import summarize_metrics
from .tables import advice_section, diagnosis_section, fmt_s, phases_section, recovery_section, stability_section
from ..rundir.journal import Event

KEY_ORDER = list(KEYS)
MAX_METRIC_PANELS = 24
# Journal events left off the latency figure: set-up and tear-down around the load, and the halves of a pair
# whose other half is drawn (a fault's window is shaded from applied to reverted; fault_applying is a few ms
# before fault_applied). A process started as a restart is kept: it is part of what a fault did.
NOISY_EVENTS = {"run_started", "target_starting", "target_started", "process_started", "links", "links_creating",
                "links_created", "links_up", "links_removed", "metrics_scraping", "host_sampling", "target_stopped",
                "run_finished", "fault_applying", "load_started"}


def _rel(t, t0) -> str:
    return "" if t is None or t0 is None else f"{t - t0:+.1f}s"


def _t0(report: dict) -> float | None:
    return report.get("load_started") or report.get("started")


def header(page: Page, r: dict) -> None:
    exp = r.get("experiment") or {}
    name = exp.get("name") or "experiment"
    page.add(f"<h1>{esc(name)} {badge(r.get('verdict'))}</h1>")
    if exp.get("description"):
        page.add(f'<p class="desc">{esc(str(exp["description"]).strip())}</p>')
    if r.get("reason"):
        colour = {"passed": "#1a7f37"}.get(r.get("verdict"), "#cf222e")
        page.add(f'<p class="reason" style="border-color:{colour}">{esc(r["reason"])}</p>')
    target = r.get("target") or {}
    started = r.get("started")
    facts = [("target", " ".join(str(x) for x in (target.get("kind"), target.get("name")) if x) or "-"),
             ("model", target.get("model") or "-"), ("instances", len(target.get("instances") or [])),
             ("started", time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "-"),
             ("duration", fmt_s(r.get("duration_s"))), ("exit code", r.get("exit_code", "-")),
             ("requests", r.get("requests", "-"))]
    page.add('<p class="meta">' + " &middot; ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts) + "</p>")


def checks_table(page: Page, r: dict) -> None:
    page.h2("Checks", "checks")
    rows = []
    for c in r.get("checks") or []:
        status = c.get("status") or {True: "passed", False: "failed", None: "not_judged"}.get(c.get("passed"))
        text, cls = {"passed": ("pass", "pass"), "not_judged": ("not judged", "skip")}.get(status, ("FAIL", "fail"))
        rows.append([cell(c.get("name")), cell(text, cls), cell(c.get("measured")), cell(c.get("threshold")),
                     cell(c.get("detail"))])
    if not rows:
        rows = [[cell("(none ran)"), cell(""), cell(""), cell(""), cell(r.get("reason") or "")]]
    page.table(["check", "result", "measured", "required", "detail"], rows, raw=True)


def _windows(r: dict, t0: float, end_x: float) -> list[plots.Window]:
    out = []
    for f in r.get("faults") or []:
        if f.get("applied_at") is None:
            continue
        open_ended = f.get("reverted_at") is None
        out.append(plots.Window(f.get("name") or f.get("type") or "fault", f["applied_at"] - t0,
                                end_x if open_ended else f["reverted_at"] - t0, open_ended))
    return out


def _events(r: dict, t0: float, lo: float, hi: float) -> list[plots.Event]:
    out = []
    for e in r.get("timeline") or []:
        name, t = e.get("event"), e.get("t")
        if t is None or (name in NOISY_EVENTS and not (name == "process_started" and e.get("restart"))):
            continue
        x = t - t0
        if lo <= x <= hi:
            label = f"restart {(e.get('instance') or {}).get('id', '')}".strip() if name == "process_started" \
                else name
            out.append(plots.Event(x, label, esc(event_detail(e))))
    return out


def _load_end(r: dict) -> float | None:
    return next((e["t"] for e in r.get("timeline") or [] if e.get("event") == Event.LOAD_STOPPED and e.get("t")), None)


def time_sections(page: Page, r: dict, records: list) -> None:
    """Latency and throughput over time, and the TTFT distribution."""
    page.h2("Latency over time", "latency")
    if not records:
        page.note("No requests were recorded in this run: there is nothing to plot over time.")
        return
    t0 = _t0(r)
    open_loop = any(s.get("open_loop") for s in r.get("steps") or [])
    cols = binned.columns(records, t0, open_loop)
    end = _load_end(r)
    bins = binned.bins_for(cols, None if end is None else end - cols.t0)
    windows = _windows(r, cols.t0, float(bins.edges[-1]))
    events = _events(r, cols.t0, float(bins.edges[0]) - 1, float(bins.edges[-1]) + 5)
    page.figure(plots.latency_timeline(cols, bins, windows, events))
    page.add('<p class="small">Shaded: fault windows (applied to reverted). Triangles: journal events (hover for '
             'detail; set-up and tear-down events are left off). Grey dots: single ok requests' +
             (", a sample" if len(records) > plots.POINTS_CAP else "") + "; red crosses: failed requests at how "
             "long they took to fail." + (" Open loop: latency counts from the intended send time." if open_loop
                                          else "") + "</p>")
    page.h2("Throughput and errors over time", "throughput")
    page.figure(plots.throughput_timeline(cols, bins, windows))
    page.h2("TTFT distribution", "ttft")
    if (~np.isnan(cols.ttft)).any():
        page.figure(plots.ttft_histogram(cols))
    else:
        page.note("No ok request received a first token: no TTFT to show.")


def _step_axis(steps: list[dict]) -> tuple[list, str, bool]:
    """The x of each step: its users (a "users" field or the name "users=N"), its rate ("rate=R/s"), else the
    step names in order."""
    def num(pattern, s):
        m = re.search(pattern, s.get("step") or "")
        return float(m.group(1)) if m else None

    users = [s.get("users") if s.get("users") is not None else num(r"users=(\d+)", s) for s in steps]
    if None not in users and len(set(users)) == len(users):
        return users, "concurrent users", False
    rates = [num(r"rate=([\d.]+)", s) for s in steps]
    if None not in rates and len(set(rates)) == len(rates):
        return rates, "offered rate (req/s)", False
    return [s.get("step") or str(i) for i, s in enumerate(steps)], "step", True


def steps_section(page: Page, r: dict) -> None:
    steps = r.get("steps") or []
    page.h2("Latency per step", "steps")
    if len(steps) >= 2:
        xs, title, categorical = _step_axis(steps)
        page.figure(plots.step_percentiles(steps, xs, title, categorical))
    elif steps:
        page.note(f"One load step ({steps[0].get('step')}): nothing to plot against concurrency.")
    else:
        page.note("No load steps were summarised.")
    rows = []
    for s in steps:
        tri = lambda d: "/".join("-" if (d or {}).get(k) is None else f"{d[k] * 1000:.0f}"  # noqa: E731
                                 for k in ("p50", "p95", "p99"))
        errs = ", ".join(f"{k} {v}" for k, v in sorted((s.get("errors") or {}).items()))
        rows.append([cell(s.get("step")), cell(s.get("requests"), "num"), cell(s.get("ok"), "num"),
                     cell(f"{(s.get('error_rate') or 0) * 100:.2f}%", "num", errs or None),
                     cell(tri(s.get("ttft")), "num"), cell(tri(s.get("e2e")), "num"),
                     cell("-" if s.get("jitter") is None else f"{s['jitter']:.1f}", "num"),
                     cell(f"{s.get('rps') or 0:.1f}", "num"), cell(f"{s.get('output_tps') or 0:.0f}", "num")])
    if rows:
        page.table(["step", "requests", "ok", "errors", "TTFT P50/P95/P99 ms", "E2E P50/P95/P99 ms", "P99/P50",
                    "req/s", "tok/s"], rows, raw=True)


def _metric_rank(key: str) -> tuple:
    """The scraper's key table order (running, waiting, KV usage, preemptions ... then the gateway's), a
    counter's rate beside its key; per-instance keys (name.instance) and keys outside the table after."""
    base = key.removesuffix("_rate")
    if base in KEY_ORDER:
        return (0, KEY_ORDER.index(base), key)
    return (1 if "." in key else 2, 0, key)


def _metrics_why(sm: dict | None) -> str:
    if sm is None:
        return "the run kept none (no server_metrics section and no metrics.jsonl)"
    if sm.get("why"):
        return str(sm["why"])
    whys = [f"{i}: {d.get('why')}" for i, d in (sm.get("instances") or {}).items() if d.get("why")]
    return "; ".join(whys) or "no scrape of /metrics returned a value"


def metrics_section(page: Page, r: dict, sm: dict | None) -> None:
    page.h2("Server metrics", "metrics")
    raw = (sm or {}).get("series") or {}
    # a counter is drawn as its rate per second (servermetrics adds key_rate), as report.md tables it; a key
    # that stayed 0 everywhere is named, not drawn
    drawn = {k: v for k, v in raw.items() if any(len(p) for p in v.values())
             and not (k.endswith("_total") and k + "_rate" in raw)}
    series = {k: v for k, v in drawn.items() if any(pt[1] for p in v.values() for pt in p)}
    if not series:
        page.note(f"no server metrics: {_metrics_why(sm)}" if not drawn else
                  f"every server metric stayed 0: {', '.join(sorted(drawn))}")
        return
    t0 = _t0(r) or min(p[0][0] for v in series.values() for p in v.values() if p)
    end = max(p[-1][0] for v in series.values() for p in v.values() if p) - t0
    series = {k: series[k] for k in sorted(series, key=_metric_rank)}
    page.figure(plots.server_metrics(series, t0, _windows(r, t0, end), max_keys=MAX_METRIC_PANELS))
    if len(series) > MAX_METRIC_PANELS:
        page.add(f'<p class="small">Not drawn (over {MAX_METRIC_PANELS} panels): '
                 f'{esc(", ".join(list(series)[MAX_METRIC_PANELS:]))}; report.md tables every key.</p>')
    zero = sorted(set(drawn) - set(series))
    if zero:
        page.add(f'<p class="small">Counters are drawn as their rate per second. Always 0: {esc(", ".join(zero))}.'
                 "</p>")
    insts = (sm or {}).get("instances") or {}
    if insts:
        page.table(["instance", "scrapes", "failed", "available", "why"],
                   [[i, d.get("scraped", ""), d.get("failed", ""), d.get("available", ""), d.get("why") or ""]
                    for i, d in sorted(insts.items())])


def host_section(page: Page, r: dict) -> None:
    """The host the run shared: CPU by others and by the run, load, pressure over time, and per phase."""
    host = r.get("host")
    page.h2("The host", "host")
    if not host or not host.get("series"):
        page.note("The host was not measured (a run recorded before llm-chaos measured it).")
        return
    t0 = _t0(r) or host["series"][0]["t"]
    panels = {"CPU (cores)": ("others", "own", "steal"), "load average": ("load1",),
              "pressure (share of time waiting)": ("psi_cpu", "psi_io", "psi_mem")}
    series = {title: {k: [[x["t"], x[k]] for x in host["series"] if x.get(k) is not None] for k in keys}
              for title, keys in panels.items()}
    series = {t: {k: v for k, v in d.items() if v} for t, d in series.items() if any(d.values())}
    end = host["series"][-1]["t"] - t0
    page.figure(plots.server_metrics(series, t0, _windows(r, t0, end), title="The host over time"))
    page.note(f"Others: CPU used by processes outside the run ({host.get('ncpu')} CPUs here), the figure the gate "
              "and report --compare guard on; own: the run's processes (target, proxies, load). A neighbour "
              "slows a run as a slower build would.")
    rows = [["whole load", HostSummary.from_dict(host.get("load")).text()]]
    rows += [[name, HostSummary.from_dict(d).text()] for name, d in (host.get("phases") or {}).items()]
    page.table(["span", "host"], rows)


def tail_sections(page: Page, r: dict) -> None:
    """Notes, faults and the timeline, as report.md has them."""
    t0 = _t0(r)
    if r.get("notes"):
        page.h2("Notes", "notes")
        page.add("<ul>" + "".join(f"<li>{esc(n)}</li>" for n in r["notes"]) + "</ul>")
    page.h2("Faults", "faults")
    rows = []
    for f in r.get("faults") or []:
        errors = "; ".join(f"{w.split('_')[0]}: {f[w]}" for w in ("apply_error", "revert_error") if f.get(w))
        rows.append([f.get("name"), f.get("type"), f.get("description"), _rel(f.get("applied_at"), t0)
                     if f.get("applied") else "not applied", _rel(f.get("reverted_at"), t0) if f.get("reverted")
                     else ("NOT reverted" if f.get("applied") else ""), errors])
    if rows:
        page.table(["fault", "type", "description", "applied", "reverted", "errors"], rows)
    else:
        page.note("No faults.")
    page.h2("Timeline", "timeline")
    rows = [[_rel(e.get("t"), t0), e.get("event"), event_detail(e)] for e in r.get("timeline") or []]
    if rows:
        page.table(["time", "event", "detail"], rows)
    else:
        page.note("No journal events.")


def render_html(report: dict, records: list | None, metrics_summary: dict | None = None, mask=None) -> str:
    """The page for one run. records: RequestRecords (chaos.records.read_records); metrics_summary: shaped as
    report["server_metrics"] (with its series), or None to use the report's own."""
    r = report or {}
    records = records or []
    name = (r.get("experiment") or {}).get("name") or "experiment"
    page = Page(f"{name}: {(r.get('verdict') or 'unknown').upper()} - llm-chaos report")
    header(page, r)
    checks_table(page, r)
    time_sections(page, r, records)
    steps_section(page, r)
    if r.get("phases"):
        phases_section(page, r["phases"], _t0(r), (r.get("analysis") or {}).get("goodput"))
    if r.get("recovery"):
        recovery_section(page, r["recovery"], _t0(r))
    if r.get("stability"):
        stability_section(page, r["stability"])
    if r.get("diagnosis") is not None or r.get("advice"):
        diagnosis_section(page, r.get("diagnosis") or [])
        if r.get("advice"):
            advice_section(page, r["advice"])
    metrics_section(page, r, metrics_summary if metrics_summary is not None else r.get("server_metrics"))
    host_section(page, r)
    tail_sections(page, r)
    return page.render(mask)


def write_html(run_dir: str, report: dict, records_path: str | None = None, metrics_path: str | None = None,
               mask=None) -> str:
    """RUN_DIR/report.html from the report and the run's files (requests.jsonl, metrics.jsonl by default);
    returns its path. mask scrubs the page's text (the report given is already masked; records are not)."""
    records_path = records_path or os.path.join(run_dir, REQUESTS)
    metrics_path = metrics_path or os.path.join(run_dir, METRICS_FILE)
    records = Columns.read(records_path) if os.path.exists(records_path) else []  # streaming: the plots' fields
    sm = report.get("server_metrics")
    if not (sm or {}).get("series") and os.path.exists(metrics_path):  # a report without the section
        sm = summarize_metrics(metrics_path) or sm
    path = os.path.join(run_dir, REPORT_HTML)
    text = render_html(report, records, sm, mask)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path
