"""Turn an experiment's load: section into a chaos.load LoadConfig aimed at the target's instances."""

from __future__ import annotations

from ..common import parse_duration
from ..load.driver import LoadConfig, Timeouts
from ..load.shapes import plan_from
from ..load.replay.opts import ReplayOptions
from ..load.workloads import WorkloadSpec

DEFAULT_TIMEOUTS = {"connect": "5s", "first_token": "30s", "total": "120s"}


def load_config(load: dict, urls: list[str], model: str | None, api_key_env: str | None, out_dir: str,
                tokenizer: str = "auto", ignore_eos: bool = True, keep_alive: bool = True) -> LoadConfig:
    """ignore_eos, keep_alive: the target file's switches (false for vendors that refuse unknown fields; for
    servers that close connections they promised to keep)."""
    plan = plan_from({"stop_timeout": "5s", **load})
    common = dict(input_tokens=load.get("input_tokens"), output_tokens=load.get("output_tokens"),
                  temperature=load.get("temperature", 0.0))
    if "mix" in load:
        specs = [(WorkloadSpec(name, **common), float(w)) for name, w in load["mix"].items()]
    elif load.get("workload") == "replay" or "replay" in load:
        opts = ReplayOptions(load.get("replay_scrub", False), load.get("replay_filter"))
        specs = [(WorkloadSpec("replay", replay_file=load["replay"], temperature=common["temperature"],
                               extra=opts.extra()), 1.0)]
    else:
        specs = [(WorkloadSpec(load.get("workload", "chat"), **common), 1.0)]
    if "stability" in load:  # identical greedy probes mixed in at a share (docs/stability.md)
        from ..load.stability import with_stability

        specs = with_stability(specs, load["stability"])
    t = {**DEFAULT_TIMEOUTS, **(load.get("timeouts") or {})}

    def dur(v):
        return "auto" if v == "auto" else parse_duration(v)

    return LoadConfig(target=urls[0], also=urls[1:], plan=plan, workload=specs, out_dir=out_dir, model=model,
                      seed=load.get("seed", 0), tokenizer=tokenizer, stream=load.get("stream", True),
                      timeouts=Timeouts(parse_duration(t["connect"]), dur(t["first_token"]), dur(t["total"])),
                      retries=load.get("retries", 0), api_key_env=api_key_env, ignore_eos=ignore_eos,
                      keep_alive=keep_alive)
