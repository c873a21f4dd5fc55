"""What each relay adds to a token stream at 1, 50 and 200 concurrent streams, side by side in one run: the
gateway (`chaos reference gateway`), the LLM fault proxy (`chaos proxy llm`, no rule) and the bundled
Toxiproxy-compatible server (a proxy with no toxic), each on asyncio's event loop and on uvloop where it is
installed; a real toxiproxy-server joins when TOXIPROXY_URL is set or toxiproxy-server is on PATH.

The harness is bench/_relay.py: an SSE upstream of --events events --gap-ms apart after --first-ms, a client
that only stamps reads, one keep-alive connection per stream, rounds that alternate the paths, and each
"added" figure the median over rounds of (relayed - direct) of that round's percentile.

The floor is a bare relay in Python (bench/_relay.py: bytes copied from one transport to the other, no parsing),
on each loop: what any relay written in Python pays on this machine for its two extra hops (two wake-ups, a read
and a write each). "over floor" is a relay's added TTFT P50 less the floor's on the same loop: its own work.

    python bench/relay_overhead.py                 # ~5 min: 8 rounds, every relay and the floor on both loops
    python bench/relay_overhead.py --quick         # ~1 min: 3 rounds
    python bench/relay_overhead.py --relays gateway --loops asyncio --profile gateway   # py-spy a 50-stream run
    git worktree add /tmp/base HEAD~1 && python bench/relay_overhead.py --baseline /tmp/base   # before and after

Aims (issue 31): the gateway adds <= 0.5 / 2 / 5 ms to TTFT P50 at 1 / 50 / 200 streams and <= 1 / 3 ms to the
inter-token P99 at 50 / 200; the LLM proxy <= 0.3 / 2 ms to TTFT P50 at 1 / 200; the bundled Toxiproxy's
first event no more than a real server's, in a run where a real one is given.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse

import _relay
from _table import print_table
from l4_proxy import make_proxy  # a proxy on a Toxiproxy API, its listen port back

AIMS = {  # (relay, streams, figure): most ms it may add
    ("gateway", 1, "ttft50"): 0.5, ("gateway", 50, "ttft50"): 2.0, ("gateway", 200, "ttft50"): 5.0,
    ("gateway", 50, "itl99"): 1.0, ("gateway", 200, "itl99"): 3.0,
    ("llm-proxy", 1, "ttft50"): 0.3, ("llm-proxy", 200, "ttft50"): 2.0,
}
RELAYS = ("floor", "gateway", "llm-proxy", "toxiproxy")


def _loops() -> list[str]:
    return ["asyncio", "uvloop"] if importlib.util.find_spec("uvloop") else ["asyncio"]


def start_relay(relay: str, loop: str, up: int, procs: list, root: str = _relay.ROOT) -> int:
    """The port a client sends to, for relay on loop in front of upstream port up (its process: procs[-1]); root:
    the checkout whose code it runs (`python -m` puts the working directory first on sys.path)."""
    env = _relay.loop_env(loop)
    if relay == "floor":
        p, port = _relay.start_floor(up, loop)
        procs.append(p)
        return port
    if relay == "gateway":
        port = _relay.free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "chaos", "reference", "gateway", "--port", str(port), "--upstream",
             f"u0=http://127.0.0.1:{up}", "--max-concurrency", "1000", "--settings",
             json.dumps({"health_interval_s": 1.0})],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env, cwd=root))
        _relay.wait_listening(port)
        return port
    if relay == "llm-proxy":
        p, port = _relay.spawn([sys.executable, "-m", "chaos.proxy.llm", "--listen", "127.0.0.1:0", "--upstream",
                                f"http://127.0.0.1:{up}"], r"listening on http://[^:]+:(\d+)", env=env, cwd=root)
        procs.append(p)
        return port
    api = _relay.free_port()
    procs.append(subprocess.Popen([sys.executable, "-m", "chaos.proxy.toxiproxy", "--port", str(api)],
                                  stdout=subprocess.DEVNULL, start_new_session=True, env=env, cwd=root))
    _relay.wait_listening(api)
    return make_proxy(api, "bench", up)


def start_real_toxiproxy(up: int, procs: list) -> int | None:
    url = os.environ.get("TOXIPROXY_URL")
    if url:
        u = urllib.parse.urlparse(url if "://" in url else f"http://{url}")
        return make_proxy(u.port or 8474, "bench-relay", up)
    exe = shutil.which("toxiproxy-server")
    if not exe:
        return None
    api = _relay.free_port()
    procs.append(subprocess.Popen([exe, "-host", "127.0.0.1", "-port", str(api)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, start_new_session=True))
    _relay.wait_listening(api)
    return make_proxy(api, "bench-relay", up)


def _profile(pid: int, seconds: float, out: str) -> subprocess.Popen:
    exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    return subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "1000",
                             "--format", "raw" if out.endswith(".txt") else "flamegraph", "--output", out, "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 rounds instead of 8")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--relays", default=",".join(RELAYS), help=f"comma-separated, of {', '.join(RELAYS)}")
    ap.add_argument("--loops", default=",".join(_loops()), help="asyncio, uvloop, or both (default: what installs)")
    ap.add_argument("--levels", default="1,50,200", help="concurrent streams, comma-separated")
    ap.add_argument("--first-ms", type=float, default=10.0)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--events", type=int, default=24)
    ap.add_argument("--burst", action="store_true",
                    help="every stream's first request in the same instant (a thundering herd: the added TTFT is then "
                         "about N/2 times a relay's CPU per request) instead of arrivals spread over one stream's "
                         "length")
    ap.add_argument("--baseline", metavar="TREE", action="append", default=[],
                    help="also run each relay from another checkout (say `git worktree add /tmp/base HEAD~3`), "
                         "labelled relay@COMMIT, in the same rounds: a change's gain measured side by side (give it "
                         "more than once for several)")
    ap.add_argument("--profile", metavar="RELAY",
                    help="record a py-spy flame graph of RELAY (its first loop) during the rounds: "
                         "bench/results/relay-RELAY.svg (and its collapsed stacks, relay-RELAY.txt)")
    a = ap.parse_args()
    rounds = a.rounds or (3 if a.quick else 8)
    relays = [r for r in a.relays.split(",") if r]
    loops = [x for x in a.loops.split(",") if x]
    bad = [r for r in relays if r not in RELAYS] + [x for x in loops if x not in ("asyncio", "uvloop")]
    if bad:
        ap.error(f"unknown relay or loop: {', '.join(bad)}")
    levels = [int(x) for x in a.levels.split(",")]
    per = {1: 12 if a.quick else 20, 50: 4, 200: 3}
    stagger = 0.0 if a.burst else (a.first_ms + (a.events - 1) * a.gap_ms) / 1000
    plan = [(c, per.get(c, 1)) for c in levels]
    procs: list[subprocess.Popen] = []
    try:
        up_proc, up = _relay.start_upstream(a.first_ms, a.gap_ms, a.events)
        procs.append(up_proc)
        ports, pids = {"direct": up}, {}
        trees = [("", _relay.ROOT)]
        for tree in a.baseline:
            if not os.path.isdir(os.path.join(tree, "chaos")):
                ap.error(f"--baseline {tree}: not a checkout of llm-chaos (no chaos/ in it)")
            trees.append(("@" + _relay.tree_name(tree), os.path.abspath(tree)))
        for relay in relays:
            for tag, root in trees:
                if relay == "floor" and tag:
                    continue  # the floor is the bench's own code: one is enough
                for loop in loops:
                    key = f"{relay}{tag}[{loop}]"
                    ports[key] = start_relay(relay, loop, up, procs, root)
                    pids[key] = procs[-1].pid
        real = start_real_toxiproxy(up, procs) if "toxiproxy" in relays else None
        if real:
            ports["toxiproxy[real 2.12]"] = real
        spy = None
        if a.profile:
            target = next(i for i, k in enumerate(k for k in ports if k != "direct") if k.startswith(a.profile))
            pid = procs[1 + target].pid
            os.makedirs(os.path.join(_relay.ROOT, "bench", "results"), exist_ok=True)
            out = os.path.join(_relay.ROOT, "bench", "results", f"relay-{a.profile}")
            spy = [_profile(pid, 600, out + ".svg"), _profile(pid, 600, out + ".txt")]
        load = os.getloadavg()
        print(f"relays: {', '.join(k for k in ports if k != 'direct')}")
        print(f"upstream: {a.events} SSE events, the first after {a.first_ms:g} ms, then every {a.gap_ms:g} ms; "
              f"{rounds} rounds, paths alternated; streams "
              f"{'all started at once (--burst)' if a.burst else f'started over {stagger * 1000:.0f} ms (arrivals spread)'}"
              f"; cpus {os.cpu_count()}, load average at start "
              f"{load[0]:.2f} {load[1]:.2f}", flush=True)
        t0 = time.monotonic()
        cpu0 = {k: _cpu_s(pid) for k, pid in pids.items()}
        results = asyncio.run(_relay.compare(ports, plan, rounds, _relay.chat_request(),
                                             progress=lambda m: print(m, file=sys.stderr, flush=True),
                                             stagger_s=stagger))
        cpu = {k: _cpu_s(pid) - cpu0[k] for k, pid in pids.items()}
        for p in spy or ():
            p.send_signal(2)
            p.wait(30)
        print(f"took {time.monotonic() - t0:.0f} s\n")
    finally:
        _relay.stop(procs)
    return report(results, ports, levels, cpu, a.events)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (/proc: no psutil needed)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def report(results: dict, ports: dict, levels: list[int], cpu: dict, events: int) -> int:
    missed = 0
    for c in levels:
        print(f"{c} stream{'s' if c > 1 else ''} (requests per round: {results[('direct', c)][0]['n']})")
        rows = []
        for path in ports:
            row = [path, _relay.median_of(results, path, c, "ttft50"), _relay.median_of(results, path, c, "itl99")]
            if path == "direct":
                rows.append(row + [None, None, None, None, ""])
                continue
            add = {k: _relay.added(results, path, c, k) for k in ("ttft50", "ttft99", "itl99")}
            relay = path.split("[")[0]
            floor = "floor[" + path.split("[")[1] if "[" in path else None
            over = add["ttft50"] - _relay.added(results, floor, c, "ttft50") \
                if floor in ports and path != floor else None
            verdicts = []  # a baseline's relay (relay@rev) is judged by nothing: it is there to compare with
            for k in ("ttft50", "itl99"):
                aim = AIMS.get((relay, c, k))
                if aim is not None:
                    ok = add[k] <= aim
                    missed += not ok
                    verdicts.append(f"{'TTFT P50' if k == 'ttft50' else 'ITL P99'} <= {aim:g}: "
                                    f"{'met' if ok else 'MISSED'}")
            rows.append(row + [add["ttft50"], over, add["ttft99"], add["itl99"], "; ".join(verdicts)])
        print_table(["path", "TTFT P50 ms", "ITL P99 ms", "added TTFT P50", "over floor", "added TTFT P99",
                     "added ITL P99", "aim"], rows)
        real = next((p for p in ports if "real" in p), None)
        if real:
            for path in ports:
                if path.startswith("toxiproxy[") and path != real:
                    mine, theirs = (_relay.added(results, p, c, "ttft50") for p in (path, real))
                    missed += mine > theirs
                    print(f"  {path} first event added {mine:+.2f} ms vs the real server's {theirs:+.2f} ms: "
                          f"{'met' if mine <= theirs else 'MISSED'}")
        print()
    sent = {k: sum(r["n"] for key, rs in results.items() if key[0] == k for r in rs) for k in cpu}
    print("CPU per relayed stream (process CPU time over the timed rounds / streams relayed; "
          f"{events} events each):")
    print_table(["relay", "streams", "CPU s", "CPU ms per stream", "µs per event"],
                [[k, sent[k], cpu[k], cpu[k] / sent[k] * 1000, cpu[k] / sent[k] / events * 1e6] for k in cpu])
    print()
    print(f"aims missed: {missed}" if missed else "every aim met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
