"""What real packet loss between the gateway and a replica does, beside a proxy's latency at the same mean delay
(issue 45; BENCHMARKS.md §22; docs/hosts.md). Root only: hosts are network namespaces.

For each loss rate, one real `chaos run` of the reference target on three hosts (targets/hosts.yaml: the gateway
on edge, r0 on node-a, r1 on node-b), with `packet_loss` between node-b and edge for the whole load (both ways,
nftables random drop); then, on loopback (targets/reference.yaml), the same load with Toxiproxy's latency toxic on
r1's link at the mean delay that loss added to r1's answers (the mean E2E of r1's requests over the no-loss run's,
per request). Figures are r1's requests only (x-served-by): TTFT P50 and P99, the inter-token gap P99 and the
largest, E2E P99, failed requests; and, from the fault's own counters, the packets dropped and the segments TCP
sent again (both hosts' stacks).

Usage: python bench/kernel_loss.py [--rates 0,1,5,20] [--load-for 25s] [--users 6] [--out FILE.md]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

EXPERIMENT = """name: {name}
target: {target}
load: {{workload: chat, users: {users}, duration: {load_for}, input_tokens: 30-80, output_tokens: 16-32,
        timeouts: {{connect: 2s, first_token: 10s, total: 30s}}}}
faults:
{faults}
"""


def run(name: str, target: str, faults: str, a, tmp: str) -> tuple[list[dict], dict | None, int]:
    exp = os.path.join(tmp, f"{name}.yaml")
    with open(exp, "w") as f:
        f.write(EXPERIMENT.format(name=name, target=os.path.join(ROOT, target), users=a.users,
                                  load_for=a.load_for, faults=faults or "  []"))
    out = os.path.join(tmp, name)
    r = subprocess.run([sys.executable, "-m", "chaos", "run", exp, "--out", out, "--var", f"PRESET={a.preset}"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    with open(os.path.join(out, "requests.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    evidence = None
    with open(os.path.join(out, "journal.jsonl")) as f:
        for line in f:
            e = json.loads(line)
            if e["event"] == "fault_reverted" and e.get("evidence"):
                evidence = e["evidence"]
    return records, evidence, r.returncode


def figures(records: list[dict]) -> dict:
    r1 = [r for r in records if r.get("served_by") == "r1"]
    ok = [r for r in r1 if r["outcome"] == "ok"]
    ttft = np.array([r["t_first"] - r["t_start"] for r in ok if r.get("t_first")])
    e2e = np.array([r["t_end"] - r["t_start"] for r in ok])
    gaps = np.array([g / 1e6 for r in ok for g in (r.get("itl_us") or [])])
    failed = sum(r["outcome"] != "ok" for r in records)
    pct = (lambda x, q: float(np.percentile(x, q)) * 1000 if len(x) else float("nan"))
    return {"n": len(ok), "ttft50": pct(ttft, 50), "ttft99": pct(ttft, 99), "itl99": pct(gaps, 99),
            "itlmax": float(gaps.max()) * 1000 if len(gaps) else float("nan"), "e2e99": pct(e2e, 99),
            "e2e_mean": float(e2e.mean()) * 1000 if len(e2e) else float("nan"), "failed": failed,
            "requests": len(records)}


def row(label: str, f: dict, wire: str) -> str:
    return (f"| {label} | {f['n']} | {f['ttft50']:.0f} | {f['ttft99']:.0f} | {f['itl99']:.0f} | {f['itlmax']:.0f} | "
            f"{f['e2e99']:.0f} | {f['e2e_mean']:.0f} | {f['failed']} of {f['requests']} | {wire} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", default="0,1,5,20", help="loss rates in percent (0 first: the baseline)")
    p.add_argument("--load-for", default="25s")
    p.add_argument("--users", type=int, default=6)
    p.add_argument("--preset", default="tiny")
    p.add_argument("--out", help="also write the table to this Markdown file")
    a = p.parse_args()
    from chaos import netns

    if netns.why_not():
        print(f"cannot make hosts here: {netns.why_not()}", file=sys.stderr)
        return 2
    rates = [float(x) for x in a.rates.split(",")]
    lines = ["| r1's requests | n | TTFT P50 ms | TTFT P99 ms | ITL P99 ms | ITL max ms | E2E P99 ms | E2E mean ms | "
             "failed | on the wire |", "|---|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines), flush=True)
    base_mean = None
    with tempfile.TemporaryDirectory(prefix="kernel-loss-") as tmp:
        for rate in rates:
            faults = (f"  - {{type: packet_loss, name: loss, at: 0s, host: node-b, peer: edge, rate: {rate:g}%}}"
                      if rate else "")
            records, ev, code = run(f"loss-{rate:g}", "targets/hosts.yaml", faults, a, tmp)
            f = figures(records)
            wire = "-"
            if ev:
                retrans = sum(t["RetransSegs"] for t in ev["tcp"].values())
                rto = sum(t["TCPTimeouts"] for t in ev["tcp"].values())
                wire = (f"dropped {ev['taken']:,} of {ev['packets']:,} packets; {retrans:,} segments sent again "
                        f"({rto} timeouts)")
            lines.append(row(f"kernel loss {rate:g} % (hosts; exit {code})", f, wire))
            print(lines[-1], flush=True)
            if rate == 0:
                base_mean = f["e2e_mean"]
                continue
            delay = max(1.0, f["e2e_mean"] - base_mean)  # the mean delay loss added to an r1 request
            toxic = f"  - {{type: latency, name: lat, at: 0s, link: r1, latency: {delay:.0f}ms}}"
            records, _, code = run(f"toxic-{rate:g}", "targets/reference.yaml", toxic, a, tmp)
            lines.append(row(f"latency toxic {delay:.0f} ms, its mean (loopback; exit {code})", figures(records),
                             "no packet lost"))
            print(lines[-1], flush=True)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
