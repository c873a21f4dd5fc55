"""`chaos capacity TARGET --slo "p95<3s,errors<0.1%"`: the highest load that still meets the SLO and where it
breaks, found by a noise-tolerant search (chaos.plan.search), and the seed's cost sum (chaos.plan.cost).

Each probe is one bounded load at one level, held until its SLO is decided (chaos.plan.hold: judged every --hold,
at most --looks times, each look's intervals at 1 - alpha/looks); probes of the same level are pooled, so a repeat
narrows that level's intervals. The knee is reported as an interval, [highest sure pass, lowest sure fail], never
as one number.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import asdict

from ..errors import SetupError
from ..records import read_records
from ..report.page import Page, esc
from .reach import reached
from .cost import CostInputs, cost_sum
from .figures import judge, level_figures
from .hold import Holding, hold_level
from .loadrun import Send, replicas
from .planplots import capacity_figure
from .search import Level, SearchConfig, knee, next_probe
from .slo import BREAKS, MEETS, SLO
from .tables import LEVEL_HEADERS, level_cells, markdown_table, text_table, write_outputs


class RefusedLoad(SetupError, RuntimeError):
    """Every request of a probe was refused with a client error: the target refuses this load outright (prompts
    beyond its context, a model it does not serve, a bad key), which says nothing of its capacity."""


# What to change, by the error code (or status) the refusals carried.
REFUSAL_FIXES = {
    "context_length_exceeded": "send a workload whose prompts fit the model's context (--workload chat, or "
                               "--input-tokens and --output-tokens within it), or reach a target with a longer "
                               "context (a larger preset, or max_model_len)",
    "model_not_found": "ask for a model the target serves (--model; GET /v1/models lists them)",
    401: "set the API key (--api-key-env NAME, the variable that holds it)",
    403: "use a key that may call this model",
}
OVERLOAD = (408, 429)  # a client error that is the target's load talking: a capacity signal, never a refusal


def refusal(recs) -> tuple[int, str, str] | None:
    """(status, error code, message) of the commonest refusal when every answered request was a client error
    that is not about load; None when any request was served, failed otherwise, or none was sent."""
    sent = [r for r in recs if r.outcome != "cancelled"]
    if not sent or any(r.status is None or not 400 <= r.status < 500 or r.status in OVERLOAD for r in sent):
        return None
    (status, code), _ = Counter((r.status, r.error_code or "") for r in sent).most_common(1)[0]
    message = next((r.error for r in sent if (r.status, r.error_code or "") == (status, code) and r.error), "")
    return status, code, message


def refused_error(recs, label: str, pdir: str) -> RefusedLoad:
    status, code, message = refusal(recs)
    n = sum(r.outcome != "cancelled" for r in recs)
    fix = REFUSAL_FIXES.get(code) or REFUSAL_FIXES.get(status) or \
        "change the load or the target until one request succeeds (chaos load with --users 1 shows one answer)"
    return RefusedLoad(f"the target refused every one of the {n:,} requests at {label} with a client error "
                       f"(HTTP {status}{f' {code}' if code else ''}{f': {message}' if message else ''}): it "
                       f"refuses this load outright, so there is no capacity to find. The probe's records: {pdir}",
                       hint=fix)


def leaning(judged: dict) -> str:
    """BREAKS when some clause's point figure is beyond its limit (a failed one counts as beyond), else MEETS."""
    for c in judged["clauses"]:
        e = c["estimate"]
        if e.get("value_failed") or (e.get("value") is not None and e["value"] >= c["limit"]):
            return BREAKS
    return MEETS


def _label(level: float, open_loop: bool) -> str:
    return f"{level:g}/s" if open_loop else f"{int(level)} users"


