"""The analysis sections of report.html as HTML tables: phases, recovery, output stability, diagnosis and advice.
Figures with noise are Estimates (chaos.verify.stats): "value [low-high] n=..."."""

from __future__ import annotations

from .page import Page, cell, esc
from .sections import goodput_text

PHASE_ROWS = [(f"{k.upper()} P{q}", k, f"p{q}", "s") for k in ("ttft", "itl", "e2e") for q in (50, 95, 99)] + [
    ("error rate", "error_rate", None, "ratio"), ("goodput (met the SLO)", "goodput", None, "ratio"),
    ("throughput (ok req/s)", "throughput", None, "rate"),
    ("jitter (E2E P99/P50)", "jitter", None, "x")]
NBSP = "\u00a0"
RECOVERY_FIGURES = (("time to detect", "time_to_detect"), ("time to failover", "time_to_failover"),
                    ("time to restore", "time_to_restore"))


def fmt_s(v) -> str:
    """Seconds for people: ms under a second, s under two minutes, then m:ss."""
    if v is None:
        return "-"
    v = float(v)
    if abs(v) < 1:
        return f"{v * 1000:.0f} ms"
    if abs(v) < 120:
        return f"{v:.2f} s"
    return f"{int(v // 60)}m{v % 60:04.1f}s"


