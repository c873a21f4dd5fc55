"""`chaos gate`: the pre-upgrade validation gate."""

from __future__ import annotations

import os
import signal
import sys
import time

from ..errors import InputError, counts_as, handled
from ..host import DEFAULT_BOUND

EPILOG = """examples:
  # interleaved (the default where both builds can run here): 7 pairs, each pair's order a b or b a by a coin
  chaos gate --baseline-target targets/reference.yaml --candidate targets/builds/no-retries.yaml gates/upgrade.yaml
  # sequential: pairs until every figure is worse or shown within the tolerance, at most 20
  chaos gate --baseline-target targets/reference.yaml --candidate targets/new.yaml gates/upgrade.yaml --max-pairs 20
  # the A/A control: the baseline against itself, to learn what this runner's noise lets the gate see
  chaos gate --aa --baseline-target targets/reference.yaml gates/upgrade.yaml
  # against recorded runs (a game day's, a gate's or one run's directory): only the candidate runs now
  chaos gate --baseline gamedays/nightly/20261204T030000Z --candidate targets/new.yaml gates/upgrade.yaml
  # a finished gate judged again with a wider tolerance and host bound, running nothing
  chaos gate --rejudge reports/gate-upgrade-20261207T030000Z --tolerance 0.2 --host-bound 0.4
  # one experiment is a suite of one; short runs for a quick check
  chaos gate --baseline-target targets/reference.yaml --candidate targets/builds/slower-steps.yaml \\
      experiments/kill-instance.yaml --var PRESET=tiny --percentiles 50,95

Every figure of every experiment is compared: E2E and TTFT percentiles and the error rate in each phase (the
steady state, each fault's window, after recovery), and per fault the time to detect, fail over and restore and
the failed requests. Interleaved, the runs come in pairs whose order a coin draws, and each figure is judged on
its pairs' changes: changed at all (paired t, every figure corrected together by Holm: a no-change upgrade fails
at most 1 time in 20) and by more than --tolerance and the floors (a sign-flip randomization test, which needs 5
pairs). A neighbour that comes and goes lands on either build as the coins fell: noise, not a regression.

The host is measured in every run. A pair whose two runs saw a different host (CPU used by other processes
apart by more than --host-bound cores) is left out of the latency and recovery-time figures; failures a slow
host can cause (timeouts, 408, 504) are set aside there too. Where too few pairs are left, the gate exits 4 and
names the runs, instead of calling the neighbour a regression.

Writes gate.json, gate.md (fit for a pull-request comment), junit.xml and every run under runs/.
Exit codes: 0 pass, 1 regression the host cannot explain (each regressed figure named with its interval),
2 setup error, 4 inconclusive (the host differed, or too few pairs or samples: it says what to do),
130 interrupted. docs/gate.md."""


def register(sub, formatter) -> None:
    p = sub.add_parser("gate", help="pre-upgrade gate: a candidate build against the baseline, under faults",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Run a suite against the candidate target and compare it with the baseline, "
                                   "figure by figure, under the faults as well as in the steady state.")
    p.add_argument("suite", nargs="?", help="a suite file (chaos gameday's format) or one experiment file (none "
                                            "with --rejudge)")
    p.add_argument("--candidate", metavar="TARGET", help="the candidate's target file")
    p.add_argument("--aa", action="store_true",
                   help="A/A control: the candidate is the baseline itself (needs --baseline-target); a regression "
                        "then is a false alarm of this environment, and gate.md says what change it can see")
    b = p.add_mutually_exclusive_group()
    b.add_argument("--baseline-target", metavar="TARGET",
                   help="the baseline's target file: runs both, in pairs (recommended)")
    b.add_argument("--baseline", metavar="DIR", help="recorded baseline runs: a game day's, a gate's or a run's "
                                                     "directory")
    b.add_argument("--rejudge", metavar="GATE_DIR",
                   help="judge a finished gate's runs again with the settings given here (tolerance, floors, "
                        "host bound, percentiles, confidence; the defaults unless set), running nothing; writes "
                        "into --out (default GATE_DIR/rejudged-UTCTIME)")
    p.add_argument("--pairs", "--repeat", dest="pairs", type=int, default=7,
                   help="pairs of runs of each experiment (recorded baseline: candidate runs); 5 or more to "
                        "judge at 95%%")
    p.add_argument("--max-pairs", type=int, metavar="N",
                   help="sequential: run pairs until every figure is decided (worse, or within the tolerance), "
                        "looking at 5, 7, 10, 14 ... pairs, at most N; the looks share the error (docs/gate.md)")
    p.add_argument("--power", type=float, default=0.8,
                   help="with --max-pairs: the chance that a change of exactly the tolerance is not decided "
                        "'within the tolerance' (1 - power bounds that error)")
    p.add_argument("--seed", type=int, help="the coins of the pairs' orders (default: drawn, and written in "
                                           "gate.json to run the same order again)")
    p.add_argument("--host-bound", type=float, default=DEFAULT_BOUND, metavar="CORES",
                   help="cores of CPU by other processes two compared runs may differ by")
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