def capacity(target: str, variables: dict, send: Send, slo: SLO, cfg: SearchConfig, hold: Holding, out: str,
             open_loop: bool = False, prices: dict | None = None, for_level: float | None = None,
             progress=print) -> dict:
    """Run the search against the reached target and write capacity.json/.md/.html. prices: price_per_hour and/or
    price_per_1k_tokens given on the command line (they win over the target file's)."""
    os.makedirs(out, exist_ok=True)
    state: dict[float, Level] = {}
    pooled: dict[float, list] = {}
    held: dict[float, float] = {}  # seconds each level was held, over its probes
    probes, interrupted, started = [], False, time.monotonic()
    with reached(target, variables, os.path.join(out, "target"), progress, send.api_key_env) as r:
        name, model, n_replicas = r.name, r.model, replicas(r)
        settings = getattr(r.spec, "settings", None) or {}
        while (nxt := next_probe(state, cfg)) is not None:
            level, why = nxt
            pdir = os.path.join(out, "probes", f"{len(probes) + 1:02d}-{'rate' if open_loop else 'users'}"
                                                f"{level:g}")
            h = hold_level(r, send, level, hold, pdir, slo, open_loop, progress)
            res = h.result
            model = res.model
            recs = read_records(res.records_path)
            if not res.interrupted and refusal(recs) is not None:
                raise refused_error(recs, _label(level, open_loop), pdir)
            pooled.setdefault(level, []).extend(recs)
            held[level] = held.get(level, 0.0) + h.seconds
            alone = judge(recs, slo, open_loop, hold.confidence)
            together = judge(pooled[level], slo, open_loop, hold.confidence)
            s = state.setdefault(level, Level())
            s.probes += 1
            s.verdict = together["verdict"]
            s.leans = leaning(together)
            probes.append({"index": len(probes) + 1, "level": level, "why": why, "dir": os.path.abspath(pdir),
                           "requests": len(recs), "looks": h.looks, "held_s": round(h.seconds, 1),
                           "decided": h.verdict,
                           "verdict_alone": alone["verdict"], "verdict_pooled": s.verdict,
                           "notes": list(res.notes)})  # e.g. a vendor's limits capping the load
            progress(f"probe {len(probes)}: {_label(level, open_loop)} ({why}): {len(recs)} requests in "
                     f"{h.seconds:.0f}s ({h.looks} look(s)) -> "
                     f"{s.verdict}" + (f" (pooled over {s.probes} probes)" if s.probes > 1 else "") + "; "
                     + ", ".join(f"{c['clause']} {c['verdict']}" for c in together["clauses"]))
            if res.interrupted:
                interrupted = True
                break
    k = knee(state)
    rows = []
    for level in sorted(state):
        j = judge(pooled[level], slo, open_loop, hold.confidence)
        rows.append({"level": level, "step": _label(level, open_loop), "probes": state[level].probes,
                     "held_s": round(held[level], 1), "verdict": j["verdict"],
                     "clauses": {c["key"]: c for c in j["clauses"]},
                     **level_figures(pooled[level], open_loop, held[level] or None)})
    safe = next((row for row in rows if row["level"] == k.low), None)
    prices = {**{key: settings.get(key) for key in ("price_per_hour", "price_per_1k_tokens")
                 if settings.get(key) is not None}, **{k2: v for k2, v in (prices or {}).items() if v is not None}}
    cost = cost_sum(CostInputs(
        k.low, n_replicas, for_level, prices.get("price_per_hour"), prices.get("price_per_1k_tokens"),
        (safe or {}).get("rps", {}).get("value"),
        (safe["input_tokens"] + safe["output_tokens"]) / safe["ok"] if safe and safe["ok"] else None))
    report = {"command": "capacity", "target": target, "name": name, "model": model, "replicas": n_replicas,
              "unit": "arrivals/s" if open_loop else "concurrency", "slo": slo.text(),
              "clauses": [{"clause": c.text(), "key": c.key, "limit": c.limit} for c in slo.clauses],
              "search": asdict(cfg), "hold_s": hold.hold, "looks": hold.looks,
              "look_confidence": hold.confidence, "minutes": round((time.monotonic() - started) / 60, 2),
              "interrupted": interrupted,
              "send": {"workload": send.workload, "input_tokens": send.input_tokens,
                       "output_tokens": send.output_tokens, "seed": send.seed, "timeout_s": send.timeout_total},
              "knee": k.to_dict(), "probes": probes, "levels": rows, "cost": cost,
              "conclusion": conclusion(k, cfg, open_loop, len(probes)) + _too_few(rows)}
    write(report, out)
    return report


def conclusion(k, cfg: SearchConfig, open_loop: bool, n_probes: int) -> str:
    unit = "arrivals/s" if open_loop else "users"
    if k.low is None and k.high is None:
        return f"no level was decided in {n_probes} probes: every figure stayed unclear (raise --hold or --max-probes)"
    if k.low is None:
        return (f"the SLO breaks already at {k.high:g} {unit}, and no lower level surely met it"
                + ("" if k.unclear else " (the lowest probed)"))
    if k.high is None:
        return (f"the SLO held at every level surely judged, up to {k.low:g} {unit}: no breaking point found "
                f"within {n_probes} probes (max level {cfg.max_level:g}); raise --max-level or --max-probes")
    text = (f"knee in [{k.low:g}, {k.high:g}] {unit}: {k.low:g} surely meets the SLO, {k.high:g} surely "
            f"breaks it")
    if k.unclear:
        text += f"; unclear in between: {', '.join(f'{x:g}' for x in k.unclear)}"
    if k.non_monotone:
        text += (f"; but {', '.join(f'{x:g}' for x in k.non_monotone)} met it above the break (noisy target: "
                 f"repeat with a longer --hold)")
    if cfg.expected is not None:
        text += (f"; the expected load {cfg.expected:g} is " + ("within the safe capacity" if k.low >= cfg.expected
                                                              else "ABOVE the safe capacity"))
    return text


