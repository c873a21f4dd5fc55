"""Write report.json and report.md into the run directory, secrets masked (Experiment.mask)."""

from __future__ import annotations

import json
import os
import time

from ..records.summary import format_table
from .inputs import inputs_markdown


def write_reports(run_dir: str, report: dict, steps: list, mask=None) -> tuple[str, str]:
    """mask: a function that returns a copy of a string or JSON-like value with secrets scrubbed (the
    experiment's mask); both files are written from the masked report, and the Markdown is scrubbed again
    whole, for whatever the table formatting brought in."""
    mask = mask or (lambda x: x)
    report = mask(json.loads(json.dumps(report, default=str)))
    growth = next((c["growth"] for c in report.get("checks", []) if c.get("growth")), None)
    if growth is not None:  # verify: latency_growth's per-size table and fit, also at the top for tools
        report["latency_growth"] = growth
    json_path = os.path.join(run_dir, "report.json")
    with open(json_path, "w") as f:
        json.dump(report, f, indent=2)
    md_path = os.path.join(run_dir, "report.md")
    with open(md_path, "w") as f:
        f.write(mask(markdown(report, steps)))
    return json_path, md_path


def _ts(t: float, t0: float) -> str:
    return f"{t - t0:+8.1f}s"


def markdown(r: dict, steps: list) -> str:
    verdict = r["verdict"].upper()
    lines = [f"# {r['experiment']['name']}: {verdict}", ""]
    if r["experiment"].get("description"):
        lines += [r["experiment"]["description"].strip(), ""]
    lines += [f"- started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(r['started']))}, "
              f"took {r['duration_s']:.0f}s, exit code {r['exit_code']}",
              f"- target: {r['target'].get('kind')} `{r['target'].get('name')}`, model `{r['target'].get('model')}`, "
              f"{len(r['target'].get('instances', []))} instance(s)"]
    if r.get("reason"):
        lines.append(f"- **{r['reason']}**")
    lines += ["", "## Checks", "", "| check | result | measured | required | detail |", "|---|---|---|---|---|"]
    for c in r["checks"]:
        result = {"passed": "pass", "not_judged": "not judged"}.get(
            c.get("status") or ("passed" if c["passed"] else "failed"), "**FAIL**")
        lines.append(f"| {c['name']} | {result} | {c['measured']} | "
                     f"{c['threshold']} | {c['detail']} |")
    if not r["checks"]:
        lines.append("| (none ran) | | | | |")
    for c in r["checks"]:
        if c.get("growth"):  # verify: latency_growth carries its per-size table and fit
            from ..verify.growth import markdown as growth_markdown

            lines += [""] + growth_markdown(c["growth"])[:-1]
    lines += ["", "## Load, per step", "", "```", format_table(steps) if steps else "(no requests recorded)", "```",
              "", "Latency is P50/P95/P99, never the mean; jitter is E2E P99/P50. Errors are split by class.", ""]
    lines += inputs_markdown(r.get("inputs") or [])  # each section ends with a blank line
    lines += ["## Faults", ""]
    for f in r["faults"]:
        state = "applied" if f["applied"] else "not applied"
        if f["applied"]:
            state += f" at {f['applied_at'] - r['load_started']:.1f}s" if f.get("applied_at") and r.get(
                "load_started") else ""
            state += ", reverted" if f["reverted"] else ", NOT reverted"
        for what in ("apply_error", "revert_error"):
            if f.get(what):
                state += f"; {what.split('_')[0]} error: {f[what]}"
        lines.append(f"- `{f['name']}`: {f['description']} ({state})")
    if not r["faults"]:
        lines.append("- none")
    lines += ["", "## Timeline", "", "| time | event | detail |", "|---|---|---|"]
    t0 = r.get("load_started") or r["started"]
    for e in r["timeline"]:
        detail = ", ".join(f"{k}={v}" for k, v in e.items() if k not in ("t", "event") and not isinstance(v, (dict, list)))
        lines.append(f"| {_ts(e['t'], t0)} | {e['event']} | {detail[:160]} |")
    if r.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    lines += ["", "Files beside this one: `journal.jsonl`, `requests.jsonl` (one record a request), `report.json`, "
                  "`experiment.resolved.json`, Locust's `locust_*.csv` and `locust.html`, replica logs.", ""]
    return "\n".join(lines)
