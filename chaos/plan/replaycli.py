"""`chaos replay LOGFILE TARGET`: replay a log or trace once, outside an experiment, and say what came of it.

It lives beside the load because it drives it: the sending is this package's driver (its timed Replayer, or its
users / rate plans with --fast), reading the log through chaos.replay (which knows nothing of the load); a
target file is started and stopped with chaos.targets, as `chaos run` does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from urllib.parse import urlparse

from ..common import count_lines
from ..errors import ChaosError, InputError, SetupError, counts_as, report
from ..rundir.files import JOURNAL, REPLAY_SUMMARY, REQUESTS
from ..rundir.journal import Event
from ..rundir.procs import RUN_ID_ENV

EXIT_OK, EXIT_NOT_SENT, EXIT_INTERRUPTED = 0, 1, 130  # and an error's, from chaos.errors' table

EPILOG = """examples:
  chaos replay prod.jsonl http://127.0.0.1:8000                    # the log's own timing
  chaos replay prod.jsonl http://127.0.0.1:8000 --speed 10 --scrub --max-requests 2000
  chaos replay azure_conv_2023.csv targets/reference.yaml --speed 4 # starts the target, stops it after
  chaos replay prod.jsonl targets/reference.yaml --fast --users 8 --filter "status=400,5xx"
  chaos replay prod.jsonl http://127.0.0.1:8000 --fast --rate 20 --no-stream

Timing: --speed X sends each request at the log's own time divided by X (open loop: a late send is never
caught up by spacing the rest; the lag, actual - intended send time, is reported as P50/P99/max). --fast ignores
the log's times and sends as fast as --users (closed loop, default 4) or --rate allow.
Every readable line is sent once (the first --max-requests of them), in log order; a line that cannot be read is
reported by its line number and never stops the replay; lines the --filter drops are counted as filtered.
Writes requests.jsonl (each record has its source_line), summary.json, replay-summary.json and Locust's files in
--out, and the logs of a target it started.

