"""Markdown for the evidence sections of report.json: recovery's four figures, the per-phase table with intervals,
the diagnosis and the advice. Every function takes the report's dicts and returns lines (each section ends with a
blank line)."""

from __future__ import annotations

from ..verify.goodputspec import NONE_TEXT, GoodputSLO


def _scaled(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "s":
        return f"{v * 1000:.0f}" if abs(v) < 1 else f"{v:.2f}"
    if unit == "%":
        return f"{v * 100:.2f}"
    return f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"


def duration_text(v, none: str = "-") -> str:
    """Seconds as '512 ms' below a second, else '8.34 s'."""
    if v is None:
        return none
    return f"{v * 1000:.0f} ms" if abs(v) < 1 else f"{v:.2f} s"


def estimate(e: dict | None, unit: str = "s") -> str:
    """'512 [498-530] ms n=300', or '512 ms (interval needs n>=367; n=40)', or '- (needs n>=20; n=3)'."""
    if not e:
        return "-"
    suffix = {"s": " ms", "%": "%", "": ""}[unit]
    if unit == "s" and e.get("value") is not None and abs(e["value"]) >= 1:
        suffix = " s"
    v = _scaled(e.get("value"), unit if not (unit == "s" and e.get("value") is not None and abs(e["value"]) >= 1)
                else "s")
    if e.get("value") is None:
        return f"- (needs n>={e['needs']}; n={e.get('n', 0)})" if e.get("needs") else f"- (n={e.get('n', 0)})"
    if e.get("low") is None or e.get("high") is None:
        needs = f"interval needs n>={e['needs']}; " if e.get("needs") else ""
        return f"{v}{suffix} ({needs}n={e.get('n', 0)})"

    def same(x):  # the bounds in the value's own unit
        if unit == "s" and suffix == " s":
            return f"{x:.2f}"
        return _scaled(x, unit)
    return f"{v}{suffix} [{same(e['low'])}-{same(e['high'])}] n={e.get('n', 0)}"


def _fig(f: dict | None) -> str:
    if not f:
        return "-"
    if f.get("value") is None:
        return "never"
    v = f["value"]
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def recovery_markdown(rec: dict | None, t0: float | None) -> list[str]:
    if not rec or not rec.get("faults"):
        return []
    lines = ["## Recovery", "",
             f"Measured on the records' clock (docs/recovery.md): detect = first failure or SLO breach a client "
             f"saw; failover = first moment after which requests ending in a {rec.get('window_s', 5):g} s window "
             f"meet the steady-state SLO; restore = the faulted instance serves again and throughput is back "
             f"within the steady state's interval; budget = failed requests (and their seconds) until failover.",
             "", "| fault | at | detect | failover | restore capacity | failed requests | failed-request-s | "
                 "slow requests |", "|---|---|---|---|---|---|---|---|"]
    rows = list(rec["faults"])
    if len(rows) > 1 and rec.get("run"):
        rows.append({**rec["run"], "fault": "**the run**"})
    for f in rows:
        b = f.get("error_budget") or {}
        at = f"{f['start'] - t0:+.2f}s" if t0 and f.get("start") else "-"
        lines.append(f"| {f['fault']} | {at} | {_fig(f.get('time_to_detect'))} | {_fig(f.get('time_to_failover'))}"
                     f" | {_fig(f.get('time_to_restore'))} | {b.get('failed_requests', '-')} | "
                     f"{b.get('failed_request_seconds', '-')} | {b.get('slow_requests', '-')} |")
    lines.append("")
    for f in rec["faults"]:
        for name in ("time_to_detect", "time_to_failover", "time_to_restore"):
            g = f.get(name) or {}
            res = f" (resolution {g['resolution_s'] * 1000:.0f} ms)" if g.get("resolution_s") else ""
            lines.append(f"- {f['fault']} {name.replace('_', ' ')}: {_fig(g)}{res}: {g.get('evidence', '')}")
    return lines + [""]


def goodput_text(bounds: dict | None) -> str:
    """What goodput counted, from report.json's analysis.goodput: the bounds and where they came from, or why
    there is none."""
    g = GoodputSLO(**{k: bounds.get(k) for k in ("ttft", "tpot", "e2e", "source")}) if bounds else GoodputSLO()
    if g.is_empty():
        return (f"Goodput: {NONE_TEXT} (give steady_state.goodput, or P95/P99 latency bounds in "
                f"steady_state.slo).")
    return (f"Goodput: the share of requests that met {g.text()}, with its Wilson interval; a failed request is "
            f"never good (docs/reports.md).")


def phases_markdown(phases: list[dict] | None, goodput: dict | None = None) -> list[str]:
    """goodput: report.json's analysis.goodput (the bounds goodput counted with)."""
    if not phases:
        return []
    conf = phases[0].get("error_rate", {}).get("confidence", 0.95)
    lines = ["## Phases", "",
             f"Requests by the phase they ended in (in flight when a fault began: the fault's). Each figure "
             f"with its {conf * 100:.0f}% interval "
             f"([low-high]: order statistics for percentiles, Wilson for the error rate and goodput, Poisson for "
             f"throughput, bootstrap for jitter) and the samples it rests on; a figure on too few samples says how many it "
             f"needs.", "", goodput_text(goodput), ""]
    lines += ["| phase | span | requests | error rate | goodput | ok req/s | E2E P99/P50 |",
              "|---|---|---|---|---|---|---|"]
    for p in phases:
        lines.append(f"| {p['name']} | {p.get('duration_s', 0):.1f} s | {p['requests']} | "
                     f"{estimate(p.get('error_rate'), '%')} | {estimate(p.get('goodput'), '%')} | "
                     f"{estimate(p.get('throughput'), '')} | {estimate(p.get('jitter'), '')} |")
    lines += ["", "| phase | figure | P50 | P95 | P99 |", "|---|---|---|---|---|"]
    for p in phases:
        for fig in ("ttft", "itl", "e2e"):
            t = p.get(fig) or {}
            lines.append(f"| {p['name']} | {fig.upper()} | {estimate(t.get('p50'))} | {estimate(t.get('p95'))} | "
                         f"{estimate(t.get('p99'))} |")
    return lines + [""]


def diagnosis_markdown(diag: list[dict] | None, adv: dict | None) -> list[str]:
    lines = []
    if diag is not None:
        lines += ["## Diagnosis", ""]
        if not diag:
            lines.append("Nothing in the troubleshooting table matched what was seen.")
        for d in diag:
            lines.append(f"- **{d['cause']}**: " + "; ".join(d["evidence"]) + f". Advice: {d['advice']}.")
        lines.append("")
    if adv:
        lines += ["## Advice for clients", ""]
        t = adv.get("timeout")
        if t:
            lines.append(f"- timeout: {estimate(t)} ({t.get('rule')})")
        r = adv.get("retries")
        if r:
            lines.append(f"- retries: at most {r['max_retries']}, {r['backoff']} backoff; retry budget "
                         f"{r['retry_budget']}")
        c = adv.get("concurrency_cap")
        if c:
            lines.append(f"- concurrency cap: {c['value']} ({c['rule']})" if c.get("value") else
                         f"- concurrency cap: not measured ({c['rule']})")
        lines.append("")
    return lines


STABILITY = ("identical", "json_valid", "truncated", "repetition", "garbled")


def _clip(text, n: int = 60) -> str:
    """An output's head for a Markdown table: control characters shown as escapes, pipes escaped."""
    if text is None:
        return "-"
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))[:n]
    return "`" + shown.replace("|", "\\|").replace("`", "'") + "`"