def _too_few(rows: list[dict]) -> str:
    """A hint when a level stayed unclear only for want of requests (no bound at all on its side)."""
    needs = {c["clause"]: c["estimate"]["needs"] for row in rows if row["verdict"] == "unclear"
             for c in row["clauses"].values() if c["verdict"] == "unclear" and c["estimate"].get("needs")}
    if not needs:
        return ""
    return "; too few requests to judge " + ", ".join(f"{k} (an interval needs n>={v} at a level)"
                                                      for k, v in needs.items()) + ": hold each probe longer"


def table_rows(report: dict) -> list[list[str]]:
    out = []
    for row in report["levels"]:
        verdicts = ", ".join(f"{c['clause']}: {c['verdict']}" for c in row["clauses"].values())
        out.append([f"{row['step']} x{row['probes']}", row["verdict"], verdicts]
                   + level_cells(row["step"], row)[1:])
    return out


HEADERS = ["level (probes)", "SLO", "clauses"] + LEVEL_HEADERS[1:]


def cost_lines(cost: dict, unit: str) -> list[str]:
    unit = "users" if unit == "concurrency" else unit
    lines = []
    if cost.get("per_instance") is not None:
        lines.append(f"per-instance capacity: {cost['per_instance']:g} {unit} (safe value / "
                     f"{cost['inputs']['replicas']} replica(s))")
    if cost.get("instances") is not None:
        lines.append(f"instances for {cost['inputs']['for_level']:g} {unit}: {cost['instances']}")
    for how, v in (cost.get("cost_per_1k_requests") or {}).items():
        lines.append(f"cost per 1,000 requests at the SLO ({'hourly price' if how == 'by_hour' else 'token price'})"
                     f": {v:.4g}")
    lines += [f"cost sum not made: {w}" for w in cost.get("why_not") or []]
    return lines


def markdown(report: dict) -> str:
    lines = [f"# Capacity: {report['name']} against {report['slo']}", "", f"**{report['conclusion']}**", "",
             f"- target `{report['target']}`, model `{report['model']}`, {report['replicas']} replica(s); "
             f"{len(report['probes'])} probes, each looking at its SLO every {report['hold_s']:g} s and at most "
             f"{report.get('looks', 1)} times; {report.get('minutes', '-')} minutes in all",
             f"- a level meets the SLO when every clause's {100 * report.get('look_confidence', 0.95):.4g}% interval "
             "lies within its limit, breaks it when one lies beyond; a probe ends at the first look that decides; "
             "a level still unclear is probed again (probes of a level are pooled)", ""]
    lines += markdown_table(HEADERS, table_rows(report))
    lines += ["", "## Cost", ""] + [f"- {x}" for x in cost_lines(report["cost"], report["unit"])]
    lines += ["", "## Probes", "", "| # | level | why | requests | held | looks | alone | pooled |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {p['index']} | {p['level']:g} | {p['why']} | {p['requests']} | {p.get('held_s', '-')} s | "
              f"{p.get('looks', '-')} | {p['verdict_alone']} | {p['verdict_pooled']} |" for p in report["probes"]]
    lines += [f"- probe {p['index']}: {n}" for p in report["probes"] for n in p.get("notes") or []]
    return "\n".join(lines) + "\n"


def html(report: dict) -> str:
    page = Page(f"Capacity: {report['name']}")
    page.add(f"<h1>Capacity: {esc(report['name'])} against {esc(report['slo'])}</h1>")
    page.add(f'<p class="reason" style="border-color:#9a6700">{esc(report["conclusion"])}</p>')
    for c in report["clauses"]:
        page.figure(capacity_figure(report["levels"], c, report["knee"], report["unit"]))
    page.h2("Levels (probes pooled)")
    page.table(HEADERS, table_rows(report))
    page.h2("Cost")
    page.add("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in cost_lines(report["cost"], report["unit"])) + "</ul>")
    page.h2("Probes, in order")
    page.table(["#", "level", "why", "requests", "alone", "pooled"],
               [[str(p["index"]), f"{p['level']:g}", p["why"], str(p["requests"]), p["verdict_alone"],
                 p["verdict_pooled"]] for p in report["probes"]])
    return page.render()


def print_report(report: dict) -> None:
    print(text_table(HEADERS, table_rows(report)))
    print(f"\n{report['conclusion']}")
    for line in cost_lines(report["cost"], report["unit"]):
        print(line)


def write(report: dict, out: str) -> None:
    write_outputs(report, out, "capacity", markdown, html)
