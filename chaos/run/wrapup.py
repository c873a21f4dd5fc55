"""The end of a run, after the rollback: judge it, write report.json / report.md, keep each instance's /metrics,
and stop whatever of the run is still alive."""

from __future__ import annotations

import os
import time
import urllib.request

import psutil

from ..host import DEFAULT_BOUND, host_report, load_summary
from ..records.labels import label_records
from ..records import read_records
from ..records.summary import summarize, summarize_steps
from ..report.servermetrics import summarize_metrics
from ..report.writer import write_reports
from ..rundir.files import JOURNAL, METRICS_FILE, REQUESTS
from ..verify import checks as V
from ..verify.evidence import REPORT_VERSION, analyse, settings_for
from ..verify.stability import fault_phases, stability_report
from ..verify.verdict import RunFacts, run_checks
from ..rundir.journal import Event, read_journal
from ..rundir.procs import kill_processes, marked


EXIT_PASSED, EXIT_FAILED, EXIT_INVALID, EXIT_ABORTED, EXIT_NOT_JUDGED, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130
VERDICTS = {EXIT_PASSED: "passed", EXIT_FAILED: "failed", EXIT_ABORTED: "aborted", EXIT_NOT_JUDGED: "inconclusive",
            EXIT_INTERRUPTED: "interrupted"}
COUNTERS = ("vllm:num_preemptions_total", "vllm:prefix_cache_hits_total", "gateway:retries_total")


def finish(run, code: int | None) -> int:
    """Judge the run (when it got to the end, or failed its steady-state gate), write its reports and return
    the exit code. run is the Runner."""
    records = read_records(os.path.join(run.run_dir, REQUESTS))
    _label(run, records)
    if run.load is not None:
        run.load.input_facts(records)  # the scrub report, filtered lines, failed source lines: into the notes
        run.load.fleet_facts(records)  # workers: their clocks' offsets, and any the master lost
        acc = run.load.replay
        if acc is not None and not acc.get("lag"):  # the send lag of the replayed requests, for the replay check
            acc["lag"] = summarize([r for r in records if r.source_line is not None], "replay", True).lag or None
    checks = []
    if code is None or code == EXIT_FAILED and run.gate is not None and not run.gate[0]:
        facts = RunFacts(gate=run.gate, faults=run.faults, target=run.target, final_health=run.final_health,
                         load_t0=run.load_t0, up_since=run.up_since)
        checks = run_checks(run.exp, records, facts)
        lost = _replay_check(run)
        if lost is not None:
            checks.append(lost)
        if code is None:
            code = {"passed": EXIT_PASSED, "failed": EXIT_FAILED,
                    "not_judged": EXIT_NOT_JUDGED}[V.verdict_of(checks)]
    verdict = VERDICTS.get(code, "error")
    unjudged = [c for c in checks if c.passed is None]
    if unjudged and code == EXIT_NOT_JUDGED:
        run.reason = "nothing failed, but the run could not judge: " + "; ".join(c.name for c in unjudged)
    for c in unjudged:  # also in the notes, which every report format shows
        run.notes.append(f"not judged: {c.name}: {c.detail.removeprefix('not judged: ')}")
    plan = run.load.cfg.plan if run.load else None
    steps = summarize_steps(records, [s.name for s in plan.stages], plan.open_loop,
                            {s.name: s.duration for s in plan.stages}) if plan else []
    exp = run.exp
    report = {
        "report_version": REPORT_VERSION,
        "experiment": {"name": exp.name, "description": exp.description, "file": exp.path},
        "verdict": verdict, "exit_code": code, "reason": run.reason, "started": run.started,
        "duration_s": time.monotonic() - run.started_m, "load_started": run.load_t0,
        "target": run.target.describe() if run.target else {"kind": exp.target.kind, "name": exp.target.name},
        "checks": [c.to_dict() for c in checks],
        "steps": [s.to_dict() for s in steps],
        "faults": [{"name": f.spec.name, "type": f.type, "description": f.describe(), "applied": f.applied,
                    "reverted": f.reverted, "applied_at": getattr(f, "applied_at", None),
                    "reverted_at": getattr(f, "reverted_at", None), "apply_error": f.apply_error,
                    "revert_error": f.revert_error}
                   for f in run.faults],
        "notes": run.notes + (run.load.notes if run.load else []),
        "inputs": [f.results() for f in run.faults if getattr(f, "family", None) == "input" and f.applied],
        "requests": len(records),
        # what sized the prompts: "byte" counts exactly what the reference server counts; "estimate" (a vendor)
        # is ~4 bytes a token, and each record's input_tokens_source says so too
        "load": {"model": run.load.model, "tokenizer": run.load.tokenizer,
                 "token_counts": "exact" if run.load.tokenizer == "byte" else "estimate"} if run.load else None,
    }
    run.journal.write(Event.RUN_FINISHED, verdict=verdict, exit_code=code)
    try:  # read once, run_finished included
        report["timeline"] = read_journal(os.path.join(run.run_dir, JOURNAL))
    except FileNotFoundError:
        report["timeline"] = []
    _evidence(run, report, records, bool(plan and plan.open_loop))
    report["host"] = host_report(run.run_dir, report)
    busy = load_summary(report)
    if busy is not None and busy.others is not None and busy.others > DEFAULT_BOUND:
        report["notes"].append(f"the host was shared: processes outside the run used {busy.others:.2f} cores on "
                               f"average during the load (at most {busy.others_max:.2f} in a second, of "
                               f"{busy.ncpu}): latency here includes a neighbour's share (see the host section)")
    report = run.public(report)
    write_reports(run.run_dir, report, steps, mask=run.public)  # the Markdown is scrubbed again, whole
    run.journal.close()
    run.report = report
    return code