def stability_markdown(st: dict | None) -> list[str]:
    if not st:
        return []
    probes = st.get("probes") or {}
    asked = any((st.get(n) or {}).get("status") not in (None, "off") for n in STABILITY)
    if not probes.get("sent") and not asked:
        return ["## Output stability", "", "Not asked: no `verify: stability` and no probes in the load "
                "(docs/stability.md); report.json `stability` has the rates over every answer.", ""]
    lines = ["## Output stability", "",
             f"{probes.get('sent', 0)} probe requests over {len(probes.get('keys') or [])} keys "
             f"({', '.join(probes.get('keys') or []) or '-'}); docs/stability.md defines each rate.", "",
             "| category | result | rate | count | threshold |", "|---|---|---|---|---|"]
    for name in STABILITY:
        c = st.get(name)
        if not c:
            continue
        result = {"passed": "pass", "failed": "**FAIL**", "not_judged": "not judged", "off": "reported",
                  "not_applicable": "n/a"}.get(c.get("status"), c.get("status") or "-")
        thr = c.get("threshold")
        lines.append(f"| {c.get('check', name)} | {result} | {estimate(c.get('rate'), '%')} | "
                     f"{c.get('count', 0)} of {c.get('n', 0)} | {'-' if thr is None else thr} |")
    lines.append("")
    for name in STABILITY:
        c = st.get(name) or {}
        for ex in (c.get("examples") or [])[:3]:
            expected = f" expected {_clip(ex['expected_head'])}," if ex.get("expected_head") is not None else ""
            lines.append(f"- {name}: `{ex.get('key') or ex.get('case')}` from {ex.get('served_by') or '-'}"
                         + (f" (fault {ex['fault']})" if ex.get("fault") else "") + f":{expected} got "
                         f"{_clip(ex.get('got_head', ex.get('head')))}")
    return lines + [""]
