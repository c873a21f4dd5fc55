"""`chaos sweep`, `chaos capacity` and `chaos compare`: the seed's test plan as three commands (docs/plan.md)."""

from __future__ import annotations

import re

from ..common import parse_duration
from ..errors import InputError, SetupError, counts_as, handled

SWEEP_EPILOG = """examples:
  chaos sweep targets/reference.yaml --var PRESET=tiny --concurrency 10,50,100 --hold 30s
  chaos sweep http://127.0.0.1:8000 --concurrency 10,50,100,200,500 --hold 30m --workload rag
  chaos sweep http://127.0.0.1:8000 --rate 2,4,8 --hold 1m          # open loop: arrivals per second

One load, each step held --hold; one table: per step TTFT and E2E P50/P95/P99 (each with its 95% interval and
n), the error rate with its interval and classes, jitter (E2E P99/P50) and throughput (req/s, output tok/s).
Writes sweep.json, sweep.md, sweep.html (latency against concurrency, with interval bars) and requests.jsonl."""

CAPACITY_EPILOG = """examples:
  chaos capacity http://127.0.0.1:8000 --slo "p95<3s,errors<0.1%" --expected 100 --for-concurrency 100
  chaos capacity targets/reference.yaml --var PRESET=tiny --slo "ttft_p95<500ms,errors<1%" --hold 20s
  chaos capacity http://127.0.0.1:8000 --rate --start 1 --slo "p99<5s" --price-per-hour 2.5
  chaos capacity https://api.example/v1 --api-key-env KEY --slo "p95<3s" --price-per-1k-tokens 0.002

SLO figures: p50 p95 p99 (E2E), ttft_p50 ttft_p95 ttft_p99, errors; "<" or "<="; latency with a unit (3s,
800ms), errors as a percentage. A failed request counts as slower than any latency limit.
Each probe holds its level until the SLO is decided: judged every --hold on all it has sent, ended at the first
look that decides, at most --looks holds (each look's intervals at 1 - 0.05/looks).
The search climbs geometrically (--start, --factor) until a level surely breaks the SLO, and always past
--expected; then it bisects between the last sure pass and the first sure fail, repeating levels whose
interval straddles a limit (pooled, at most --max-repeats a level). Bounded by --max-probes and --max-level.
The knee is [highest sure pass, lowest sure fail]. The cost sum: per-instance capacity = the safe value /
the target's replicas; instances for --for-concurrency N = ceil(N / per-instance); with a price, the cost of
1,000 requests at the SLO. Exit status 1 when --expected is above the safe capacity."""

COMPARE_EPILOG = """examples:
  chaos compare targets/a.yaml targets/b.yaml --var PRESET=tiny --concurrency 100,500 --hold 5m
  chaos compare targets/reference.yaml targets/reference.yaml --var 1:PRESET=tiny --var 2:PRESET=small
  chaos compare http://127.0.0.1:8000 http://127.0.0.1:8001 --concurrency 4,16 --output-tokens 64

Every target gets the same dataset (--seed), output limit (--output-tokens) and timeout (--timeout), and the
same steps, one target after another. --var NAME=VALUE sets a variable for every target file, --var N:NAME=VALUE
for the N-th target only. One table side by side (P50/P95/P99 at --at, error rate, jitter, P95 at the highest
step) and the verdicts of each target against the first, Holm-corrected. Writes compare.json/.md/.html."""


