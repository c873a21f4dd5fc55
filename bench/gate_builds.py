"""The gate against the builds canary analysis misses (docs/gate.md, "What canary analysis misses"): each build of
targets/builds/ alone at its effect, and an A/A control, each a real `chaos gate` at its defaults:

    chaos gate --baseline-target targets/reference.yaml --candidate targets/builds/BUILD.yaml gates/upgrade.yaml \\
        --pairs 7 --seed SEED --var PRESET=tiny-long [--var LOAD_FOR=...]

* stalls.yaml: 0.5 % of engine steps stall 300 ms (the median request never meets one);
* pace-spread.yaml: each request's pace factor max(1, e^(0.5 Z)): half the requests unchanged;
* rare-errors.yaml: 0.5 % of prompts answered HTTP 500 on every replica (the baseline fails none);
* A/A: the baseline against itself.

For each: the exit code, whether the figure made for that build flagged it, every figure flagged, and the pairs
the designed figure was judged on. The table goes to stdout and, with --out, to a Markdown file.

A note on the rare errors: the exact test of 0 baseline failures against k candidate failures reaches Holm's
alpha / m over a gate of m figures only when 2 m / alpha < 2^k, 10-12 failures, so about 2,000 candidate requests
at 0.5 %; give the gate a longer load (--load-for) where the default's few hundred requests a run are too few.

Usage: python bench/gate_builds.py [--builds stalls,pace-spread,rare-errors,aa] [--pairs 7] [--load-for 16s]
                                   [--seed 1] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DESIGNED = {"stalls": "share beyond the other run's P95", "pace-spread": "ITL spread",
            "rare-errors": "rare errors", "aa": None}


def run_gate(build: str, pairs: int, load_for: str, seed: int, out: str) -> tuple[int, dict, float]:
    cand = ["--aa"] if build == "aa" else ["--candidate", f"targets/builds/{build}.yaml"]
    cmd = [sys.executable, "-m", "chaos", "gate", "--baseline-target", "targets/reference.yaml", *cand,
           "gates/upgrade.yaml", "--pairs", str(pairs), "--seed", str(seed), "--out", out,
           "--var", "PRESET=tiny-long", "--var", f"LOAD_FOR={load_for}"]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    path = os.path.join(out, "gate.json")
    doc = json.load(open(path)) if os.path.exists(path) else {}
    return r.returncode, doc, time.monotonic() - t0


def row(build: str, code: int, doc: dict, took: float) -> str:
    figs = doc.get("figures") or []
    flagged = [f["figure"].split(" · ", 1)[-1] for f in figs if f.get("verdict") == "worse"]
    mine = [f for f in figs if DESIGNED[build] and DESIGNED[build] in f["figure"]]
    caught = "-" if not DESIGNED[build] else ("yes" if any(f.get("verdict") == "worse" for f in mine) else "no")
    used = ", ".join(f"{len(f.get('judged_on') or f.get('pairs') or [])}" for f in mine) or "-"
    requests = sum(len(open(os.path.join(r["run_dir"], "requests.jsonl")).readlines())
                   for r in doc.get("runs") or [] if r.get("side") == "b"
                   and os.path.exists(os.path.join(r["run_dir"], "requests.jsonl")))
    return (f"| {build} | {code} | {caught} | {used} | {len(flagged)}: {'; '.join(flagged) or '-'} | {requests} | "
            f"{took / 60:.1f} min |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--builds", default="stalls,pace-spread,rare-errors,aa")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--load-for", default="16s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="also write the table to this Markdown file")
    args = ap.parse_args()
    lines = ["| build | exit | designed figure flagged | its pairs | figures flagged | candidate requests | took |",
             "|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    with tempfile.TemporaryDirectory(prefix="gate-builds-") as tmp:
        for build in args.builds.split(","):
            code, doc, took = run_gate(build, args.pairs, args.load_for, args.seed, os.path.join(tmp, build))
            lines.append(row(build, code, doc, took))
            print(lines[-1], flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
