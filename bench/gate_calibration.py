"""Calibration of the pre-upgrade gate (`chaos gate`, docs/gate.md) on this machine, with real gates, quiet and
beside a neighbour that comes and goes: false alarms of no-change (A/A) gates, and each real build caught by the
figure made for it, with the pairs each decision took (BENCHMARKS.md §15 and §23).

What it runs
------------
Every gate is the real command, at the gate's defaults but for the shape given here:

    chaos gate --baseline-target targets/reference.yaml --candidate CANDIDATE gates/upgrade.yaml \\
        --pairs P | --max-pairs M  --var PRESET=tiny-long --var LOAD_FOR=16s --var FAULT_AT=4s \\
        --var FLAKY_AT=11s --var FLAKY_FOR=3s

gates/upgrade.yaml runs experiments/upgrade-check.yaml: a load that shares a 1,000-token system prompt, r1
SIGKILLed and restarted, then r0 answering one request in five with HTTP 500 for a while.

* no change (A/A): CANDIDATE = targets/reference.yaml itself, --pairs P (fixed). Aim: exit 1 in at most 5 % of
  gates (the count and its exact 95 % interval are printed); exits 4 (the host differed) are counted apart.
* the builds of targets/builds/, each a real change of the bundled server, --max-pairs M (sequential: pairs until
  every figure is decided; 0 for a fixed --pairs P): prefix caching off, every engine step 1.5x slower, the
  gateway's retries off, 0.5 % of steps stalling 300 ms, each request's pace spread (sigma 0.5), 0.5 % of prompts
  failing. For each: caught or not, whether a figure made for that change flagged it (a tail percentile or the
  tail share for stalls and spread, the exact sparse-count test for rare errors), the pairs it took. Rare errors
  run 40 s a run: the exact test needs ~2,000 candidate requests at 0.5 % (docs/gate.md).

--adversary: the issue's case at its worst: a neighbour (one core) on exactly while one of the candidate's runs
is, never during the baseline's. No order can spread that over both sides; only the host guard can tell it from
the build. Each such gate is judged again with the guard off (--host-bound 64) to show what it would have said.

--neighbour: beside each gate, `chaos selftest neighbour --cores 1` switched on and off at moments drawn from
a seed of its own (each period 15-90 s), as a CI runner's other jobs come and go. Without it: as quiet as the
box is ("other cores", the CPU everything but the gate used, is printed beside each gate).

Usage: python bench/gate_calibration.py [--aa 20] [--pairs 7] [--max-pairs 10] [--builds all | NAME,... | none]
       [--neighbour] [--quick] [--seed 0]
       python bench/gate_calibration.py --rejudge bench/results/gate/STAMP   # the same runs, judged again
       python bench/gate_calibration.py --rejudge bench/results/gate/STAMP --host-bound 64   # the guard off
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import time

import psutil

from chaos.selftest.neighbour import Neighbour
from chaos.verify import compare as C

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEIGHBOUR_SEED = 7_000_003
TAILS = ("p95", "p99", "share beyond")  # the figures made for a tail or a spread: percentiles, the tail share
# name: (file, what a figure made for that change has in its name, the runs' shape where it is not the default)
BUILDS = {"prefix caching off": ("targets/builds/no-prefix-caching.yaml", ("TTFT",), {}),
          "steps 1.5x slower": ("targets/builds/slower-steps.yaml", ("E2E",), {}),
          "gateway retries off": ("targets/builds/no-retries.yaml", ("error rate", "failed requests"), {}),
          "stalls": ("targets/builds/stalls.yaml", TAILS, {}),
          "pace spread": ("targets/builds/pace-spread.yaml", TAILS + ("ITL spread",), {}),
          "rare errors": ("targets/builds/rare-errors.yaml", ("rare errors",),
                          {"load_for": "40s", "fault_at": "10s", "flaky_at": "28s", "flaky_for": "6s"})}


class OtherCores:
    """The CPU everything else on the machine used while the block ran, as a share of the machine: the machine's
    busy CPU-seconds minus those of our own descendants (every process the gate started is waited for, so its
    time lands in RUSAGE_CHILDREN). With --neighbour, the neighbour is our child too: it is counted apart."""

    def __enter__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), self._busy(), self._own()
        return self

    @staticmethod
    def _busy() -> float:
        t = psutil.cpu_times()
        return t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0)

    @staticmethod
    def _own() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        s = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime + s.ru_utime + s.ru_stime

    def __exit__(self, *exc):
        others = (self._busy() - self.busy0) - (self._own() - self.own0)
        self.share = max(0.0, others) / ((time.monotonic() - self.t0) * psutil.cpu_count())


class DuringCandidateRuns:
    """A neighbour's schedule that is on while a candidate's run is under way: a b-N run folder whose journal
    exists and whose report does not yet."""

    def __init__(self, gate_out: str, total: float):
        self.runs, self.total = os.path.join(gate_out, "runs"), total

    def is_on(self, t: float) -> bool:
        try:
            for exp in os.listdir(self.runs):
                for run in os.listdir(os.path.join(self.runs, exp)):
                    d = os.path.join(self.runs, exp, run)
                    if run.startswith("b-") and os.path.exists(os.path.join(d, "journal.jsonl")) and \
                            not os.path.exists(os.path.join(d, "report.json")):
                        return True
        except OSError:
            pass
        return False

    def describe(self) -> str:
        return "on during the candidate's runs only"


def row_of(out: str, r: subprocess.CompletedProcess, candidate: str, seed, seconds: float, other: float,
           schedule: str) -> dict:
    try:
        with open(os.path.join(out, "gate.json")) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        doc = {}
    figs = doc.get("figures") or []
    held = [f["figure"] for f in figs if f.get("host")]
    busy_pairs = sorted({(f["experiment"], n) for f in figs for n in (f.get("excluded") or {}).get("host") or {}})
    runs = doc.get("runs") or []
    return {"candidate": candidate, "exit": r.returncode, "verdict": doc.get("verdict"), "seed": seed,
            "regressed": doc.get("regressed", []), "held_for_host": held, "pairs_host_differed": busy_pairs,
            "judged": doc.get("judged"), "seconds": seconds, "other_cores": other, "neighbour": schedule,
            "runs": len(runs), "pairs_run": len(runs) // 2,
            "worse": [f["figure"].split(" · ", 1)[-1] for f in figs if f.get("verdict") == C.WORSE],
            "open": [f["figure"].split(" · ", 1)[-1] for f in figs if f.get("verdict") == C.NOT_JUDGED],
            "others_by_run": [round((x.get("host") or {}).get("others", 0.0), 3) for x in runs],
            "out": out, "stderr": r.stderr[-500:] if r.returncode == 2 else ""}


def rejudge(root: str, host_bound: float | None = None) -> list[dict]:
    """Every gate under root judged again by the code as it is now (`chaos gate --rejudge`), running nothing;
    host_bound: judged with another --host-bound (a huge one turns the host guard off: what the pairs alone do)."""
    with open(os.path.join(root, "results.json")) as f:
        old = json.load(f)["rows"]
    rows = []
    for row in old:
        out = os.path.join(row["out"], "rejudged" + (f"-bound-{host_bound:g}" if host_bound is not None else ""))
        extra = ["--host-bound", f"{host_bound:g}"] if host_bound is not None else []
        r = subprocess.run([sys.executable, "-m", "chaos", "gate", "--rejudge", row["out"], "--out", out, *extra],
                           cwd=ROOT, capture_output=True, text=True)
        rows.append({"case": row["case"], **row_of(out, r, row["candidate"], row["seed"], row["seconds"],
                                                   row["other_cores"], row.get("neighbour", ""))})
    return rows


def gate(candidate: str, out: str, a, seed: int, design: list[str], shape: dict | None = None) -> dict:
    shape = {"load_for": a.load_for, "fault_at": a.fault_at, "flaky_at": a.flaky_at, "flaky_for": a.flaky_for,
             **(shape or {})}
    cmd = [sys.executable, "-m", "chaos", "gate", "--baseline-target", "targets/reference.yaml", "--candidate",
           candidate, "gates/upgrade.yaml", *design, "--seed", str(seed), "--out", out,
           "--var", f"PRESET={a.preset}", "--var", f"LOAD_FOR={shape['load_for']}",
           "--var", f"FAULT_AT={shape['fault_at']}", "--var", f"FLAKY_AT={shape['flaky_at']}",
           "--var", f"FLAKY_FOR={shape['flaky_for']}"]
    neighbour = adversary = None
    if a.adversary:
        import threading
        adversary = Neighbour(1.0, DuringCandidateRuns(out, 3600.0))
        threading.Thread(target=adversary.run, daemon=True).start()
    elif a.neighbour:
        # Its own seed, far from the gate's: the coins and the neighbour drawn from one seed are the same random
        # numbers, and a neighbour that knows the coins lines up with them (a first calibration did: the no-change
        # candidate came out 17 % faster on average).
        neighbour = subprocess.Popen([sys.executable, "-m", "chaos", "selftest", "neighbour", "--cores",
                                      str(a.neighbour_cores), "--seed", str(NEIGHBOUR_SEED + seed), "--for", "1800s",
                                      "--on", "15s-90s", "--off", "15s-90s"], cwd=ROOT, stdout=subprocess.PIPE,
                                     text=True)
    t0 = time.monotonic()
    try:
        with OtherCores() as oc:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    finally:
        schedule = ""
        if adversary is not None:
            adversary.stop()
            time.sleep(0.2)
            adversary.close()
            schedule = "one core, on during the candidate's runs only"
        if neighbour is not None:
            neighbour.send_signal(signal.SIGTERM)
            schedule = neighbour.communicate(timeout=30)[0].splitlines()[0] if neighbour.stdout else ""
    return row_of(out, r, candidate, seed, time.monotonic() - t0, oc.share, schedule)


def line(name: str, row: dict) -> str:
    extra = f"; worse: {row['worse']}" if row.get("worse") else ""
    if row["held_for_host"]:
        extra += f"; {len(row['held_for_host'])} figure(s) held for the host"
    return (f"{name}: exit {row['exit']} {row['verdict']}, {row.get('pairs_run', '?')} pairs, {row['seconds']:.0f} s, "
            f"other cores {row['other_cores']:.0%}, pairs whose host differed {len(row['pairs_host_differed'])}"
            f"{extra}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--aa", "--repeats", dest="aa", type=int, default=20, help="no-change gates (default 20)")
    p.add_argument("--pairs", type=int, default=7, help="pairs of each no-change gate (fixed design; default 7)")
    p.add_argument("--max-pairs", type=int, default=10, help="the builds' sequential design: at most this many "
                                                             "pairs (default 10); 0: a fixed --pairs")
    p.add_argument("--builds", default="all", help="all, none, or names from: " + ", ".join(BUILDS))
    p.add_argument("--load-for", default="16s")
    p.add_argument("--fault-at", default="4s")
    p.add_argument("--flaky-at", default="11s")
    p.add_argument("--flaky-for", default="3s")
    p.add_argument("--preset", default="tiny-long")
    p.add_argument("--neighbour", action="store_true", help="a neighbour on and off at random beside each gate")
    p.add_argument("--neighbour-cores", type=float, default=1.0)
    p.add_argument("--adversary", action="store_true", help="no-change gates with a neighbour on during the "
                                                            "candidate's runs only, each judged again guard off")
    p.add_argument("--seed", type=int, default=0, help="gate i uses seed + i (its pairs' coins, its neighbour)")
    p.add_argument("--builds-only", action="store_true", help="the same as --aa 0")
    p.add_argument("--same-only", action="store_true", help="the same as --builds none")
    p.add_argument("--quick", action="store_true", help="2 no-change gates, 1 build")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gate"))
    p.add_argument("--rejudge", metavar="RESULTS_DIR", help="judge every gate of an earlier calibration again with "
                                                            "the code as it is now, running nothing")
    p.add_argument("--host-bound", type=float, help="with --rejudge: judge with this --host-bound (64: the host "
                                                    "guard off, to see what it holds back)")
    a = p.parse_args()
    if a.rejudge:
        rows = rejudge(a.rejudge, a.host_bound)
        name = "rejudged" + (f"-bound-{a.host_bound:g}" if a.host_bound is not None else "")
        with open(os.path.join(a.rejudge, name + ".json"), "w") as f:
            json.dump({"rows": rows}, f, indent=2)
        summary(rows)
        return 0
    names = [] if a.same_only or a.builds == "none" else list(BUILDS) if a.builds == "all" else \
        [n.strip() for n in a.builds.split(",")]
    unknown = [n for n in names if n not in BUILDS]
    if unknown:
        p.error(f"unknown build(s) {unknown}: choose from {', '.join(BUILDS)}")
    names = names[:1] if a.quick else names
    repeats = 0 if a.builds_only else 2 if a.quick else a.aa
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = os.path.join(a.out, stamp + ("-adversary" if a.adversary else "-neighbour" if a.neighbour else "-quiet"))
    os.makedirs(root, exist_ok=True)
    rows = []
    fixed = ["--pairs", str(a.pairs)]

    def save():
        with open(os.path.join(root, "results.json"), "w") as f:
            json.dump({"args": vars(a), "rows": rows}, f, indent=2)

    def no_change(label: str) -> None:
        for i in range(repeats):
            row = gate("targets/reference.yaml", os.path.join(root, f"same-{i + 1}"), a, a.seed + i, fixed)
            rows.append({"case": "no change", **row})
            save()
            print(line(f"{label} {i + 1}/{repeats}", row), flush=True)

    if a.adversary:
        no_change("no change, neighbour on in the candidate's runs")
        summary(rows)
        off = rejudge(root, 64.0)
        with open(os.path.join(root, "rejudged-bound-64.json"), "w") as f:
            json.dump({"rows": off}, f, indent=2)
        print("\nthe same gates, the host guard off (--host-bound 64):")
        summary(off)
        print(f"\nresults: {os.path.join(root, 'results.json')}")
        return 0
    design = ["--max-pairs", str(a.max_pairs)] if a.max_pairs else fixed
    for k, name in enumerate(names):
        cand, _, shape = BUILDS[name]
        row = gate(cand, os.path.join(root, name.replace(" ", "-").replace(".", "")), a, a.seed + 100 + k, design,
                   shape)
        rows.append({"case": name, "shape": shape, **row})
        save()
        print(line(name, row), flush=True)
    no_change("no change")
    summary(rows)
    print(f"\nresults: {os.path.join(root, 'results.json')}")
    return 0


def exact(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95 % interval of k in n."""
    from scipy.stats import beta
    return (0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1)),
            1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k)))


