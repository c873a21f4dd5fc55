"""`chaos compare A B ...`: targets side by side as in the seed's table. Every target gets the same dataset (one
workload seed), the same output limit and the same timeout, and the same concurrency steps; they run one after
another (each started and stopped by reached), then one table: P50/P95/P99 at one step, the error rate, jitter
P99/P50 and P95 at the highest step; and the verifier's verdicts of each target against the first (latency with a
10 % tolerance and 0.5 s groups, error rate, throughput: chaos.report.comparison's figures, Holm-corrected)."""

from __future__ import annotations

import os
import re

from ..records import read_records
from ..report.comparison import TOLERANCE, run_figures, summary
from ..report.page import Page, esc
from ..report.sections import estimate
from .reach import reached
from ..verify import compare as C
from .figures import level_figures
from .loadrun import Send, replicas, run_levels, step_name
from .planplots import targets_side_by_side
from .tables import markdown_table, text_table, write_outputs


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60] or "target"


def compare_targets(targets: list[str], variables: list[dict], send: Send, levels: list, hold: float, out: str,
                    at=None, confidence: float = 0.95, progress=print) -> dict:
    """variables: one dict a target (its --var values). at: the step of the side-by-side percentiles (default the
    first). Writes compare.json/.md/.html and each target's run under out/NN-name/."""
    if len(targets) < 2:
        raise ValueError("compare needs at least two targets")
    at = levels[0] if at is None else at
    if at not in levels:
        raise ValueError(f"--at {at} is not one of the steps {','.join(map(str, levels))}")
    os.makedirs(out, exist_ok=True)
    sides = []
    for i, (target, var) in enumerate(zip(targets, variables), start=1):
        run_dir = os.path.join(out, f"{i:02d}-{_slug(os.path.basename(target.rstrip('/')) or target)}")
        with reached(target, var, os.path.join(run_dir, "target"), progress, send.api_key_env) as r:
            progress(f"compare: target {i} of {len(targets)}: {r.name}")
            res = run_levels(r, send, levels, hold, run_dir, False, progress)
            name, n = r.name, replicas(r)
        records = read_records(res.records_path)
        steps = {lv: [x for x in records if x.step == step_name(lv, False)] for lv in levels}
        sides.append({"target": target, "vars": sorted(var), "name": name, "model": res.model, "replicas": n,
                      "dir": os.path.abspath(run_dir), "interrupted": res.interrupted, "notes": list(res.notes),
                      "at": level_figures(steps[at], False, hold), "highest": level_figures(steps[levels[-1]],
                                                                                           False, hold),
                      "_steps": steps})
        if res.interrupted:
            break
    verdicts = []
    base = sides[0]
    for other in sides[1:]:
        figs = []
        for lv in dict.fromkeys([at, levels[-1]]):
            ra, rb = base["_steps"][lv], other["_steps"][lv]
            figs += run_figures(ra, rb, f"{step_name(lv, False)}", confidence, hold, hold, TOLERANCE)
        figs = C.compare_figures(figs, confidence)
        for f in figs:
            f["summary"] = summary(f)
        verdicts.append({"a": base["name"], "b": other["name"], "b_index": sides.index(other) + 1,
                         "worse": sum(f["verdict"] == C.WORSE for f in figs),
                         "better": sum(f["verdict"] == C.BETTER for f in figs), "figures": figs})
    for s in sides:
        del s["_steps"]
    report = {"command": "compare", "levels": levels, "at": at, "hold_s": hold, "confidence": confidence,
              "tolerance": TOLERANCE,
              "send": {"workload": send.workload, "input_tokens": send.input_tokens,
                       "output_tokens": send.output_tokens, "seed": send.seed, "timeout_s": send.timeout_total,
                       "timeout_first_token_s": send.timeout_first_token},
              "targets": sides, "comparisons": verdicts}
    write(report, out)
    return report