def _evidence(run, report: dict, records: list, open_loop: bool) -> None:
    """The server's metrics over time, output stability, the phases with their intervals, the recovery figures,
    the diagnosis. A report is always written: a defect here costs these sections (said in the notes), never the
    report or the verdict."""
    exp = run.exp
    try:
        report["server_metrics"] = summarize_metrics(os.path.join(run.run_dir, METRICS_FILE),
                                                     getattr(exp, "metrics_interval", None) or None)
        load_end = max((r.t_end or r.t_start for r in records), default=None)
        report["stability"] = stability_report(records, exp.verify.stability, fault_phases(run.faults, load_end))
        settings = settings_for(exp, run.load_t0, load_end, open_loop)
        report.update(analyse(records, report["timeline"], settings, report["steps"], report.get("server_metrics"),
                              report.get("stability")))
    except Exception as e:  # noqa: BLE001 - see the docstring
        report["notes"].append(f"the evidence sections could not be computed ({type(e).__name__}: {e}); "
                               f"`chaos report {run.run_dir}` tries again from the files")
        report.setdefault("report_version", REPORT_VERSION)


def _replay_check(run):
    """A timed replay owes every request of its window: one it did not send fails the run, whatever else held
    (the requests it lost are exactly the ones no other check could see)."""
    acc = getattr(run.load, "replay", None) if run.load else None
    if not acc:
        return None
    window, lost = acc.get("window", 0), acc.get("not_sent", 0)
    why = ", ".join(f"{k} {v}" for k, v in (acc.get("not_sent_by_reason") or {}).items())
    skipped = (f"; unreadable lines skipped: {acc['skipped']} (lines {', '.join(map(str, acc['skipped_lines']))})"
               if acc.get("skipped") else "") + (f"; filtered: {acc['filtered']}" if acc.get("filtered") else "")
    return V.Check("replay sent every request of the log", lost == 0, f"{window - lost} of {window} sent",
                   "all", (f"not sent: {lost} ({why}); the first not sent: line {acc.get('first_not_sent')}"
                           if lost else f"lag P99 {V.fmt_s((acc.get('lag') or {}).get('p99'))}") + skipped)


def _label(run, records: list) -> None:
    """Requests an LLM proxy closed, reset or held got no x-chaos-fault header; its log names them by request id.
    Labelled records are written back, so requests.jsonl says what each fault did to each request."""
    links = getattr(run.target, "links", None)
    if links is None or not records or not label_records(records, links.llm_log_paths()):
        return
    path = os.path.join(run.run_dir, REQUESTS)
    with open(path + ".tmp", "w") as f:
        f.writelines(r.to_json() + "\n" for r in records)
    os.replace(path + ".tmp", path)


def save_metrics(target, run_dir: str) -> list[str]:
    """Keep each instance's /metrics as the run ends (metrics-ID.txt); returns notes on the counters that explain
    what the engine did under the faults."""
    notes = []
    for inst in target.all_instances():
        if inst.metrics_url is None:
            continue
        try:
            req = urllib.request.Request(inst.metrics_url, headers=inst.metrics_headers())
            with urllib.request.urlopen(req, timeout=2) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            continue
        with open(os.path.join(run_dir, f"metrics-{inst.id}.txt"), "w") as f:
            f.write(text)
        found = {}
        for line in text.splitlines():
            for name in COUNTERS:
                if line.startswith(name):
                    key = name.split(":")[1]
                    found[key] = found.get(key, 0) + float(line.rsplit(" ", 1)[1])
        if any(found.values()):
            notes.append(f"{inst.id} at the end: " + ", ".join(f"{k} {v:g}" for k, v in found.items()))
    return notes


def reap_orphans(run_id: str) -> list[int]:
    """Anything still descending from us, or carrying this run's mark, was started by this run: SIGKILL it.
    Returns their pids."""
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        kids = []
    seen = {p.pid for p in kids}
    kids += [p for p in marked(run_id) if p.pid not in seen]
    kill_processes(kids)
    return [p.pid for p in kids]
