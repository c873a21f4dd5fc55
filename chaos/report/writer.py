"""Write report.json and report.md into the run directory, secrets masked (Experiment.mask)."""

from __future__ import annotations

import json
import os
import time

from ..host import HostSummary
from ..records.summary import format_table
from ..rundir.files import REPORT_JSON, REPORT_MD
from .inputs import inputs_markdown
from .sections import diagnosis_markdown, phases_markdown, recovery_markdown, stability_markdown
from .servermetrics import markdown_section as server_metrics_markdown
from .timeline import event_detail


def write_reports(run_dir: str, report: dict, steps: list, mask=None) -> tuple[str, str, str, str | None]:
    """Write report.json, report.md, junit.xml and report.html; returns their paths (report.html's None when it
    could not be drawn: the others stand, and stderr says why).

    mask: a function that returns a copy of a string or JSON-like value with secrets scrubbed (the
    experiment's mask); every file is written from the masked report, and the Markdown, the XML and the page
    are scrubbed again whole, for whatever formatting (or, in the page, the records) brought in."""
    mask = mask or (lambda x: x)
    report = mask(json.loads(json.dumps(report, default=str)))
    growth = next((c["growth"] for c in report.get("checks", []) if c.get("growth")), None)
    if growth is not None:  # verify: latency_growth's per-size table and fit, also at the top for tools
        report["latency_growth"] = growth
    json_path = os.path.join(run_dir, REPORT_JSON)
    with open(json_path, "w") as f:
        json.dump(report, f, indent=2)
    md_path = os.path.join(run_dir, REPORT_MD)
    with open(md_path, "w") as f:
        f.write(mask(markdown(report, steps)))
    from .junit import write_junit

    junit_path = write_junit(run_dir, report, mask)
    try:
        from .html import write_html  # here: plotly costs a run's start-up 0.2 s it would not use until the end

        html_path = write_html(run_dir, report, mask=mask)
    except Exception as e:  # noqa: BLE001 - a drawing bug must not cost the run its verdict and other reports
        import sys
        import traceback

        print(f"warning: report.html not written: {type(e).__name__}: {e}\n"
              f"{''.join(traceback.format_exc(limit=-3))}(report.json and report.md are complete; "
              f"`chaos report {run_dir}` draws it again once fixed)", file=sys.stderr)
        html_path = None
    return json_path, md_path, junit_path, html_path


def host_markdown(host: dict | None) -> list[str]:
    """## The host: over the load and per phase (chaos.host)."""
    lines = ["## The host", ""]
    if not host:
        return lines + ["Not measured (a run recorded before llm-chaos measured it).", ""]
    lines += [f"Others: CPU used by processes outside the run, in cores of this machine's {host.get('ncpu')} (what a "
              "neighbour took; the figure the gate and `report --compare` guard on); run: the run's own processes; "
              "load average; CPU pressure: the share of time some task waited for a CPU. Every second in "
              f"`{host.get('file')}`.", "", "| span | host |", "|---|---|",
              f"| whole load | {HostSummary.from_dict(host.get('load')).text()} |"]
    lines += [f"| {name} | {HostSummary.from_dict(d).text()} |" for name, d in (host.get("phases") or {}).items()]
    return lines + [""]


def _ts(t: float, t0: float) -> str:
    return f"{t - t0:+8.1f}s"


def markdown(r: dict, steps: list) -> str:
    verdict = r["verdict"].upper()
    lines = [f"# {r['experiment']['name']}: {verdict}", ""]
    if r["experiment"].get("description"):
        lines += [r["experiment"]["description"].strip(), ""]
    started = time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(r["started"])) if r.get("started") else "-"
    took = f"{r['duration_s']:.0f}s" if r.get("duration_s") is not None else "-"
    lines += [f"- started {started}, took {took}, exit code {r.get('exit_code')}",
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
    t0 = r.get("load_started") or r["started"]
    lines += [""] + recovery_markdown(r.get("recovery"), t0) + phases_markdown(
        r.get("phases"), (r.get("analysis") or {}).get("goodput"))
    lines += stability_markdown(r.get("stability"))
    lines += ["## Load, per step", "", "```", format_table(steps) if steps else "(no requests recorded)", "```",
              "", "Latency is P50/P95/P99, never the mean; jitter is E2E P99/P50. Errors are split by class.", ""]
    if "server_metrics" in r:
        lines += server_metrics_markdown(r.get("server_metrics"), t0)
    lines += host_markdown(r.get("host"))
    lines += diagnosis_markdown(r.get("diagnosis"), r.get("advice"))
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
    for e in r["timeline"]:
        detail = event_detail(e).replace("|", "\\|")
        lines.append(f"| {_ts(e['t'], t0)} | {e['event']} | {detail} |")
    if r.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in r["notes"]]
    lines += ["", "Files beside this one: `journal.jsonl`, `requests.jsonl` (one record a request), `report.json`, "
                  "`experiment.resolved.json`, Locust's `locust_*.csv` and `locust.html`, replica logs.", ""]
    return "\n".join(lines)