def register(sub, formatter) -> None:
    from .loadrun import add_send_options

    p = sub.add_parser("sweep", help="the seed's concurrency gradient: one table of the figures per step",
                       formatter_class=formatter, epilog=SWEEP_EPILOG,
                       description="Hold each concurrency (or arrival rate) in turn against TARGET and report the "
                                   "seed's figures per step, each with its interval.")
    p.add_argument("target", help="a URL (http://127.0.0.1:8000) or a target file")
    g = p.add_argument_group("load")
    g.add_argument("--concurrency", default="10,50,100,200,500", help="the steps, users")
    g.add_argument("--rate", help="open loop instead: arrival rates per second, e.g. 2,4,8")
    g.add_argument("--hold", default="30s", help="how long each step is held (the seed: 30m)")
    add_send_options(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("capacity", help="search for the load where the SLO breaks, and the instances it takes",
                       formatter_class=formatter, epilog=CAPACITY_EPILOG,
                       description="Find the highest concurrency (or arrival rate) that still meets the SLO and "
                                   "where it breaks, as an interval; then the seed's cost sum.")
    p.add_argument("target", help="a URL (http://127.0.0.1:8000) or a target file")
    g = p.add_argument_group("search")
    g.add_argument("--slo", default="p95<3s,errors<0.1%", help="the SLO: clauses FIGURE<LIMIT joined by commas")
    g.add_argument("--rate", action="store_true", help="search arrival rates (open loop) instead of concurrency")
    g.add_argument("--start", type=float, help="the first level (default 1 user, or 1 arrival/s)")
    g.add_argument("--factor", type=float, default=2.0, help="the climb's step: each level is this times the last")
    g.add_argument("--expected", type=float, help="the load you expect: the search always probes above it")
    g.add_argument("--max-level", type=float, default=1024.0, help="never probe beyond this")
    g.add_argument("--max-probes", type=int, default=12, help="probes in all, repeats included")
    g.add_argument("--max-repeats", type=int, default=3, help="probes of one level, at most")
    g.add_argument("--resolution", type=float, default=0.1, help="rates: stop bisecting at this relative gap")
    g.add_argument("--hold", default="30s", help="how long a probe holds its level between looks at its SLO")
    g.add_argument("--looks", type=int, default=4,
                   help="a probe holds its level until its SLO is decided, looking every --hold, at most this "
                        "many times (each look's intervals at 1 - 0.05/looks, so looking often does not make "
                        "noise a verdict)")
    g = p.add_argument_group("cost sum")
    g.add_argument("--for-concurrency", type=float, metavar="N", help="instances needed for N users")
    g.add_argument("--for-rate", type=float, metavar="R", help="(--rate) instances needed for R arrivals/s")
    g.add_argument("--price-per-hour", type=float, metavar="X", help="price of one instance an hour")
    g.add_argument("--price-per-1k-tokens", type=float, metavar="X", help="price of 1,000 tokens (in + out)")
    add_send_options(p)
    p.set_defaults(func=cmd_capacity)

    p = sub.add_parser("compare", help="targets side by side: the same dataset, output limit and timeout",
                       formatter_class=formatter, epilog=COMPARE_EPILOG,
                       description="Run the same load against each target in turn and put them side by side, "
                                   "with the verifier's verdicts against the first.")
    p.add_argument("targets", nargs="+", metavar="TARGET", help="URLs or target files (two or more)")
    g = p.add_argument_group("load")
    g.add_argument("--concurrency", default="100,500", help="the steps, users (the seed compares 100 and 500)")
    g.add_argument("--at", type=int, help="the step of the side-by-side percentiles (default the first)")
    g.add_argument("--hold", default="30s", help="how long each step is held")
    add_send_options(p)
    p.set_defaults(func=cmd_compare)


@handled
def cmd_sweep(a) -> int:
    from ..common import parse_vars
    from .loadrun import out_dir, parse_levels, send_from
    from .sweep import sweep, table_rows
    from .tables import LEVEL_HEADERS, text_table

    # a flag's ValueError is the user's to fix, as an OSError of the output folder or a file named is
    with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
        open_loop = a.rate is not None
        levels = parse_levels(a.rate, "--rate", False) if open_loop else parse_levels(a.concurrency,
                                                                                     "--concurrency", True)
        hold, out = _hold(a.hold), out_dir(a.out, "sweep")
        report = sweep(a.target, parse_vars(a.var), send_from(a), levels, hold, out, open_loop,
                       lambda line: print(line, flush=True))
    print()
    print(text_table(LEVEL_HEADERS, table_rows(report)))
    for n in report["notes"]:
        print(f"note: {n}")
    print(f"\nwritten: {out}/sweep.json, sweep.md, sweep.html, requests.jsonl")
    return 130 if report["interrupted"] else 0


def _hold(text: str) -> float:
    hold = parse_duration(text)
    if hold < 1:
        raise ValueError(f"--hold {text!r}: hold each level at least 1 s")
    return hold


@handled
def cmd_capacity(a) -> int:
    from .capacity import capacity, print_report
    from ..common import parse_vars
    from .loadrun import out_dir, send_from
    from .search import SearchConfig
    from .slo import parse_slo

    with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
        slo = parse_slo(a.slo)
        if a.rate and a.for_concurrency is not None:
            raise ValueError("--for-concurrency sizes a concurrency search; with --rate give --for-rate")
        if not a.rate and a.for_rate is not None:
            raise ValueError("--for-rate sizes a --rate search; without --rate give --for-concurrency")
        cfg = SearchConfig(start=a.start if a.start is not None else 1.0, factor=a.factor, max_level=a.max_level,
                           max_probes=a.max_probes, max_repeats=a.max_repeats, expected=a.expected,
                           integer=not a.rate, resolution=a.resolution)
        from .hold import Holding

        hold, out = Holding(_hold(a.hold), a.looks), out_dir(a.out, "capacity")
        report = capacity(a.target, parse_vars(a.var), send_from(a), slo, cfg, hold, out, a.rate,
                          {"price_per_hour": a.price_per_hour, "price_per_1k_tokens": a.price_per_1k_tokens},
                          a.for_rate if a.rate else a.for_concurrency, lambda line: print(line, flush=True))
    print()
    print_report(report)
    print(f"\nwritten: {out}/capacity.json, capacity.md, capacity.html, probes/")
    if report["interrupted"]:
        return 130
    low = report["knee"]["low"]
    return 1 if a.expected is not None and (low is None or low < a.expected) else 0


_SCOPED = re.compile(r"^(\d+):(.*)$")


def target_vars(items: list[str], n: int) -> list[dict]:
    """--var NAME=VALUE (every target) and --var N:NAME=VALUE (the N-th, from 1) -> one dict a target."""
    from ..common import parse_vars

    common, scoped = [], {}
    for item in items or []:
        m = _SCOPED.match(item)
        if m:
            i = int(m.group(1))
            if not 1 <= i <= n:
                raise ValueError(f"--var {item!r}: there is no target {i} (targets are numbered 1 to {n})")
            scoped.setdefault(i, []).append(m.group(2))
        else:
            common.append(item)
    base = parse_vars(common)
    return [{**base, **parse_vars(scoped.get(i, []))} for i in range(1, n + 1)]


@handled
def cmd_compare(a) -> int:
    from .comparetargets import compare_targets, print_report
    from .loadrun import out_dir, parse_levels, send_from

    with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
        if len(a.targets) < 2:
            raise ValueError("compare needs two or more targets")
        levels = parse_levels(a.concurrency, "--concurrency", True)
        hold, out = _hold(a.hold), out_dir(a.out, "compare")
        report = compare_targets(a.targets, target_vars(a.var, len(a.targets)), send_from(a), levels, hold, out,
                                 a.at, progress=lambda line: print(line, flush=True))
    print()
    print_report(report)
    print(f"\nwritten: {out}/compare.json, compare.md, compare.html")
    return 130 if any(t["interrupted"] for t in report["targets"]) else 0
