"""`chaos sweep TARGET`: the seed's concurrency gradient (10, 50, 100, 200, 500, each held), one table of
P50/P95/P99 TTFT and E2E with intervals, the error rate, jitter P99/P50 and throughput per step."""

from __future__ import annotations

import os

from ..records import read_records
from ..report.page import Page, esc
from .reach import reached
from .figures import level_figures
from .loadrun import Send, replicas, run_levels, step_name
from .planplots import latency_vs_level
from .tables import LEVEL_HEADERS, level_cells, markdown_table, write_outputs


def sweep(target: str, variables: dict, send: Send, levels: list, hold: float, out: str, open_loop: bool = False,
          progress=print) -> dict:
    """Reach the target, run the gradient as one stepped load, and write sweep.json/.md/.html beside the load's
    requests.jsonl. Returns the report dict."""
    os.makedirs(out, exist_ok=True)
    with reached(target, variables, os.path.join(out, "target"), progress, send.api_key_env) as r:
        progress(f"sweep: {len(levels)} step(s) of {hold:g} s against {r.name}")
        result = run_levels(r, send, levels, hold, out, open_loop, progress)
        name, n_replicas = r.name, replicas(r)
    records = read_records(result.records_path)
    by_step: dict = {}
    for rec in records:
        by_step.setdefault(rec.step, []).append(rec)
    rows = []
    for level in levels:
        label = step_name(level, open_loop)
        rows.append({"level": level, "step": label,
                     **level_figures(by_step.get(label, []), open_loop, hold)})
    report = {"command": "sweep", "target": target, "name": name, "model": result.model, "replicas": n_replicas,
              "unit": "arrivals/s" if open_loop else "concurrency", "hold_s": hold,
              "send": {"workload": send.workload, "input_tokens": send.input_tokens,
                       "output_tokens": send.output_tokens, "seed": send.seed,
                       "timeout_s": send.timeout_total, "timeout_first_token_s": send.timeout_first_token},
              "token_counts": "exact" if result.tokenizer == "byte" else "estimate",
              "interrupted": result.interrupted, "notes": list(result.notes), "levels": rows,
              "requests": os.path.abspath(result.records_path)}
    write(report, out)
    return report


def table_rows(report: dict) -> list[list[str]]:
    return [level_cells(row["step"], row) for row in report["levels"]]


def markdown(report: dict) -> str:
    lines = [f"# Sweep: {report['name']}", "",
             f"- target `{report['target']}`, model `{report['model']}`, {report['replicas']} replica(s)",
             f"- workload {report['send']['workload']} (seed {report['send']['seed']}), each step held "
             f"{report['hold_s']:g} s; token counts {report['token_counts']}",
             "- every figure with its 95% interval and n: latency order-statistic, errors Wilson, jitter (E2E "
             "P99/P50) bootstrap, req/s Poisson; a percentile without enough requests for an interval says how "
             "many it needs", ""]
    lines += markdown_table(LEVEL_HEADERS, table_rows(report))
    lines += [""] + [f"- note: {n}" for n in report["notes"]] + ["", f"records: `{report['requests']}`", ""]
    return "\n".join(lines)


def html(report: dict) -> str:
    page = Page(f"Sweep: {report['name']}")
    page.add(f"<h1>Sweep: {esc(report['name'])}</h1>")
    page.add(f'<p class="meta">target <b>{esc(report["target"])}</b>, model <b>{esc(report["model"])}'
             f'</b>, {report["replicas"]} replica(s), workload {esc(report["send"]["workload"])}, each step '
             f'held {report["hold_s"]:g} s</p>')
    page.figure(latency_vs_level(report["levels"], report["unit"]))
    page.h2("Per step")
    page.table(LEVEL_HEADERS, table_rows(report))
    for n in report["notes"]:
        page.note(n)
    return page.render()


def write(report: dict, out: str) -> None:
    write_outputs(report, out, "sweep", markdown, html)