exit status: 0 every request was sent (whatever the target answered: failures are listed by source line);
1 some request was not sent (the summary says which lines and why); 2 the replay could not start (bad
arguments, unreadable log, target not reachable or failed to start); 130 interrupted (Ctrl-C)."""


def register(sub, formatter) -> None:
    p = sub.add_parser("replay", help="replay a request log or trace once against a URL or a target file",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Replay LOGFILE (OpenAI bodies, envelopes, Azure / BurstGPT / Mooncake traces; "
                                   "docs/replay.md) against TARGET and report sent / not sent / filtered / "
                                   "unreadable lines, the send lag, outcomes and status codes, and the failed "
                                   "requests by source line.")
    p.add_argument("logfile", help="the log or trace (JSONL, CSV, optionally gzip)")
    p.add_argument("target", help="a URL (http://127.0.0.1:8000; loopback only unless --allow-remote) or a target "
                                  "file (targets/reference.yaml), which is started and stopped")
    g = p.add_argument_group("timing")
    t = g.add_mutually_exclusive_group()
    t.add_argument("--speed", type=float, default=None, metavar="X",
                   help="the log's own timing, X times faster (default 1)")
    t.add_argument("--fast", action="store_true", help="ignore the log's times: as fast as --users/--rate allow")
    g.add_argument("--users", type=int, help="--fast: concurrent users, closed loop (default 4)")
    g.add_argument("--rate", type=float, help="--fast: arrivals per second, open loop")
    g.add_argument("--max-users", type=int, default=256, help="most requests in flight (timed replay, --rate)")
    g.add_argument("--duration", default="24h", help="upper bound on the whole replay")
    g = p.add_argument_group("what to send")
    g.add_argument("--scrub", action="store_true", help="redact secrets and personal data from every request "
                                                        "before it is sent or stored (counts per kind reported)")
    g.add_argument("--filter", metavar="FILTER", help="e.g. 'status=400,5xx error_code=context_length_exceeded "
                                                      "min_input_tokens=10 max_input_tokens=2000'")
    g.add_argument("--max-requests", type=int, help="replay only the first N requests of the log")
    g.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True, help="streamed requests")
    g.add_argument("--model", help="model id (default: the target's, else the first of GET /v1/models)")
    g.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the API key (URL targets)")
    g.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="a variable of the target file (e.g. --var PRESET=tiny); repeatable")
    g.add_argument("--allow-remote", action="store_true", help="allow a TARGET URL that is not on loopback")
    g.add_argument("--timeout-first-token", default="60s")
    g.add_argument("--timeout-total", default="300s")
    g = p.add_argument_group("output")
    g.add_argument("--out", help="output directory (default runs/replay-<UTC time>)")
    g.add_argument("--interval", type=float, default=5.0, help="seconds between progress lines (0: none)")
    p.set_defaults(func=cmd_replay)


def _on_term(signum, frame):
    raise KeyboardInterrupt  # SIGTERM cleans up as Ctrl-C does: stop Locust, stop what was started


def cmd_replay(a) -> int:
    out = a.out or os.path.join("runs", time.strftime("replay-%Y%m%dT%H%M%SZ", time.gmtime()))
    previous = signal.signal(signal.SIGTERM, _on_term)
    target = journal = None
    old_mark = os.environ.get(RUN_ID_ENV)
    try:
        # Said here, not by the command line: before the target that started is stopped (finally, below).
        try:
            with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
                opts, window, unreadable = _prepare(a)
                os.makedirs(out, exist_ok=True)
                if urlparse(a.target).scheme not in ("http", "https"):
                    journal = _journal(out)  # it starts a target: journaled, so `chaos recover OUT` can stop it
                target, urls, model, key_env, spec = _target(a, out, journal)
                cfg = _config(a, opts, window, urls, model, key_env, out, target, spec)
        except ChaosError as e:
            return report(e)
        from ..load.driver import run_load

        mode = f"x{cfg.plan.replay_speed:g} of its timing" if cfg.plan.replay_speed else f"fast ({cfg.plan.kind})"
        print(f"replay: {a.logfile} -> {', '.join(urls)}, {mode}; writing to {out}", flush=True)
        try:
            with counts_as(InputError, ValueError), counts_as(SetupError, OSError):
                result = run_load(cfg, progress=lambda line: print(line, flush=True), interval=a.interval)
        except ChaosError as e:
            return report(e)
        if journal is not None:
            journal.write(Event.LOAD_STOPPED, interrupted=result.interrupted)
        from ..load.replay.summary import build_summary, format_summary

        summary = build_summary(result, a.logfile, a.target, window, unreadable)
        with open(os.path.join(out, REPLAY_SUMMARY), "w") as f:
            json.dump(summary, f, indent=2)
        print()
        print(format_summary(summary))
        print()
        print(result.table())
        for n in result.notes:
            print(f"note: {n}")
        print(f"\nrecords: {result.records_path}\nsummary: {os.path.join(out, 'replay-summary.json')}")
        if result.interrupted:
            return EXIT_INTERRUPTED
        if summary["not_sent"]:
            print(f"error: {summary['not_sent']} of {summary['window']} requests were not sent", file=sys.stderr)
            return EXIT_NOT_SENT
        return EXIT_OK
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        summary = os.path.join(out, REPLAY_SUMMARY)
        if os.path.isdir(out) and not os.path.exists(summary):  # before the load began, or SIGTERM during it
            with open(summary, "w") as f:
                json.dump({"log": a.logfile, "target": a.target, "interrupted": True,
                           "records": count_lines(os.path.join(out, REQUESTS)),
                           "note": "interrupted before the replay could account for its requests"}, f, indent=2)
        return EXIT_INTERRUPTED
    finally:
        if target is not None:
            print(f"stopping the target {target.spec.name} ...", flush=True)
            target.down(grace=5)
            journal.write(Event.TARGET_STOPPED)
        if journal is not None:
            journal.close()
            _restore(old_mark)
        signal.signal(signal.SIGTERM, previous)


def _journal(out: str):
    """The replay's journal, and its mark (CHAOS_RUN_ID: this folder) on every process it starts from now on,
    as `chaos run` does: Locust's and the target's, found by `chaos recover` even outside their groups."""
    import psutil

    from ..rundir.journal import Journal
    from ..rundir.procs import run_id_for

    journal = Journal(os.path.join(out, JOURNAL))
    me = psutil.Process()
    journal.write(Event.RUN_STARTED, command="replay", pid=me.pid, create_time=me.create_time(),
                  run_dir=os.path.abspath(out), run_id=run_id_for(out))
    os.environ[RUN_ID_ENV] = run_id_for(out)
    return journal


def _restore(old_mark: str | None) -> None:
    if old_mark is None:
        os.environ.pop(RUN_ID_ENV, None)
    else:
        os.environ[RUN_ID_ENV] = old_mark


def _prepare(a):
    """(replay options, requests owed or None for a timed replay, unreadable lines) from one streamed read."""
    from .loadcli import replay_options
    from ..load.replay.log import log_entries
    from ..load.replay.opts import FILTERED

    if a.speed is not None and a.speed <= 0:
        raise ValueError("--speed must be > 0")
    if (a.users or a.rate) and not a.fast:
        raise ValueError("--users and --rate set the pace of --fast; a timed replay (--speed) keeps the log's own")
    if a.users and a.rate:
        raise ValueError("give --users or --rate, not both")
    if a.max_requests is not None and a.max_requests < 1:
        raise ValueError("--max-requests must be >= 1")
    if not os.path.isfile(a.logfile):
        raise ValueError(f"{a.logfile}: no such file")
    opts = replay_options(a.scrub, a.filter)
    if not a.fast:
        return opts, None, None  # the Replayer accounts for every line itself
    readable, unreadable, first_error = 0, {"count": 0, "lines": []}, None
    for lineno, e, error in log_entries(a.logfile, opts):
        if error == FILTERED:
            continue
        if error:
            unreadable["count"] += 1
            first_error = first_error or error
            if len(unreadable["lines"]) < 20:
                unreadable["lines"].append(lineno)
            continue
        readable += 1
        if a.max_requests and readable >= a.max_requests:
            break
    if not readable:
        lines = ", ".join(map(str, unreadable["lines"])) + (" ..." if unreadable["count"] > 20 else "")
        raise ValueError(f"{a.logfile}: no request in it can be sent" + (
            f" (unreadable lines {lines}; the first: {first_error})" if first_error else ""))
    return opts, readable, unreadable


def _target(a, out, journal=None):
    """(started target or None, urls, model, api key variable, its target file's spec or None)."""
    u = urlparse(a.target)
    if u.scheme in ("http", "https"):
        from ..common import is_loopback

        if not is_loopback(u.hostname) and not a.allow_remote:  # 127.0.0.0/8, ::1, localhost
            raise InputError(f"{a.target} is not on loopback; pass --allow-remote to replay against it")
        return None, [a.target], a.model, a.api_key_env, None
    if not os.path.isfile(a.target):
        raise InputError(f"TARGET {a.target!r} is neither a URL (http://127.0.0.1:8000) nor a target file")
    from ..common import parse_vars
    from ..experiment.loader import ExperimentError
    from ..experiment.model import load_target
    from ..targets import TargetError, make_target

    try:
        spec, _ = load_target(a.target, parse_vars(a.var))  # a bad item: ValueError, shown as cmd_replay shows it
    except ExperimentError as e:
        raise InputError(f"{a.target}: {e}") from None
    from ..rundir.journal import journal_spawn

    target = make_target(spec, out)
    target.on_spawn = lambda inst: journal_spawn(journal, inst)
    print(f"starting the target {spec.name} ({spec.kind}) ...", flush=True)
    try:
        target.up()
    except TargetError as e:
        target.down(grace=1)
        raise SetupError(f"the target did not start: {e}") from None
    except BaseException:
        target.down(grace=1)
        raise
    finally:  # what exists, even if up failed half way
        journal.write(Event.TARGET_STARTED, instances=[i.journal() for i in target.all_instances()])
    return target, target.urls, a.model or target.model, target.api_key_env, spec


def _config(a, opts, window, urls, model, key_env, out, target=None, target_spec=None):
    """The load's settings; a target file's switches (ignore_eos, keep_alive), how it counts tokens and which
    replica each URL is, as `chaos run` takes them."""
    from ..common import parse_duration
    from ..load.driver import LoadConfig, Timeouts, take_target
    from ..load.shapes import plan_from
    from ..load.workloads import WorkloadSpec

    shape = {"duration": a.duration, "max_users": a.max_users, "stop_timeout": "5s"}
    if a.fast:
        shape.update(max_requests=window, **({"rate": a.rate} if a.rate else {"users": a.users or 4}))
    else:
        shape.update(replay_speed=a.speed or 1.0, max_requests=a.max_requests)
    spec = WorkloadSpec("replay", replay_file=a.logfile, extra=opts.extra())
    cfg = LoadConfig(target=urls[0], also=urls[1:], plan=plan_from(shape), workload=[(spec, 1.0)], out_dir=out,
                     model=model, stream=a.stream, api_key_env=key_env,
                     timeouts=Timeouts(10.0, parse_duration(a.timeout_first_token), parse_duration(a.timeout_total)))
    take_target(cfg, target_spec, target)
    return cfg
