"""Reading production logs in bounded memory: chaos.replay.iter_log over a generated envelope JSONL (a bearer header,
an e-mail and a phone number per line), plain and with the Scrubber, each in a fresh process so its peak RSS is
its own. Prints items, seconds, MB/s, the ratio to plain reading, max RSS and the redaction counts side by side
(scrub-each: the same scrubber on each item as it is read, the way iter_log scrubbed before it read in batches),
and whether the scrubbing aims are met (>= 50 MB/s and >= 0.4 of plain, issue 31); memory must not grow with
the file. Each mode runs --rounds times, the rounds of all modes interleaved, and its fastest run is kept.

--compare-reference also times the pure-Python engine (where the default is hyperscan) and the reference
Scrubber (tests/replay/scrubref.py, the scrubber before the fast path), then reads the file through each fast engine
and the reference side by side, untimed, to check that their output is byte-identical and their counts equal.

    python bench/replay_read.py                                      # 200 MB
    python bench/replay_read.py --size-mb 1000                       # the issue's 1 GB
    python bench/replay_read.py --size-mb 200 --compare-reference    # and the old path beside it
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

AIM_MB_S, AIM_RATIO = 50.0, 0.4  # issue 31: scrubbed reading at least this fast, and this fraction of plain


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


def scrubber(mode: str):
    """The scrubber a mode reads with: none (plain), the fast one with its best engine (scrub, and scrub-each, which
    scrubs each item as it is read instead of in iter_log's batches) or the pure-Python one (scrub-python), or the
    reference one."""
    if mode == "plain":
        return None
    from chaos.replay import Scrubber
    from tests.replay.scrubref import ReferenceScrubber

    if mode == "reference":
        return ReferenceScrubber()
    return Scrubber(engine="python" if mode == "scrub-python" else "auto")


def measure(mode: str, path: str) -> dict:
    from chaos.replay import Item, iter_log

    scrub = scrubber(mode)
    t, n = time.perf_counter(), 0
    if mode == "scrub-each":  # the reader before batches: each item scrubbed as it is read
        for it in iter_log(path):
            if isinstance(it, Item):
                n += 1
                scrub.scrub_item(it)
    else:
        for it in iter_log(path, scrubber=scrub):
            n += isinstance(it, Item)
    dt = time.perf_counter() - t
    size = os.path.getsize(path)
    return {"mode": mode, "file_MB": round(size / 1e6), "items": n, "seconds": round(dt, 2),
            "MB_per_s": round(size / 1e6 / dt, 1),
            "max_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "scrubbed": scrub.report() if scrub else None, "engine": getattr(scrub, "engine", "")}


def verify(path: str) -> dict:
    """Reads the file through each fast engine and the reference Scrubber side by side (untimed): per engine, the
    first item whose scrubbed body or headers differ as bytes from the reference's, if any, and the reports."""
    from chaos.replay import Item, Scrubber, iter_log
    from tests.replay.scrubref import ReferenceScrubber

    ref = ReferenceScrubber()
    fast = {e: Scrubber(engine=e) for e in {Scrubber().engine, "python"}}
    readers = [iter_log(path, scrubber=ref)] + [iter_log(path, scrubber=s) for s in fast.values()]
    n, first_diff = 0, dict.fromkeys(fast)
    for want, *got in zip(*readers, strict=True):
        if isinstance(want, Item):
            n += 1
            for engine, item in zip(fast, got):
                if first_diff[engine] is None and _dumped(item) != _dumped(want):
                    first_diff[engine] = want.line_no
    return {"items": n, "first_diff_line": first_diff, "reference": ref.report(),
            "fast": {e: s.report() for e, s in fast.items()}}


def _dumped(item) -> bytes:
    return json.dumps([item.body, item.headers], ensure_ascii=False).encode("utf-8", "surrogatepass")


def engine() -> dict:
    from chaos.replay import Scrubber

    return {"engine": Scrubber().engine}


def child(what: str, path: str) -> dict:
    """One measurement in a fresh process (no warm caches from another mode). Its peak RSS is its own as long as
    this process stays smaller: Linux keeps the peak across fork and exec, so nothing here imports chaos.replay."""
    out = subprocess.run([sys.executable, __file__, "--measure", what, path], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def fastest(modes: list[str], path: str, rounds: int) -> dict:
    """Per mode, the fastest of `rounds` runs, the modes taking turns (plain, scrub, plain, scrub, ...): on a shared
    box, a disturbance then costs each mode alike, and the least disturbed run of each is compared."""
    out: dict = {}
    for _ in range(rounds):
        for mode in modes:
            r = child(mode, path)
            if mode not in out or r["seconds"] < out[mode]["seconds"]:
                out[mode] = r
    return out


def row(r: dict, plain: dict) -> str:
    ratio = r["MB_per_s"] / plain["MB_per_s"]
    mode = f"{r['mode']} [{r['engine']}]" if r["mode"] in ("scrub", "scrub-each") else r["mode"]
    return (f"{mode:22} {r['file_MB']:>8} {r['items']:>9,} {r['seconds']:>7} {r['MB_per_s']:>7} "
            f"{ratio:>8.2f} {r['max_rss_MB']:>11}  {r['scrubbed'] or ''}")


def verdict(scrub: dict, plain: dict) -> str:
    rate, ratio = scrub["MB_per_s"], scrub["MB_per_s"] / plain["MB_per_s"]
    ok = rate >= AIM_MB_S and ratio >= AIM_RATIO
    return (f"{scrub['mode']} [{scrub['engine']}]: aims (>= {AIM_MB_S:g} MB/s, >= {AIM_RATIO:g} of plain): {rate} MB/s "
            f"{'met' if rate >= AIM_MB_S else 'NOT met'}, {ratio:.2f} of plain "
            f"{'met' if ratio >= AIM_RATIO else 'NOT met'}: {'MET' if ok else 'NOT MET'}")


def comparison(runs: dict, check: dict) -> list[str]:
    ref = runs["reference"]
    lines = []
    for mode, r in runs.items():
        if mode in ("plain", "reference"):
            continue
        engine = r["engine"]
        same_counts = r["scrubbed"] == ref["scrubbed"] == check["fast"][engine] == check["reference"]
        diff = check["first_diff_line"][engine]
        output = (f"byte-identical on all {check['items']:,} items" if diff is None
                  else f"DIFFERS (first at line {diff})")
        if mode == "scrub-each":
            output = "compared above (the same scrubber as scrub, each item as it is read)"
        lines.append(f"{mode} [{engine}] vs reference: {r['MB_per_s'] / ref['MB_per_s']:.1f}x faster; redaction "
                     f"counts {'identical' if same_counts else 'DIFFER'}; output {output}")
    return lines


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size-mb", type=int, default=200)
    p.add_argument("--rounds", type=int, default=3, help="runs per mode, the fastest kept (default 3)")
    p.add_argument("--compare-reference", action="store_true",
                   help="also time the reference Scrubber and check (untimed) that its output is the fast one's")
    p.add_argument("--measure", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)  # the child's part
    a = p.parse_args()
    if a.measure:
        what, path = a.measure
        print(json.dumps(verify(path) if what == "verify" else engine() if what == "engine" else measure(what, path)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log.jsonl")
        generate(path, a.size_mb * 10**6)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
        print(f"{'mode':22} {'file MB':>8} {'items':>9} {'s':>7} {'MB/s':>7} {'x plain':>8} {'max RSS MB':>11}  "
              "scrubbed")
        modes = ["plain", "scrub", "scrub-each"]
        if a.compare_reference:  # the pure-Python engine too where the default is another one
            modes += ["scrub-python"] * (child("engine", path)["engine"] != "python") + ["reference"]
        runs = fastest(modes, path, a.rounds)
        for mode in modes:
            print(row(runs[mode], runs["plain"]))
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        for mode in ("scrub", "scrub-python"):
            if mode in runs:
                print(verdict(runs[mode], runs["plain"]))
        if a.compare_reference:
            print("\n".join(comparison(runs, child("verify", path))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
