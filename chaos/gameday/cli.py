"""`chaos gameday SUITE`: a suite of experiments as a game day, once or on a cron schedule."""

from __future__ import annotations

import os
import signal
import sys
import time

from ..errors import handled

EPILOG = """examples:
  chaos gameday gamedays/nightly.yaml                      # once, now
  chaos gameday gamedays/nightly.yaml --var PRESET=tiny    # every experiment with --var PRESET=tiny
  chaos gameday gamedays/nightly.yaml --every "0 3 * * 1"  # Mondays 03:00 UTC, in the foreground
  chaos gameday gamedays/nightly.yaml --resume gamedays/nightly/20261204T030000Z   # finish a killed one

A suite lists experiments, each with an optional target and vars (docs/gameday.md). They run one after another;
a failed one does not stop the rest unless the suite says stop_on_failure. Each game day writes, in
--out/UTCTIME/: gameday.md, gameday.html (the key figures' trend across game days, with intervals, and the
change points in each figure's history), junit.xml and every run's own folder; and appends its figures to
--out/history.sqlite (a history this version cannot read is refused, untouched, before anything runs).
A lock keeps two game days of one folder from overlapping. Exit codes: 0 every experiment passed, 1 one failed or
was aborted, 2 invalid suite or a setup error, 4 inconclusive, 130 interrupted (the report lists what did not run).
Scheduled by cron, systemd or CI instead of --every: docs/gameday.md has each."""


def register(sub, formatter) -> None:
    p = sub.add_parser("gameday", help="run a suite of experiments as a game day (once, or --every CRON)",
                       formatter_class=formatter, epilog=EPILOG,
                       description="Run a suite's experiments one after another, write one combined report with a "
                                   "resilience score, and keep the history of every game day.")
    p.add_argument("suite", help="suite file")
    p.add_argument("--out", help="the suite's game-day folder (default gamedays/SUITE-NAME/)")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="--var for every experiment")
    p.add_argument("--every", metavar="CRON", help='run on this cron schedule (UTC), e.g. "0 3 * * 1"; in the '
                                                   "foreground until interrupted or --times")
    p.add_argument("--times", type=int, default=0, help="with --every: stop after this many game days (0: never)")
    p.add_argument("--resume", metavar="DIR", help="finish a killed game day: run only what it did not")
    p.set_defaults(func=cmd_gameday)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def exit_code(doc: dict) -> int:
    codes = [r["exit_code"] for r in doc["runs"]]
    if doc["status"] == "interrupted":
        return 130
    if 2 in codes:
        return 2
    if any(c in (1, 3) for c in codes) or doc.get("not_run"):
        return 1
    return 4 if 4 in codes else 0


def next_fire(cron: str, after: float) -> float:
    from croniter import croniter

    return croniter(cron, after).get_next(float)


def check_cron(cron: str) -> str | None:
    from croniter import croniter

    if not croniter.is_valid(cron):
        return (f"--every {cron!r} is not a cron expression: five fields, minute hour day-of-month month "
                f"day-of-week, e.g. \"0 3 * * 1\" (Mondays 03:00 UTC) or \"*/30 * * * *\"")
    return None


@handled
def cmd_gameday(a) -> int:
    from ..experiment.variables import cli_vars
    from ..suite.model import load_suite
    from .runner import run_gameday

    os.environ.setdefault("TZ", "UTC")
    suite = load_suite(a.suite, cli_vars(a.var))
    if a.every and (why := check_cron(a.every)):
        print(f"error: {why}", file=sys.stderr)
        return 2
    if a.every and a.resume:
        print("error: --resume finishes one game day; run it without --every", file=sys.stderr)
        return 2
    if a.resume and not os.path.exists(os.path.join(a.resume, "gameday.json")):
        print(f"error: {a.resume}: no gameday.json: give a game day's folder (gamedays/SUITE/UTCTIME)", file=sys.stderr)
        return 2
    folder = a.out or (os.path.dirname(os.path.abspath(a.resume)) if a.resume else os.path.join("gamedays", suite.name))
    signal.signal(signal.SIGTERM, _raise_interrupt)
    say = lambda line: print(line, flush=True)  # noqa: E731
    done, code = 0, 0
    try:
        while True:
            if a.every:
                at = next_fire(a.every, time.time())
                say(f"next game day at {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(at))}")
                while (left := at - time.time()) > 0:
                    time.sleep(min(left, 30))
            doc = run_gameday(suite, folder, say, resume=a.resume)
            code = exit_code(doc)
            day = doc["dir"]
            say(f"\ngame day {doc['suite']}: {doc['status']}, score {doc['score']}, {doc['passed']} of "
                f"{doc['experiments']} passed" + (f"; not run: {', '.join(doc['not_run'])}" if doc["not_run"] else ""))
            say(f"report: {os.path.join(day, 'gameday.md')} (and gameday.html, junit.xml); history: "
                f"{os.path.join(folder, 'history.sqlite')}")
            done += 1
            if not a.every or (a.times and done >= a.times):
                return code
    except KeyboardInterrupt:
        print("interrupted: the game day's report lists what did not run", file=sys.stderr)
        return 130
