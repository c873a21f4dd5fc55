"""`chaos gate`: the pre-upgrade validation gate."""

from __future__ import annotations

import os
import signal
import sys
import time

EPILOG = """examples:
  # interleaved (the default where both builds can run here): baseline and candidate in turn, a b b a a b
  chaos gate --baseline-target targets/reference.yaml --candidate targets/builds/no-retries.yaml \\
      gates/upgrade.yaml --repeat 3
  # against recorded runs (a game day's, a gate's or one run's directory): only the candidate runs now
  chaos gate --baseline gamedays/nightly/20261204T030000Z --candidate targets/new.yaml gates/upgrade.yaml
  # one experiment is a suite of one; short runs for a quick check
  chaos gate --baseline-target targets/reference.yaml --candidate targets/builds/slower-steps.yaml \\
      experiments/kill-instance.yaml --var PRESET=tiny --percentiles 50,95

Every figure of every experiment is compared: E2E and TTFT percentiles and the error rate in each phase (the
steady state, each fault's window, after recovery), and per fault the time to detect, fail over and restore and
the failed requests. A figure regresses only when it got worse beyond --tolerance (and the floors) AND beyond the
noise at --confidence, all figures corrected together (Holm): a no-change upgrade fails at most 1 time in 20.

Writes gate.json, gate.md (fit for a pull-request comment), junit.xml and every run under runs/.
Exit codes: 0 pass, 1 regression (each regressed figure named with its interval), 2 setup error,
4 inconclusive (too few samples: it says how many runs a side it needs), 130 interrupted. docs/gate.md."""


def register(sub, formatter) -> None:
    p = sub.add_parser("gate", help="pre-upgrade gate: a candidate build against the baseline, under faults",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Run a suite against the candidate target and compare it with the baseline, "
                                   "figure by figure, under the faults as well as in the steady state.")
    p.add_argument("suite", help="a suite file (chaos gameday's format) or one experiment file")
    p.add_argument("--candidate", required=True, metavar="TARGET", help="the candidate's target file")
    b = p.add_mutually_exclusive_group(required=True)
    b.add_argument("--baseline-target", metavar="TARGET",
                   help="the baseline's target file: runs both, interleaved (recommended)")
    b.add_argument("--baseline", metavar="DIR", help="recorded baseline runs: a game day's, a gate's or a run's "
                                                     "directory")
    p.add_argument("--repeat", type=int, default=3, help="runs a side of each experiment")
    p.add_argument("--tolerance", type=float, default=0.10, help="the smallest relative change that counts")
    p.add_argument("--floor", type=float, default=0.005, metavar="SECONDS",
                   help="the smallest latency change that counts, whatever the tolerance")
    p.add_argument("--recovery-floor", type=float, default=0.5, metavar="SECONDS",
                   help="the smallest change of a recovery time that counts")
    p.add_argument("--error-tolerance", type=float, default=0.01,
                   help="the smallest change of an error rate that counts (absolute: 0.01 = 1 point)")
    p.add_argument("--percentiles", default="50,95,99", help="latency percentiles compared")
    p.add_argument("--confidence", type=float, default=0.95)
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="--var for every run")
    p.add_argument("--out", help="the gate's directory (default reports/gate-SUITE-UTCTIME)")
    p.set_defaults(func=cmd_gate)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def cmd_gate(a) -> int:
    from ..experiment.loader import ExperimentError
    from ..run.cli import _problems, _vars
    from ..suite.model import load_plan
    from .figures import Settings
    from .gate import GateError, Plan, recorded_runs, run_gate

    try:
        variables = _vars(a.var)
        qs = tuple(float(x) for x in a.percentiles.split(",") if x.strip())
        settings = Settings(a.confidence, a.tolerance, a.floor, a.recovery_floor, a.error_tolerance, qs)
        suite = load_plan(a.suite, variables, target=a.candidate)
        if a.baseline_target:
            load_plan(a.suite, variables, target=a.baseline_target)  # both builds must run every experiment
        out = a.out or os.path.join("reports", f"gate-{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        plan = Plan(suite, out, a.candidate, a.baseline_target,
                    recorded_runs(a.baseline, suite) if a.baseline else {}, a.repeat)
    except ExperimentError as e:
        return _problems(e)
    except (GateError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        doc = run_gate(plan, settings, progress=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        print(f"interrupted: what ran is in {os.path.join(out, 'gate.json')}", file=sys.stderr)
        return 130
    print()
    print(open(os.path.join(out, "gate.md")).read().split("<details>")[0].rstrip())
    print(f"\ngate: {os.path.join(out, 'gate.md')} (and gate.json, junit.xml)")
    return doc["exit_code"]
