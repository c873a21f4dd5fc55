"""What the three plan commands share: the options of what to send (the same for every level and target), the
output directory, and one bounded load against a reached target, through the project's load driver."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..common import parse_duration
from ..load.driver import LoadConfig, Timeouts, run_load, take_target
from ..load.shapes import arrival_rate, steps
from ..load.workloads import WorkloadSpec

# Users started per second: a level's users all start within its first second (up to 100), so a short hold
# measures its own concurrency rather than the ramp to it.
SPAWN_RATE = 100.0


@dataclass(slots=True)
class Send:
    """What every request of a plan command looks like: one dataset (workload + seed), one output limit, one
    timeout, whatever the level or target."""

    workload: str = "rag"
    input_tokens: str | None = None
    output_tokens: str | None = None
    seed: int = 0
    timeout_first_token: float = 60.0
    timeout_total: float = 300.0
    model: str | None = None
    api_key_env: str | None = None  # a URL target's key variable (a target file names its own)
    stop_timeout: float = 10.0

    def __post_init__(self):
        WorkloadSpec(self.workload, self.input_tokens, self.output_tokens)  # refuses an unknown name or size now
        if self.timeout_first_token <= 0 or self.timeout_total <= 0:
            raise ValueError("timeouts must be above 0 s")

    def specs(self) -> list:
        return [(WorkloadSpec(self.workload, self.input_tokens, self.output_tokens), 1.0)]


def add_send_options(p) -> None:
    g = p.add_argument_group("what to send (the same for every level and every target)")
    g.add_argument("--workload", default="rag", help="chat, completion, rag, long, prefix or json (docs/load.md)")
    g.add_argument("--input-tokens", help="override the workload's input size: N or LO-HI")
    g.add_argument("--output-tokens", help="the output limit (max_tokens): N or LO-HI")
    g.add_argument("--seed", type=int, default=0, help="the dataset: the same seed sends the same requests")
    g.add_argument("--timeout", default="300s", help="a request's total timeout")
    g.add_argument("--timeout-first-token", default="60s")
    g.add_argument("--model", help="model id (default: the target's first)")
    g.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="set ${NAME} in a target file, e.g. --var PRESET=tiny")
    g.add_argument("--api-key-env", metavar="VAR", help="a URL target's API key variable (a file names its own)")
    g.add_argument("--out", help="output directory (default reports/<command>-<UTC time>)")


def send_from(a) -> Send:
    return Send(a.workload, a.input_tokens, a.output_tokens, a.seed, parse_duration(a.timeout_first_token),
                parse_duration(a.timeout), a.model, a.api_key_env)


def out_dir(given: str | None, command: str) -> str:
    return given or os.path.join("reports", time.strftime(f"{command}-%Y%m%dT%H%M%SZ", time.gmtime()))


def parse_levels(text: str, what: str, integer: bool) -> list[float]:
    """'10,50,100' -> [10, 50, 100]: positive, increasing, no repeats."""
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what} {text!r}: write numbers separated by commas, e.g. 10,50,100") from None
    if not vals or any(not v > 0 for v in vals) or (integer and any(v != int(v) for v in vals)):
        kind = "whole numbers of users" if integer else "rates above 0"
        raise ValueError(f"{what} {text!r}: give {kind}, e.g. 10,50,100")
    if vals != sorted(set(vals)):
        raise ValueError(f"{what} {text!r}: give each level once, in increasing order")
    return [int(v) if integer else v for v in vals]


def run_levels(r, send: Send, levels: list, hold: float, out: str, open_loop: bool = False,
               progress=print, max_users: int = 256):
    """One load of `levels` (users, or arrivals/s when open_loop), each held `hold` seconds, against the reached
    target r. Returns the driver's LoadResult; the records are in out/requests.jsonl, each labelled with its
    step ("users=50" or "rate=8/s")."""
    return run_load(load_config(r, send, levels, hold, out, open_loop, max_users), progress=progress, interval=0)


def load_config(r, send: Send, levels: list, hold: float, out: str, open_loop: bool = False,
                max_users: int = 256) -> LoadConfig:
    """The load of run_levels, not started (chaos.plan.hold drives one itself)."""
    plan = (arrival_rate([float(x) for x in levels], hold, False, max_users, stop_timeout=send.stop_timeout)
            if open_loop else steps([int(x) for x in levels], hold, SPAWN_RATE, stop_timeout=send.stop_timeout))
    kw = {}
    if "limits" in LoadConfig.__dataclass_fields__ and getattr(r, "limits", None) is not None:
        kw["limits"] = r.limits
    cfg = LoadConfig(target=r.base_url, plan=plan, workload=send.specs(), out_dir=out,
                     model=send.model or r.model or None, seed=send.seed,
                     timeouts=Timeouts(10.0, send.timeout_first_token, send.timeout_total),
                     api_key_env=r.api_key_env, also=list(r.urls[1:]), ignore_eos=r.ignore_eos, **kw)
    take_target(cfg, getattr(r, "spec", None), getattr(r, "target", None))  # as chaos run takes a target file
    return cfg


def step_name(level, open_loop: bool) -> str:
    """The step label the load plan gives a level (chaos.load.shapes)."""
    return f"rate={float(level):g}/s" if open_loop else f"users={int(level)}"


def replicas(r) -> int:
    spec = getattr(r, "spec", None)
    return max(1, int(getattr(spec, "replicas", 1) or 1)) if spec is not None else 1
