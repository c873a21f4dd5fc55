"""Calibration of the pre-upgrade gate (`chaos gate`, docs/gate.md) on this machine, with real gates.

What it runs
------------
Every gate is the real command, interleaved, at its defaults (tolerance 10 %, floors 5 ms and 0.5 s, error
tolerance 1 point, P50/P95/P99, Holm over every figure):

    chaos gate --baseline-target targets/reference.yaml --candidate CANDIDATE gates/upgrade.yaml \\
        --repeat R --var PRESET=tiny-long --var LOAD_FOR=... --var FAULT_AT=... \\
        --var FLAKY_AT=... --var FLAKY_FOR=...

gates/upgrade.yaml runs experiments/upgrade-check.yaml: a load that shares a 1,000-token system prompt, r1
SIGKILLed and restarted, then r0 answering one request in five with HTTP 500 for a while. tiny-long prefills per
token (~0.1 ms a token on 2 cores), so the shared prefix is where prefix caching pays, at a fraction of the small
preset's cost.

* no change: CANDIDATE = targets/reference.yaml itself, --repeats times. Aim: exit 0 in >= 19 of 20.
* three builds that differ for real (targets/builds/): prefix caching off, every engine step 1.5x slower, the
  gateway's retries off. Aim: each caught (exit 1), naming the figures it moved.

The machine is shared: "other cores" is the CPU everything but the gate's own processes used while it ran,
printed beside each gate so that a flag raised while a neighbour was busy can be told apart.

Usage: python bench/gate_calibration.py [--repeats 20] [--runs-a-side 2] [--load-for 30s] [--fault-at 8s]
       [--flaky-at 19s] [--flaky-for 6s] [--preset tiny-long] [--builds-only | --same-only] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILDS = {"prefix caching off": "targets/builds/no-prefix-caching.yaml",
          "steps 1.5x slower": "targets/builds/slower-steps.yaml",
          "gateway retries off": "targets/builds/no-retries.yaml"}


class OtherCores:
    """The CPU everything else on the machine used while the block ran, as a share of the machine: the machine's
    busy CPU-seconds minus those of our own descendants (every process the gate started is waited for, so its
    time lands in RUSAGE_CHILDREN)."""

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


def gate(candidate: str, out: str, a) -> dict:
    cmd = [sys.executable, "-m", "chaos", "gate", "--baseline-target", "targets/reference.yaml", "--candidate",
           candidate, "gates/upgrade.yaml", "--repeat", str(a.runs_a_side), "--out", out,
           "--var", f"PRESET={a.preset}", "--var", f"LOAD_FOR={a.load_for}", "--var", f"FAULT_AT={a.fault_at}",
           "--var", f"FLAKY_AT={a.flaky_at}", "--var", f"FLAKY_FOR={a.flaky_for}"]
    t0 = time.monotonic()
    with OtherCores() as oc:
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    try:
        doc = json.load(open(os.path.join(out, "gate.json")))
    except (OSError, ValueError):
        doc = {}
    return {"candidate": candidate, "exit": r.returncode, "verdict": doc.get("verdict"),
            "regressed": doc.get("regressed", []), "judged": doc.get("judged"), "seconds": time.monotonic() - t0,
            "other_cores": oc.share, "out": out, "stderr": r.stderr[-500:] if r.returncode == 2 else ""}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=20, help="no-change gates")
    p.add_argument("--runs-a-side", type=int, default=2)
    p.add_argument("--load-for", default="30s")
    p.add_argument("--fault-at", default="8s")
    p.add_argument("--flaky-at", default="19s")
    p.add_argument("--flaky-for", default="6s")
    p.add_argument("--preset", default="tiny-long")
    p.add_argument("--builds-only", action="store_true")
    p.add_argument("--same-only", action="store_true")
    p.add_argument("--quick", action="store_true", help="2 no-change gates, 1 build")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "gate"))
    a = p.parse_args()
    repeats = 2 if a.quick else a.repeats
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    root = os.path.join(a.out, stamp)
    rows = []
    if not a.builds_only:
        for i in range(repeats):
            row = gate("targets/reference.yaml", os.path.join(root, f"same-{i + 1}"), a)
            rows.append({"case": "no change", **row})
            print(f"no change {i + 1}/{repeats}: exit {row['exit']} {row['verdict']}, {row['seconds']:.0f} s, "
                  f"other cores {row['other_cores']:.0%}" + (f"; flagged {row['regressed']}" if row["regressed"]
                                                           else ""), flush=True)
    if not a.same_only:
        for name, cand in list(BUILDS.items())[:1 if a.quick else None]:
            row = gate(cand, os.path.join(root, name.replace(" ", "-").replace(".", "")), a)
            rows.append({"case": name, **row})
            print(f"{name}: exit {row['exit']} {row['verdict']}, {row['seconds']:.0f} s, other cores "
                  f"{row['other_cores']:.0%}; regressed: {row['regressed']}", flush=True)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "results.json"), "w") as f:
        json.dump({"args": vars(a), "rows": rows}, f, indent=2)
    same = [r for r in rows if r["case"] == "no change"]
    print()
    if same:
        passed = sum(r["exit"] == 0 for r in same)
        print(f"no change: passed {passed} of {len(same)} (aim >= 95 %); exits "
              f"{sorted({r['exit'] for r in same})}; median gate {sorted(r['seconds'] for r in same)[len(same) // 2]:.0f} s")
        for r in same:
            if r["exit"] != 0:
                print(f"  {r['out']}: exit {r['exit']}, other cores {r['other_cores']:.0%}: {r['regressed']}")
    for r in rows:
        if r["case"] != "no change":
            print(f"{r['case']}: {'CAUGHT' if r['exit'] == 1 else 'missed'} (exit {r['exit']}); "
                  f"{len(r['regressed'])} figures: {'; '.join(r['regressed'])}")
    print(f"\nresults: {os.path.join(root, 'results.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
