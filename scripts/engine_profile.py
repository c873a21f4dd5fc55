#!/usr/bin/env python3
"""The resilience profile table of docs/engines.md, from the runs that measured it.

    python scripts/engine_profile.py gamedays/llama-cpp gamedays/nginx-llama-cpp ...   # game-day folders
    python scripts/engine_profile.py reports/replica-kill-*                           # or single runs

Each run directory (one with report.json; a game-day folder is searched for them) gives one row: the target, the
experiment, its verdict, what clients saw fail (by class and status), the recovery figures and the E2E P99 of the
steady state and of the fault's window with their 95 % intervals. Several runs of one experiment against one
target are one row: each recovery figure as the median and [lowest-highest] of the runs, with their count.
Reads only report.json and requests.jsonl; writes nothing.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
from collections import Counter, defaultdict

FIGURES = (("time_to_detect", "detect"), ("time_to_failover", "failover"), ("time_to_restore", "restore"))


def run_dirs(paths: list[str]) -> list[str]:
    found = []
    for p in paths:
        for root, dirs, files in os.walk(p, followlinks=True):
            dirs.sort()
            if "report.json" in files:
                found.append(root)
                dirs.clear()
    return found


def seconds(v: float | None) -> str:
    if v is None:
        return "never"
    return f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s"


def said(key: str, fig: dict) -> str:
    """One run's figure; where there is none, why (evidence says it)."""
    if fig.get("value") is not None:
        return seconds(fig["value"])
    if key == "time_to_detect":
        return "none seen"
    back = re.search(r"served again ([0-9.]+) s after the fault", fig.get("evidence") or "")
    return f"never (back at {float(back.group(1)):.2f} s, throughput lower)" if back \
        else "never"


def percentile(fig: dict | None) -> str:
    if not fig or fig.get("value") is None:
        return "-"
    text = seconds(fig["value"])
    if fig.get("low") is not None and fig.get("high") is not None:
        text += f" [{seconds(fig['low'])}-{seconds(fig['high'])}]"
    return text + f" n={fig.get('n', 0)}"


def failures(run: str) -> tuple[int, Counter]:
    """(requests, the failures by class and status)."""
    total, bad = 0, Counter()
    path = os.path.join(run, "requests.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                total += 1
                if r["outcome"] != "ok":
                    bad[r["outcome"] + (f" {r['status']}" if r.get("status") else "")] += 1
    return total, bad


def row(runs: list[str]) -> dict:
    reports = [json.load(open(os.path.join(r, "report.json"))) for r in runs]
    last = reports[-1]
    out = {"target": last["target"]["name"], "experiment": last["experiment"]["name"],
           "verdicts": Counter(r["verdict"] for r in reports), "runs": len(runs)}
    counted = [failures(r) for r in runs]
    bad = sum((c[1] for c in counted), Counter())
    out["requests"] = sum(c[0] for c in counted)
    out["failed"] = sum(bad.values())
    out["failures"] = ", ".join(f"{n} × {k}" for k, n in bad.most_common(3)) + (", ..." if len(bad) > 3 else "")
    faulted = [r for r in reports if (r.get("recovery") or {}).get("faults")]
    for key, name in FIGURES:
        figs = [r["recovery"]["run"].get(key) or {} for r in faulted]
        values = [f.get("value") for f in figs]
        if not values:
            out[name] = "-"
        elif len(values) == 1 or None in values:
            out[name] = " / ".join(said(key, f) for f in figs)
        else:
            out[name] = f"{seconds(statistics.median(values))} [{seconds(min(values))}-{seconds(max(values))}]"
        if values and len(faulted) < len(reports):
            out[name] += f" ({len(faulted)} of {len(reports)} runs reached the fault)"
    phases = {p["kind"]: p for p in last.get("phases") or []}
    out["steady_p99"] = percentile((phases.get("steady") or phases.get("run") or {}).get("e2e", {}).get("p99"))
    out["fault_p99"] = percentile((phases.get("fault") or {}).get("e2e", {}).get("p99"))
    if last.get("reason"):
        out["reason"] = last["reason"]
    return out


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for run in run_dirs(argv):
        rep = json.load(open(os.path.join(run, "report.json")))
        groups[(rep["target"]["name"], rep["experiment"]["name"])].append(run)
    if not groups:
        print(f"no run directory (one with report.json) under {' '.join(argv)}", file=sys.stderr)
        return 2
    print("| target | experiment | runs: verdict | requests | failed: most common | detect | failover | restore "
          "| E2E P99 steady | E2E P99 in the fault |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (target, exp), runs in sorted(groups.items()):
        r = row(sorted(runs))
        verdicts = ", ".join(f"{n} {v}" for v, n in r["verdicts"].items())
        print(f"| {target} | {exp} | {verdicts} | {r['requests']} | {r['failed']}"
              f"{': ' + r['failures'] if r['failures'] else ''} | {r['detect']} | {r['failover']} | {r['restore']} "
              f"| {r['steady_p99']} | {r['fault_p99']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
