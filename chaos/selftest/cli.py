"""`chaos selftest`: hostile input against a target, and interruptions of the toolkit's own runs."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter

from ..common import command_group
from ..errors import InputError, SetupError, counts_as, handled
from .hostile import cmd_selftest


def register(sub, formatter) -> None:
    ssub = command_group(sub, "selftest", "selftest_command",
                         help="check a target against hostile input, and the toolkit against interruptions",
                         formatter_class=formatter, description="Self-tests of a target's robustness, and of the "
                                                                "toolkit's own rollback.")
    h = ssub.add_parser(
        "hostile", formatter_class=formatter, help="send every hostile request, directly and through the gateway",
        description="Send every hostile request (extreme and NaN sampling values, lone surrogates, bodies too big\n"
                    "or nested too deep, wrong types, empty input, over the context, unknown routes) to reference\n"
                    "replicas directly and through the gateway, while watching /health and the gateway's view\n"
                    "of its replicas. A good service answers each with a clear 4xx (or 200 where the input is\n"
                    "extreme but valid), never a 5xx, and keeps every count below at 0: 5xx, engine deaths,\n"
                    "replicas taken out, KV blocks leaked, /health failures, normal requests failing after.",
        epilog="exit codes: 0 every count is 0, 1 something is not, 2 setup failed\n\n"
               "examples:\n"
               "  chaos selftest hostile                         # 2 tiny replicas behind the gateway\n"
               "  chaos selftest hostile --json hostile.json\n"
               "  chaos selftest hostile --abnormal              # and ~400 generated abnormal inputs\n"
               "  chaos selftest hostile --url http://127.0.0.1:8000   # a server you run (loopback only)\n"
               "  chaos selftest hostile --url http://127.0.0.1:8000 --abnormal --record mine.json\n"
               "        # what your engine answers, kept as its own expectation table; later, after an upgrade:\n"
               "  chaos selftest hostile --url http://127.0.0.1:8000 --abnormal --expect mine.json")
    h.add_argument("--replicas", type=int, default=2, help="reference replicas behind the gateway")
    h.add_argument("--preset", default="tiny", help="reference model preset")
    h.add_argument("--url", help="instead: a running OpenAI-compatible server (cases sent directly)")
    h.add_argument("--model", help="with --url: the model to name (default: the first of /v1/models)")
    h.add_argument("--abnormal", action="store_true",
                   help="also send the generated abnormal inputs (the Big List of Naughty Strings, special "
                        "characters, repeated content, the context limit, empty input, prompt injection), each "
                        "judged on status, error.param and error.code (docs/abnormal-inputs.md)")
    h.add_argument("--record", metavar="FILE", help="with --url: write what the server answered to each case as "
                                                   "its expectation table (a 5xx stays a finding)")
    h.add_argument("--expect", metavar="FILE", help="with --url: judge each answer against a recorded table (an "
                                                   "engine's own answers) instead of the bundled server's")
    h.add_argument("--json", metavar="FILE", help="also write the counts and findings as JSON")
    h.set_defaults(func=cmd_selftest)

    from . import neighbour
    from .families import FAMILIES
    from .interrupts import HANG_S, LONG_TRIALS, SETTLE_S

    neighbour.register(ssub, formatter)

    i = ssub.add_parser(
        "interrupts", formatter_class=formatter,
        help="interrupt real runs of every fault family at random moments; check nothing is left behind",
        description="Start real runs, one fault family each, and interrupt each at a moment drawn from the seed:\n"
                    "SIGINT to its process group (Ctrl-C), SIGTERM to its pid (kill), or SIGKILL (the OOM killer,\n"
                    "then `chaos recover`). After each, every one of these must hold:\n"
                    f"  - it ended by itself within {HANG_S:.0f} s of SIGINT/SIGTERM, exit 130; recover exits 0;\n"
                    f"  - no process of the run is left {SETTLE_S:.0f} s later (journaled, or carrying its mark), "
                    "none stopped;\n"
                    "  - no toxic or proxy left on a Toxiproxy server given by URL, no container left;\n"
                    "  - the journal reads whole, and every fault it applied is reverted;\n"
                    "  - the report says interrupted (written by recover after a SIGKILL).\n\n"
                    "families:\n" + "\n".join(f"  {f.name:<11} {f.what}" for f in FAMILIES.values()),
        epilog="exit codes: 0 every trial clean, 1 a problem (each is listed), 2 setup failed, 130 interrupted "
               "(the trial under way rolls back first)\n\n"
               "examples:\n"
               "  chaos selftest interrupts                      # one trial a family (~2 minutes)\n"
               f"  chaos selftest interrupts --long               # {LONG_TRIALS} trials: every family, every signal\n"
               "  chaos selftest interrupts --family llm --family toxics --trials 12 --seed 7\n"
               "  TOXIPROXY_URL=http://127.0.0.1:8474 chaos selftest interrupts --family toxics-url")
    i.add_argument("--trials", type=int, default=0, help=f"how many; 0: one a family (--long: {LONG_TRIALS})")
    i.add_argument("--long", action="store_true", help=f"{LONG_TRIALS} trials")
    i.add_argument("--seed", type=int, default=0, help="draws the order, the signals and the moments")
    i.add_argument("--family", action="append", choices=sorted(FAMILIES), help="only these (repeatable)")
    i.add_argument("--out", help="where the trials' runs go (default runs/selftest-interrupts-<UTC time>)")
    i.add_argument("--json", metavar="FILE", help="also write every trial and the counts as JSON")
    i.set_defaults(func=cmd_interrupts)

    from .soak import CYCLE, GROWTH_MB, WINDOW_S

    k = ssub.add_parser(
        "soak", formatter_class=formatter, help="a long run with a fault of every family in turn; memory sampled",
        description="One long real run (two tiny replicas behind the gateway, steady chat load) with a fault of\n"
                    f"every family in turn, one every --period ({len(CYCLE)} kinds: an instance SIGKILLed and\n"
                    "restarted, a latency toxic, a stalled stream, an abnormal-input batch, an instance paused,\n"
                    "a link down, injected 503s, a slowed engine), while the RSS of every process of the run is\n"
                    "sampled each second. It must hold that:\n"
                    "  - the run ends by itself and every fault is reverted;\n"
                    f"  - every {WINDOW_S:g} s of the load has requests on record;\n"
                    "  - no process grows: per cycle of faults (every family once), its peak RSS; the first\n"
                    "    two cycles warm up; from four after them, the peaks' slope (MB/h) and its 95 % interval\n"
                    f"    must not be above zero by more than {GROWTH_MB:g} MB (and 10 %) over the run.",
        epilog="exit codes: 0 all holds, 1 a problem (each is listed), 2 setup failed, 130 interrupted\n\n"
               "examples:\n"
               "  chaos selftest soak                            # 30 minutes, a fault every 20 s\n"
               "  chaos selftest soak --duration 2h --json soak.json\n"
               "  chaos selftest soak --duration 110s --period 6s    # CI's: faults and flow; too short for memory")
    k.add_argument("--duration", default="30m", help="how long the load runs")
    k.add_argument("--period", default="20s", help="a fault starts every period and lasts half of it")
    k.add_argument("--out", help="where the run goes (default runs/selftest-soak-<UTC time>)")
    k.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    k.set_defaults(func=cmd_soak)


@handled
def cmd_soak(a) -> int:
    from ..common import parse_duration
    from .soak import render, soak

    with counts_as(InputError, ValueError):
        duration, period = parse_duration(a.duration), parse_duration(a.period)
    if period < 4 or duration < period + 15:
        print("error: --period must be at least 4s and --duration at least --period + 15s", file=sys.stderr)
        return 2
    out = a.out or os.path.join("runs", time.strftime("selftest-soak-%Y%m%dT%H%M%SZ", time.gmtime()))
    print(f"soak: {duration:g} s of load, a fault every {period:g} s; writing to {out}", flush=True)
    try:
        with counts_as(SetupError, OSError):
            result = soak(out, duration, period)
    except KeyboardInterrupt:
        print("interrupted (the run rolled back)", file=sys.stderr)
        return 130
    print(render(result))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if not result["problems"] else 1


@handled
def cmd_interrupts(a) -> int:
    from .families import FAMILIES, docker_missing, engines_missing, hosts_missing
    from .interrupts import LONG_TRIALS, Interrupter, plan

    names = list(dict.fromkeys(a.family or FAMILIES))
    skipped = {}
    if "docker" in names and (why := docker_missing()):
        skipped["docker"] = why
    if "hosts" in names and (why := hosts_missing()):
        skipped["hosts"] = why
    if "stack" in names and (why := engines_missing()):
        skipped["stack"] = why
    elif "stack" in names and not os.environ.get("LITELLM_MASTER_KEY"):
        os.environ["LITELLM_MASTER_KEY"] = "sk-" + secrets.token_hex(16)  # the trials' own: LiteLLM needs one
    # one trial a family that can run here (a skipped family's trial went to another, twice over, before)
    count = a.trials or (LONG_TRIALS if a.long else len([n for n in names if n not in skipped]))
    if count < 1:
        print("error: --trials must be 0 (one trial a family) or more", file=sys.stderr)
        return 2
    out = a.out or os.path.join("runs", time.strftime("selftest-interrupts-%Y%m%dT%H%M%SZ", time.gmtime()))
    os.makedirs(out, exist_ok=True)
    server, trials, interrupted = None, [], False
    try:
        with counts_as(SetupError, OSError, RuntimeError):  # a proxy, a target or a tool the trials need
            url = os.environ.get("TOXIPROXY_URL")
            if "toxics-url" in names and not url:
                server, url = _toxiproxy_server(out)
            for name, why in skipped.items():
                print(f"skipping {name}: {why}", flush=True)
            names = [n for n in names if n not in skipped]
            if not names:
                print("error: no family can run here", file=sys.stderr)
                return 2
            it = Interrupter(out, url)
            for n, (family, sig, at_s) in enumerate(plan(count, a.seed, names), 1):
                t = it.trial(n, FAMILIES[family], sig, at_s)
                trials.append(t)
                took = f"exit {t.exit_code}" + (f" {t.stop_s:.2f} s after it" if t.stop_s is not None else "")
                if t.recover_code is not None:
                    took += f", recover {t.recover_code}"
                print(f"[{n}/{count}] {family} {sig} at {at_s:.1f} s ({t.phase}): {took}: "
                      + ("clean" if not t.problems else "PROBLEMS: " + "; ".join(t.problems)), flush=True)
    except KeyboardInterrupt:  # the trial under way rolled back; the counts so far still count
        print(f"\ninterrupted after {len(trials)} trial(s)", flush=True)
        interrupted = True
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
    counts = tally(trials, skipped)
    print()
    print(render(counts))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"counts": counts, "trials": [t.to_dict() for t in trials]}, f, indent=2)
    return 130 if interrupted else 0 if counts["problems"] == 0 else 1


def tally(trials, skipped: dict) -> dict:
    stops = [t.stop_s for t in trials if t.stop_s is not None]
    by = Counter((t.family, t.signal) for t in trials)
    clean = Counter((t.family, t.signal) for t in trials if not t.problems)
    return {"trials": len(trials), "clean": sum(not t.problems for t in trials),
            "problems": sum(len(t.problems) for t in trials),
            "by_family_signal": {f"{f} {s}": [clean[f, s], n] for (f, s), n in sorted(by.items())},
            "phases": dict(Counter(t.phase for t in trials).most_common()),
            "stop_s": {"n": len(stops), "median": statistics.median(stops) if stops else None,
                       "max": max(stops) if stops else None,
                       "max_by_family": {f: max(t.stop_s for t in trials if t.family == f and t.stop_s is not None)
                                         for f in sorted({t.family for t in trials if t.stop_s is not None})}},
            "recovered": sum(t.recover_code == 0 for t in trials), "skipped": skipped,
            "findings": [f"trial {t.n} ({t.family} {t.signal} at {t.at_s} s): {p}" for t in trials for p in t.problems]}


def render(c: dict) -> str:
    lines = [f"{c['clean']} of {c['trials']} trials clean, {c['problems']} problem(s)", "",
             "family / signal        clean / trials"]
    lines += [f"  {k:<22} {v[0]} / {v[1]}" for k, v in c["by_family_signal"].items()]
    lines += ["", "where the signal landed (the journal's last event): " +
              ", ".join(f"{k} {v}" for k, v in c["phases"].items())]
    s = c["stop_s"]
    if s["n"]:
        lines.append(f"SIGINT/SIGTERM to exit, everything reverted: median {s['median']:.2f} s, max {s['max']:.2f} s "
                     f"(n={s['n']}); slowest by family: "
                     + ", ".join(f"{f} {v:.2f} s" for f, v in s["max_by_family"].items()))
    lines.append(f"SIGKILLed runs recovered by `chaos recover`: {c['recovered']}")
    lines += [f"skipped {k}: {v}" for k, v in c["skipped"].items()]
    lines += ["", "problems:"] + [f"  - {f}" for f in c["findings"]] if c["findings"] else []
    return "\n".join(lines)


def _toxiproxy_server(out: str):
    """A Toxiproxy API standing in for a user's own: toxiproxy-server if on PATH, else the bundled one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    binary = shutil.which("toxiproxy-server")
    cmd = ([binary, "-host", "127.0.0.1", "-port", str(port)] if binary else
           [sys.executable, "-m", "chaos", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port)])
    log = open(os.path.join(out, "toxiproxy-server.log"), "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(url + "/version", timeout=1).read()
            return proc, url
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"the Toxiproxy server did not start (see {out}/toxiproxy-server.log)") from None
            time.sleep(0.1)
