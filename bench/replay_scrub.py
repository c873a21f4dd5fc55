"""What scrubbing and filtering cost a timed replay: the same bursty log replayed at --speed through the real driver
and Locust against a fast local SSE server, plain, with --scrub, and with --scrub and a filter, side by side:
sent / lost, lag (actual - intended send time) P50/P99/max, the Locust process's CPU time a request; and the
Scrubber's own throughput on bodies full of personal data.

  python bench/replay_scrub.py                 # 2,000 requests of a generated bursty log (bench/replay_lag.py's)
  python bench/replay_scrub.py --rows 500 --speed 20
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from replay_lag import FastServer, _pct, generated_log  # noqa: E402

from chaos.load.driver import LoadConfig, LoadRun  # noqa: E402
from chaos.records import read_records  # noqa: E402
from chaos.load.replay.opts import ReplayOptions  # noqa: E402
from chaos.load.shapes import replay  # noqa: E402
from chaos.load.workloads import WorkloadSpec  # noqa: E402
from chaos.replay import Scrubber  # noqa: E402

PII = (" contact jane.doe@example.com or +44 20 7946 0958, card 4111 1111 1111 1111, ID 11010519491231002X, "
       "from 203.0.113.42, key sk-proj-Zq8Xw7Vu6Ts5Rq4Po3Nm2Lk1")


LONGER = " and a follow-up question that makes every second request longer"


def with_pii(src: str, dst: str) -> int:
    """Each body of src with personal data appended to its text (the line number stays its second word), every
    second one longer; returns a prompt size that the short ones are under and the long ones over."""
    from chaos.replay import count_body

    bound = 0
    with open(src) as f, open(dst, "w") as out:
        for i, line in enumerate(f):
            e = json.loads(line)
            e["messages"][0]["content"] += PII + (LONGER if i % 2 else "")
            if not i % 2:
                bound = max(bound, count_body({k: v for k, v in e.items() if k != "timestamp"}))
            out.write(json.dumps(e) + "\n")
    return bound


def run(log: str, n: int, speed: float, out: str, opts: ReplayOptions) -> dict:
    srv = FastServer()
    cfg = LoadConfig(target=srv.url, plan=replay(3600.0, speed=speed, max_users=512, max_requests=n), out_dir=out,
                     workload=[(WorkloadSpec("replay", replay_file=log, extra=opts.extra()), 1.0)])
    lr = LoadRun(cfg, progress=lambda line: None)
    lr.start()
    cpu, tick = 0.0, os.sysconf("SC_CLK_TCK")
    deadline = time.monotonic() + 3600
    while lr.poll() and time.monotonic() < deadline:
        try:
            with open(f"/proc/{lr.main.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
                cpu = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, IndexError, ValueError):
            pass
        time.sleep(0.2)
    lr._reap(15.0)
    res = lr.result()
    lags = [r.t_start - r.t_sched for r in read_records(res.records_path)]
    acc = res.replay
    return {"window": acc["window"], "sent": acc["sent"], "lost": acc["not_sent"], "filtered": acc["filtered"],
            "p50": _pct(lags, 50), "p99": _pct(lags, 99), "max": max(lags) if lags else float("nan"),
            "cpu_ms": cpu * 1000 / max(1, acc["sent"] + acc["filtered"]),
            "scrubbed": (lr.replay_facts or {}).get("scrub") or {}}


def scrub_rate(n: int = 20000) -> tuple[float, float]:
    """(bodies a second, MB a second) of Scrubber.body on chat bodies that each hold every kind of value."""
    body = {"messages": [{"role": "system", "content": "You are the support assistant of an online shop."},
                         {"role": "user", "content": "Where is my order? It was due on Monday." + PII}],
            "max_tokens": 16}
    size = len(json.dumps(body))
    s = Scrubber()
    t = time.perf_counter()
    for _ in range(n):
        s.body(body)
    dt = time.perf_counter() - t
    return n / dt, n * size / dt / 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=2000)
    p.add_argument("--speed", type=float, default=10.0)
    a = p.parse_args()
    work = tempfile.mkdtemp(prefix="replay-scrub-")
    plain = os.path.join(work, "plain.jsonl")
    generated_log(plain, a.rows)
    log = os.path.join(work, "pii.jsonl")
    bound = with_pii(plain, log)
    cases = [("plain", ReplayOptions()), ("--scrub", ReplayOptions(scrub=True)),
             ("--scrub + filter", ReplayOptions(True, {"max_input_tokens": bound}))]
    print(f"{a.rows} requests of a generated bursty log (peaks of 67 in a second), each body with 6 values to "
          f"redact, replayed at {a.speed:g}x")
    head = f"{'replay':<40}{'window':>7}{'sent':>6}{'lost':>6}{'filtered':>9}{'lag p50 ms':>11}{'p99 ms':>8}" \
           f"{'max ms':>8}{'CPU ms/line':>12}{'redacted':>10}"
    print(head)
    print("-" * len(head))
    for name, opts in cases:
        r = run(log, a.rows, a.speed, os.path.join(work, name.replace(" ", "").replace("+", "_")), opts)
        print(f"{name if not opts.filter else f'{name} (max_input_tokens={bound})':<40}{r['window']:>7}{r['sent']:>6}{r['lost']:>6}{r['filtered']:>9}{r['p50'] * 1000:>11.1f}"
              f"{r['p99'] * 1000:>8.1f}{r['max'] * 1000:>8.1f}{r['cpu_ms']:>12.2f}{r['scrubbed'].get('total', 0):>10}")
    per_s, mb_s = scrub_rate()
    print(f"\nScrubber.body alone: {per_s:,.0f} bodies/s ({mb_s:.1f} MB/s of JSON) on bodies with every kind of value")


if __name__ == "__main__":
    main()
