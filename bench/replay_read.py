"""Reading production logs in bounded memory: chaos.replay.iter_log over a generated envelope JSONL (a bearer header,
an e-mail and a phone number per line), plain and with the Scrubber, each in a fresh process so its peak RSS is
its own. Prints items, seconds, MB/s and max RSS; the aim is an RSS that does not grow with the file.

    python bench/replay_read.py                 # 200 MB
    python bench/replay_read.py --size-mb 1000  # the issue's 1 GB
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def generate(path: str, size: int) -> None:
    text = "Customer 4821 asked about invoice 2023-11 and the refund; " * 80
    with open(path, "w") as f:
        i = 0
        while f.tell() < size:
            body = {"messages": [{"role": "user", "content": f"{text} mail user{i}@example.com, call "
                                                             f"+1 415 555 {i % 10000:04d}"}], "max_tokens": 16}
            f.write(json.dumps({"timestamp": 1700000000 + i * 0.01, "response": {"status": 200},
                                "request": {"headers": {"Authorization": "Bearer abcdefgh12345678"},
                                            "body": body}}) + "\n")
            i += 1


def measure(mode: str, path: str) -> dict:
    from chaos.replay import Item, Scrubber, iter_log

    scrub = Scrubber() if mode == "scrub" else None
    t, n = time.perf_counter(), 0
    for it in iter_log(path, scrubber=scrub):
        n += isinstance(it, Item)
    dt = time.perf_counter() - t
    size = os.path.getsize(path)
    return {"mode": mode, "file_MB": round(size / 1e6), "items": n, "seconds": round(dt, 1),
            "MB_per_s": round(size / 1e6 / dt, 1),
            "max_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "scrubbed": scrub.report() if scrub else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=200)
    p.add_argument("--measure", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)  # the child's part
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(*a.measure)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log.jsonl")
        generate(path, a.size_mb * 10**6)
        print(f"{'mode':6} {'file MB':>8} {'items':>9} {'s':>7} {'MB/s':>7} {'max RSS MB':>11}  scrubbed")
        for mode in ("plain", "scrub"):
            out = subprocess.run([sys.executable, __file__, "--measure", mode, path], capture_output=True,
                                 text=True, check=True).stdout
            r = json.loads(out)
            print(f"{r['mode']:6} {r['file_MB']:>8} {r['items']:>9,} {r['seconds']:>7} {r['MB_per_s']:>7} "
                  f"{r['max_rss_MB']:>11}  {r['scrubbed'] or ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