def _settings(a):
    from .figures import GateSettings

    qs = tuple(float(x) for x in a.percentiles.split(",") if x.strip())
    return GateSettings(a.confidence, a.tolerance, a.floor, a.recovery_floor, a.error_tolerance, qs, a.host_bound)


def _rejudge(a) -> int:
    from .gate import rejudge
    from .verdict import GateError

    out = a.out or os.path.join(a.rejudge, f"rejudged-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
    if a.suite or a.candidate or a.aa:
        raise GateError("--rejudge reads the suite, the builds and the pairs from the gate's own gate.json: "
                        "leave SUITE, --candidate and --aa out")
    with counts_as(InputError, ValueError):  # --percentiles, and a gate.json of numbers that are not
        doc = rejudge(a.rejudge, _settings(a), out)
    print(open(os.path.join(out, "gate.md")).read().split("<details>")[0].rstrip())
    print(f"\ngate: {os.path.join(out, 'gate.md')} (and gate.json, junit.xml)")
    return doc["exit_code"]


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


@handled
def cmd_gate(a) -> int:
    from ..experiment.variables import cli_vars
    from ..suite.model import load_plan
    from .gate import Plan, run_gate
    from .recorded import check_recorded, recorded_runs
    from .verdict import GateError

    if a.rejudge:
        return _rejudge(a)
    with counts_as(InputError, ValueError):
        if not a.suite or not (a.baseline_target or a.baseline):
            raise GateError("give a SUITE and --baseline-target FILE (pairs) or --baseline DIR (recorded runs); "
                            "or --rejudge GATE_DIR")
        if a.aa:
            if not a.baseline_target:
                raise GateError("--aa runs the baseline against itself: give --baseline-target FILE")
            if a.candidate and a.candidate != a.baseline_target:
                raise GateError("--aa compares the baseline with itself: leave --candidate out")
            a.candidate = a.baseline_target
        elif not a.candidate:
            raise GateError("give --candidate TARGET (or --aa, to run the baseline against itself)")
        variables = cli_vars(a.var)
        settings = _settings(a)
        suite = load_plan(a.suite, variables, target=a.candidate)
        if a.baseline_target:
            load_plan(a.suite, variables, target=a.baseline_target)  # both builds must run every experiment
        kind = "aa" if a.aa else "gate"
        out = a.out or os.path.join("reports", f"{kind}-{suite.name}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}")
        design = None
        if a.max_pairs is not None:
            from .sequential import Design

            if not 0.5 < a.power < 1:
                raise GateError(f"--power {a.power}: a chance between 0.5 and 1 (0.8: 80 %)")
            design = Design.plan(a.confidence, a.max_pairs, a.power)
        recorded = recorded_runs(a.baseline, suite) if a.baseline else {}
        if recorded:
            check_recorded(recorded, suite, a.candidate)
        plan = Plan(suite, out, a.candidate, a.baseline_target, recorded, a.pairs, a.seed, a.aa, design)
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
