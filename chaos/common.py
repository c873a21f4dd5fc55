"""Small helpers that several packages need: durations, percentages, Retry-After, OpenAI's error shape, loopback
addresses, the fault token's names, a command group's parser, stopping a process group.

Standard library and psutil only, and nothing else of the toolkit: the bundled reference server
(chaos/reference/) imports this module and nothing else outside its own package, so lifting the server out
takes this one file with it.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import signal
import subprocess
import time

import psutil

# -- durations and percentages ------------------------------------------------------------------------------

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_duration(text) -> float:
    """'90s', '2m', '1.5h', '250ms' or a number of seconds: finite and not negative (what bounds it further
    is the caller's to say)."""
    if isinstance(text, bool):
        raise ValueError(f"bad duration {text!r}: write e.g. 30s, 2m, 1h or 250ms")
    if isinstance(text, (int, float)):
        v = _finite_float(text)
    else:
        m = _DURATION.match(str(text))
        if not m:
            raise ValueError(f"bad duration {text!r}: write e.g. 30s, 2m, 1h or 250ms")
        v = float(m.group(1)) * {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[m.group(2)]
    if not math.isfinite(v) or v < 0:
        raise ValueError(f"bad duration {text!r}: a duration is a finite number of seconds, 0 or more")
    return v


def parse_percent(v) -> float:
    """'5%', '0.1%' or a fraction (0.05) -> a fraction from 0 to 1."""
    if isinstance(v, str):
        m = _PERCENT.match(v)
        if not m:
            raise ValueError(f"bad percentage {v!r}: write e.g. 0.1%, 50% or a fraction such as 0.05")
        out = float(m.group(1)) / 100
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        out = _finite_float(v)
    else:
        raise ValueError(f"bad percentage {v!r}: write e.g. 0.1%, 50% or a fraction such as 0.05")
    if not 0 <= out <= 1:  # NaN fails this too
        raise ValueError(f"bad percentage {v!r}: a fraction is from 0 to 1 (0% to 100%)")
    return out


def _finite_float(v: int | float) -> float:
    try:
        return float(v)
    except OverflowError:  # an int past float's range: as out of range as inf
        return math.inf


# -- Retry-After ---------------------------------------------------------------------------------------------

def env_text(env: dict | None) -> dict[str, str]:
    """A target file's env: values as a process gets them (a variable may have made one a number or a boolean:
    `true`/`false`, as most programs read them)."""
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in (env or {}).items()}


def parse_vars(items) -> dict[str, str]:
    """--var NAME=VALUE options (repeatable) as a dict; ValueError says how to write a bad one."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--var {item!r}: write NAME=VALUE, e.g. --var PRESET=tiny")
        out[name.strip()] = value
    return out


def parse_retry_after(headers) -> float | None:
    """Seconds to wait from retry-after-ms or retry-after (seconds); None when absent or unreadable."""
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    s = headers.get("retry-after")
    try:
        v = float(ms) / 1000 if ms else (float(s) if s else None)
    except ValueError:
        return None
    return v if v is not None and math.isfinite(v) and v >= 0 else None


def retry_after_headers(seconds: float) -> dict[str, str]:
    """Retry-After in whole seconds rounded up (a client that waits what it says never comes back early; at
    least 1), and retry-after-ms exact."""
    return {"retry-after": str(max(1, math.ceil(seconds - 1e-9))), "retry-after-ms": str(max(0, round(seconds * 1000)))}


# -- OpenAI's error shape ------------------------------------------------------------------------------------

def openai_error(message: str, type_: str = "server_error", code: str | None = None, param: str | None = None) -> dict:
    """The body every OpenAI-compatible error carries: the reference server, its gateway and the LLM fault proxy
    all answer in it, so a client's error handling sees one shape whichever of them answered."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_type_for(status: int) -> str:
    """OpenAI's error.type for an HTTP status."""
    return "requests" if status == 429 else "server_error" if status >= 500 else "invalid_request_error"


# -- addresses and the fault token ------------------------------------------------------------------------

FAULT_TOKEN_ENV = "CHAOS_FAULT_TOKEN"  # where a replica with fault hooks reads its token
FAULT_TOKEN_HEADER = "x-chaos-fault-token"  # where a request to its fault routes carries it


def is_loopback(host: str | None) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (brackets allowed). Any other name may resolve anywhere: not loopback."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- the event loop ------------------------------------------------------------------------------------------

EVENT_LOOP_ENV = "CHAOS_EVENT_LOOP"  # "uvloop" (the default where it is installed) or "asyncio"


def event_loop_factory():
    """(name, factory) of the event loop the proxies, the gateway and the reference server run on: uvloop where it
    is installed (pip install 'llm-chaos[fast]'), unless CHAOS_EVENT_LOOP=asyncio; asyncio's own otherwise."""
    wanted = os.environ.get(EVENT_LOOP_ENV, "uvloop").strip().lower()
    if wanted not in ("uvloop", "asyncio"):
        raise ValueError(f"{EVENT_LOOP_ENV}={wanted!r}: write uvloop or asyncio")
    if wanted == "uvloop":
        try:
            import uvloop
        except ImportError:
            pass  # the clean fallback: an optional dependency
        else:
            return "uvloop", uvloop.new_event_loop
    import asyncio

    return "asyncio", asyncio.new_event_loop


def running_loop_name() -> str:
    """"uvloop" or "asyncio": what the servers say when they start, so a user (and a bench) sees which it got."""
    import asyncio

    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def run_event_loop(main):
    """asyncio.run(main) on event_loop_factory()'s loop."""
    import asyncio

    with asyncio.Runner(loop_factory=event_loop_factory()[1]) as runner:
        return runner.run(main)


# -- command lines ------------------------------------------------------------------------------------------

def command_group(sub, name: str, dest: str, metavar: str = "SUBCOMMAND", **parser_args):
    """A command that only holds subcommands (`chaos reference`, `chaos selftest`, `chaos proxy`): the action to
    add them to. Given none of them, it prints its help and exits 2, as `chaos` itself does given no command."""
    p = sub.add_parser(name, **parser_args)
    p.set_defaults(func=lambda a: (p.print_help(), 2)[1])
    return p.add_subparsers(dest=dest, metavar=metavar)


# -- processes -----------------------------------------------------------------------------------------------

def count_lines(path: str) -> int:
    """Lines in a file (records in a requests.jsonl), 0 when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


def same_process(pid: int | None, create_time: float | None) -> bool:
    """True if pid is still the process we started (not a recycled number)."""
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False  # dead, waiting to be reaped
        return create_time is None or abs(p.create_time() - create_time) < 0.5
    except psutil.Error:
        return False


def signal_group(pid: int | None, create_time: float | None, sig: int) -> bool:
    """Signal the process group we started (its leader's pid). False if it is gone or not ours."""
    if not same_process(pid, create_time):
        return False
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_group(pid: int | None, create_time: float | None, grace: float = 10.0,
               proc: subprocess.Popen | None = None) -> None:
    """SIGTERM the group, wait up to grace, then SIGKILL whatever of it is left. A pid that now belongs to
    another process (its start time differs) is never signalled, nor its group: Linux does not reuse a pid
    while a group of that id lives, so our group is gone already."""
    if pid is None:
        return
    if same_process(pid, create_time):
        try:
            os.killpg(pid, signal.SIGCONT)  # a paused group cannot drain
            os.killpg(pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and same_process(pid, create_time) and not _reaped(proc):
            time.sleep(0.05)
    elif psutil.pid_exists(pid) and not _is_zombie(pid):
        return  # someone else's process now
    try:
        os.killpg(pid, signal.SIGKILL)  # the group: children the leader left behind go too
    except (ProcessLookupError, PermissionError):
        pass
    if proc is not None:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


def _is_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.Error:
        return True  # gone meanwhile


def _reaped(proc) -> bool:
    return proc is not None and proc.poll() is not None