def fmt_value(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return fmt_s(v)
    if unit == "ratio":
        return f"{v * 100:.2f}%"
    if unit == "rate":
        return f"{v:.2f}/s"
    if unit == "x":
        return f"{v:.2f}x"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def is_estimate(d) -> bool:
    return isinstance(d, dict) and "value" in d and "n" in d


def _scale(value: float, unit: str) -> tuple[float, str, str]:
    """(factor, number format, suffix) for an estimate's three numbers, chosen by its value: one unit for all."""
    if unit == "s":
        return (1000.0, ".0f", "\u00a0ms") if abs(value) < 1 else (1.0, ".2f", "\u00a0s")
    return {"ratio": (100.0, ".2f", "%"), "rate": (1.0, ".2f", "/s"), "x": (1.0, ".2f", "x")}.get(
        unit, (1.0, ".4g", ""))


def estimate_text(e, unit: str = "") -> str:
    """"412 [398-430] ms n=300": the unit once, chosen by the value; no interval: "412 ms (n=12, no
    interval, needs n>=59)"; no value: "- (n=3, needs n>=59)"."""
    if not isinstance(e, dict):
        return "-" if e is None else fmt_value(e, unit) if isinstance(e, (int, float)) else str(e)
    n = e.get("n")
    needs = f", needs n>={e['needs']}" if e.get("needs") else ""
    if e.get("value") is None:
        return f"- (n={n}{needs})"
    if e.get("low") is not None and e.get("high") is not None:
        k, f, suffix = _scale(float(e["value"]), unit)
        # no-break spaces (\u00a0): a narrow cell wraps before "n=", never inside the value and its interval
        return f"{e['value'] * k:{f}}\u00a0[{e['low'] * k:{f}}\u2013{e['high'] * k:{f}}]{suffix} n={n}"
    return f"{fmt_value(e['value'], unit).replace(' ', NBSP)} (n={n}, no interval{needs})"


def _window(start, end, t0) -> str:
    rel = lambda t: "end" if t is None else f"{t - t0:+.1f}s" if t0 is not None else f"{t:.1f}"  # noqa: E731
    return f"{rel(start)} \u2192 {rel(end)}"


def phases_section(page: Page, phases: list[dict], t0, goodput: dict | None = None) -> None:
    """One column a phase, one row a figure; goodput: report.json's analysis.goodput (what goodput counted)."""
    page.h2("Phases", "phases")
    conf = next((p[k].get("confidence") for p in phases for k in ("error_rate", "throughput")
                 if isinstance(p.get(k), dict) and p[k].get("confidence")), None)
    headers = ["figure"] + [f"{p.get('name')} ({_window(p.get('start'), p.get('end'), t0)}, "
                            f"{p.get('requests', '?')} requests)" for p in phases]
    rows = []
    for label, key, q, unit in PHASE_ROWS:
        values = [(p.get(key) or {}).get(q) if q else p.get(key) for p in phases]
        if all(v is None for v in values):
            continue
        rows.append([cell(label)] + [cell(estimate_text(v, unit), "num", (v or {}).get("method")
                                          if isinstance(v, dict) else None) for v in values])
    page.table(headers, rows, raw=True)
    if conf:
        page.add(f'<p class="small">[low\u2013high]: the {float(conf):.0%} interval; a figure whose phase holds '
                 f"too few samples says how many it needs. A request belongs to the phase it was sent in.</p>")
    page.add(f'<p class="small">{esc(goodput_text(goodput))}</p>')


def _moment(d: dict | None) -> str:
    """A recovery figure's cell: the value and its evidence below it."""
    d = d or {}
    value = "never" if d.get("value") is None else fmt_s(d["value"])
    evidence = f'<br><span class="small">{esc(d.get("evidence"))}</span>' if d.get("evidence") else ""
    return f'<td class="num">{esc(value)}{evidence}</td>' if not evidence else f"<td>{esc(value)}{evidence}</td>"


def _budget(b: dict | None) -> str:
    b = b or {}
    if not b:
        return cell("-")
    text = (f"{b.get('failed_requests', 0)} failed ({fmt_s(b.get('failed_request_seconds'))} spent), "
            f"{b.get('slow_requests', 0)} slow")
    evidence = f'<br><span class="small">{esc(b.get("evidence"))}</span>' if b.get("evidence") else ""
    return f"<td>{esc(text)}{evidence}</td>"


def recovery_section(page: Page, rec: dict, t0) -> None:
    page.h2("Recovery", "recovery")
    rows = []
    for f in rec.get("faults") or []:
        rows.append([cell(f.get("fault")), cell(f.get("type")), cell(_window(f.get("start"), f.get("end"), t0)),
                     cell(", ".join(map(str, f.get("instances") or [])))]
                    + [_moment(f.get(k)) for _, k in RECOVERY_FIGURES] + [_budget(f.get("error_budget"))])
    run = rec.get("run") or {}
    if run:
        rows.append([cell("whole run"), cell(""), cell(""), cell("")] + [_moment(run.get(k)) for _, k in
                                                                       RECOVERY_FIGURES]
                    + [_budget(run.get("error_budget"))])
    if rows:
        page.table(["fault", "type", "window", "instances"] + [n for n, _ in RECOVERY_FIGURES] + ["error budget"],
                   rows, raw=True)
    else:
        page.note("No faults: no recovery to measure.")


def diagnosis_section(page: Page, diagnosis: list[dict]) -> None:
    page.h2("Diagnosis", "diagnosis")
    if not diagnosis:
        page.note("Nothing in this run matched a known cause.")
        return
    items = []
    for d in diagnosis:
        evidence = "".join(f"<li>{esc(e)}</li>" for e in d.get("evidence") or [])
        items.append(f"<li><b>{esc(d.get('cause'))}</b><ul>{evidence}</ul>"
                     + (f"<p>advice: {esc(d['advice'])}</p>" if d.get("advice") else "") + "</li>")
    page.add("<ul>" + "".join(items) + "</ul>")


def advice_section(page: Page, advice: dict) -> None:
    page.add("<h3>Client settings advised</h3>")
    rows = []
    for key, v in advice.items():
        if is_estimate(v):
            text, rule = estimate_text(v, "s"), v.get("rule", "")
        elif isinstance(v, dict):
            rule = v.get("rule", "")
            text = "; ".join(f"{k} {x}" for k, x in v.items() if k != "rule" and x is not None) or "-"
        else:
            text, rule = str(v), ""
        rows.append([key.replace("_", " "), text, rule])
    page.table(["setting", "advised", "rule"], rows)


STABILITY = ("identical", "json_valid", "truncated", "repetition", "garbled")


def _shown(text, n: int = 60) -> str:
    """An output's head: control characters as escapes (the reference model's random bytes are full of them)."""
    return "-" if text is None else "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))[:n]


def stability_section(page: Page, st: dict) -> None:
    """The stability check's categories: rate with its interval, count, threshold, and a few examples."""
    page.h2("Output stability", "stability")
    probes = st.get("probes") or {}
    asked = any((st.get(n) or {}).get("status") not in (None, "off") for n in STABILITY)
    if not probes.get("sent") and not asked:
        page.note("Not asked: no verify: stability and no probes in the load (docs/stability.md); report.json "
                  "stability has the rates over every answer.")
        return
    page.note(f"{probes.get('sent', 0)} probe requests over {len(probes.get('keys') or [])} keys.")
    rows, examples = [], []
    for name in STABILITY:
        c = st.get(name)
        if not c:
            continue
        thr = c.get("threshold")
        rows.append([c.get("check", name), c.get("status") or "-", estimate_text(c.get("rate"), "ratio"),
                     f"{c.get('count', 0)} of {c.get('n', 0)}", "-" if thr is None else str(thr)])
        for ex in (c.get("examples") or [])[:3]:
            examples.append([name, ex.get("key") or ex.get("case") or "-", ex.get("served_by") or "-",
                             ex.get("fault") or "-", _shown(ex.get("expected_head")),
                             _shown(ex.get("got_head", ex.get("head")))])
    page.table(["category", "result", "rate", "count", "threshold"], rows)
    if examples:
        page.table(["category", "key", "served by", "fault", "expected", "got"], examples)