def side_table(report: dict) -> tuple[list[str], list[list[str]]]:
    """The seed's table: one column a target, one row a figure."""
    at, top = f"{report['at']} users", f"{report['levels'][-1]} users"
    rows_def = [(f"P50 E2E ({at})", lambda s: estimate(s["at"]["e2e"]["p50"])),
                (f"P95 E2E ({at})", lambda s: estimate(s["at"]["e2e"]["p95"])),
                (f"P99 E2E ({at})", lambda s: estimate(s["at"]["e2e"]["p99"])),
                (f"P95 TTFT ({at})", lambda s: estimate(s["at"]["ttft"]["p95"])),
                (f"error rate ({at})", lambda s: estimate(s["at"]["error_rate"], "%")),
                (f"jitter P99/P50 ({at})", lambda s: _ratio(s["at"]["jitter"])),
                (f"req/s ({at})", lambda s: _num(s["at"]["rps"])),
                (f"P95 E2E ({top})", lambda s: estimate(s["highest"]["e2e"]["p95"])),
                (f"error rate ({top})", lambda s: estimate(s["highest"]["error_rate"], "%"))]
    headers = ["figure"] + [f"{i}. {s['name']}" for i, s in enumerate(report["targets"], start=1)]
    return headers, [[label] + [fn(s) for s in report["targets"]] for label, fn in rows_def]


def _ratio(e: dict) -> str:
    if e.get("value") is None:
        return "-"
    return f"{e['value']:.2f}" + (f" [{e['low']:.2f}-{e['high']:.2f}]" if e.get("low") is not None else "")


def _num(e: dict) -> str:
    return "-" if e.get("value") is None else f"{e['value']:.1f} [{e['low']:.1f}-{e['high']:.1f}]"


def verdict_rows(comp: dict) -> list[list[str]]:
    return [[f["figure"], f["verdict"], f["summary"]] for f in comp["figures"]]


def markdown(report: dict) -> str:
    s = report["send"]
    lines = ["# Targets side by side", "",
             f"- the same dataset for every target: workload {s['workload']} (seed {s['seed']}), output limit "
             f"{s['output_tokens'] or 'the workload default'}, timeout {s['timeout_s']:g} s; steps "
             f"{', '.join(map(str, report['levels']))} users, each held {report['hold_s']:g} s", ""]
    lines += markdown_table(*side_table(report))
    for comp in report["comparisons"]:
        lines += ["", f"## {comp['b']} ({comp['b_index']}) against {comp['a']} (1): {comp['worse']} worse, "
                      f"{comp['better']} better", "",
                  f"Holm-corrected at {report['confidence']:.0%}; a latency or throughput change counts beyond "
                  f"{report['tolerance']:.0%}.", ""]
        lines += markdown_table(["figure", "verdict", "1 -> this"], verdict_rows(comp))
    return "\n".join(lines) + "\n"


def html(report: dict) -> str:
    page = Page("Targets side by side")
    page.add("<h1>Targets side by side</h1>")
    page.add(f'<p class="meta">{len(report["targets"])} targets, the same dataset (seed {report["send"]["seed"]}), '
             f'output limit and timeout; steps {esc(", ".join(map(str, report["levels"])))} users</p>')
    page.figure(targets_side_by_side(report["targets"], f"{report['at']} users"))
    page.table(*side_table(report))
    for comp in report["comparisons"]:
        page.h2(f"{comp['b']} ({comp['b_index']}) against {comp['a']} (1): {comp['worse']} worse, "
                f"{comp['better']} better")
        page.table(["figure", "verdict", "1 -> this"], verdict_rows(comp))
    return page.render()


def print_report(report: dict) -> None:
    print(text_table(*side_table(report)))
    for comp in report["comparisons"]:
        flagged = [f for f in comp["figures"] if f["verdict"] in (C.WORSE, C.BETTER)]
        print(f"\n{comp['b']} against {comp['a']}: {comp['worse']} worse, {comp['better']} better"
              + "".join(f"\n  {f['verdict'].upper()}: {f['figure']}: {f['summary']}" for f in flagged))


def write(report: dict, out: str) -> None:
    write_outputs(report, out, "compare", markdown, html, default=float)