def designed(case: str, worse: list[str]) -> list[str]:
    marks = BUILDS[case][1]
    return [f for f in worse if any(m.lower() in f.lower() for m in marks)]


def summary(rows: list[dict]) -> None:
    same = [r for r in rows if r["case"] == "no change"]
    print()
    if same:
        n, false, held = len(same), sum(r["exit"] == 1 for r in same), sum(r["exit"] == 4 for r in same)
        lo, hi = exact(false, n)
        others = sorted(r["other_cores"] for r in same)
        print("| no-change gates | exit 0 | exit 1 (false alarms) | exit 4 | false-alarm rate [95 %] | others "
              "(median, max) | median gate |\n|---|---|---|---|---|---|---|")
        print(f"| {n} | {sum(r['exit'] == 0 for r in same)} | {false} | {held} | {false / n:.0%} [{lo:.0%}, "
              f"{hi:.0%}] | {others[n // 2]:.2f}, {others[-1]:.2f} cores | "
              f"{sorted(r['seconds'] for r in same)[n // 2]:.0f} s |")
        for r in same:
            if r["exit"] != 0:
                print(f"  {r['out']}: exit {r['exit']}, other cores {r['other_cores']:.0%}: worse {r.get('worse')}, "
                      f"host differed in {r['pairs_host_differed']}")
    builds = [r for r in rows if r["case"] != "no change"]
    if builds:
        print("\n| build | result | by a figure made for it | pairs (runs) | figures worse | others | took |\n"
              "|---|---|---|---|---|---|---|")
    for r in builds:
        mine = designed(r["case"], r.get("worse") or []) if r["case"] in BUILDS else []
        print(f"| {r['case']} | {'caught' if r['exit'] == 1 else 'missed'} (exit {r['exit']}) | "
              f"{'yes: ' + '; '.join(mine) if mine else 'no'} | {r.get('pairs_run', '?')} ({r.get('runs', '?')}) | "
              f"{len(r.get('worse') or [])}: {'; '.join(r.get('worse') or []) or '-'} | {r['other_cores']:.2f} | "
              f"{r['seconds'] / 60:.1f} min |")


if __name__ == "__main__":
    sys.exit(main())
