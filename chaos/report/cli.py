"""`chaos report RUN_DIR` (every format again from the records and the journal) and `chaos report --compare A B`
(two runs compared, figure by figure, with the noise taken into account)."""

from __future__ import annotations

import os
import sys
import time

from ..errors import handled
from ..rundir.files import JUNIT, REPORT_HTML, REPORT_JSON, REPORT_MD

EPILOG = """\
examples:
  chaos report reports/kill-instance-20261204T120000Z
      # report.json, report.md, report.html and junit.xml written again from requests.jsonl and journal.jsonl
  chaos report --compare reports/kill-instance-A reports/kill-instance-B
      # B against A: better / worse / no detectable change per figure, at the stated confidence
  chaos report --compare A B --out reports/compare-upgrade --confidence 0.99

exit codes: 0 written (compare: no figure worse), 1 compare: some figure worse, 2 bad input

Compared, each run's host is shown beside the other's (CPU used by other processes, the run's own, load, CPU
pressure), and where the two differ by more than --host-bound cores a latency change is warned of and not
called: a busy neighbour slows a run as a slower build would.
"""


def register(sub, formatter) -> None:
    p = sub.add_parser("report", help="re-render a run's reports, or compare two runs", formatter_class=formatter,
                       epilog=EPILOG, description="Re-render every report of a run directory from its records and "
                                                  "journal, or compare two runs (Mann-Whitney U on latency, "
                                                  "bootstrap intervals of P50/P95/P99 differences and ratios, "
                                                  "two-proportion tests for error rates).")
    p.add_argument("run_dir", nargs="?", help="a run directory written by `chaos run` (reports/NAME-UTC)")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare run B against run A (the baseline)")
    p.add_argument("--out", help="where --compare writes comparison.{json,md,html} (default "
                                 "reports/compare-A-vs-B-UTC)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence level of intervals and tests")
    p.add_argument("--tolerance", type=float, default=0.10,  # chaos.report.comparison.TOLERANCE, calibrated
                   help="the smallest relative change of latency or throughput that counts (0: pure statistics, "
                        "which flags the few-percent drift between two runs of the same code)")
    p.add_argument("--host-bound", type=float, default=0.25, metavar="CORES",
                   help="compare: cores of CPU by other processes the two runs' hosts may differ by before a latency "
                        "change there is not called (docs/gate.md, the host)")
    p.set_defaults(func=cmd_report)


@handled
def cmd_report(a) -> int:
    if bool(a.run_dir) == bool(a.compare):
        print("error: give a run directory, or --compare A B (not both)", file=sys.stderr)
        return 2
    if not 0 <= a.tolerance < 1:
        print(f"error: --tolerance {a.tolerance}: give a fraction in [0, 1), e.g. 0.1 for 10%", file=sys.stderr)
        return 2
    if not 0.5 <= a.confidence < 1:
        print(f"error: --confidence {a.confidence}: give a level in [0.5, 1), e.g. 0.95", file=sys.stderr)
        return 2
    if a.compare:
        from .comparison import compare_runs

        base, cand = a.compare
        out = a.out or os.path.join("reports", f"compare-{_name(base)}-vs-{_name(cand)}-"
                                               f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        comp = compare_runs(base, cand, out, a.confidence, a.tolerance, a.host_bound)
        worse = [f for f in comp["figures"] if f["verdict"] == "worse"]
        for f in comp["figures"]:
            print(f"  {f['verdict'].upper():<24} {f['figure']}: {f['summary']}")
        if (comp.get("host") or {}).get("differs"):
            print("\nwarning: the host differed between the runs ("
                  + "; ".join(f"{k}: {v}" for k, v in comp["host"]["differs"].items())
                  + "): latency changes there are not called", file=sys.stderr)
        print(f"\n{len(worse)} worse, {sum(f['verdict'] == 'better' for f in comp['figures'])} better, "
              f"{sum(f['verdict'] == 'no detectable change' for f in comp['figures'])} no detectable change "
              f"at {a.confidence:.0%} confidence\ncomparison: {os.path.join(out, 'comparison.md')}")
        return 1 if worse else 0
    from .rerender import rerender

    report = rerender(a.run_dir)
    print(f"{report['experiment']['name']}: {report['verdict'].upper()} ({report.get('requests', 0)} requests)")
    for name in (REPORT_MD, REPORT_HTML, JUNIT, REPORT_JSON):
        path = os.path.join(a.run_dir, name)
        if os.path.exists(path):
            print(f"  {path}")
    return 0


def _name(path: str) -> str:
    return os.path.basename(os.path.normpath(path))[:40]
