"""An experiment's load: section as a typed value (LoadSpec), and the chaos.load LoadConfig it turns into, aimed at
the target's instances.

The build step makes the LoadSpec once from the checked section, so its readers (the runner, the load config,
the verdict) read fields, never keys. Values stay as written (after ${NAME}s; load.replay as found beside the
experiment): to_dict() gives the section back exactly, key order included, for what prints or hands it on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from ..common import parse_duration
from ..load.driver import LoadConfig, Timeouts
from ..load.replay.opts import ReplayOptions
from ..load.shapes import SHAPES, plan_from
from ..load.workloads import WorkloadSpec

DEFAULT_TIMEOUTS = {"connect": "5s", "first_token": "30s", "total": "120s"}


@dataclass(slots=True)
class LoadSpec:
    """Every key of the schema's LOAD; None where the section leaves a key out and no default stands for it."""

    workload: str | None = None  # chat when neither mix nor replay says otherwise
    mix: dict[str, float] | None = None
    users: int | None = None
    spawn_rate: float | None = None
    duration: str | float = "60s"
    steps: list[int] | None = None
    step_duration: str | float = "30s"
    ramp: str | None = None
    rate: float | None = None
    poisson: bool | None = None
    max_users: int | None = None
    max_requests: int | None = None
    input_tokens: object = None  # a size, a range "80-300", or a list of sizes
    output_tokens: object = None
    temperature: float = 0.0
    stream: bool = True
    seed: int = 0
    replay: str | None = None
    replay_speed: float | None = None
    replay_scrub: bool = False
    replay_filter: dict | None = None
    retries: int = 0
    workers: int = 0
    timeouts: dict | None = None
    stop_timeout: str | float | None = None
    stability: dict | None = None
    # The keys the section wrote, in its order: to_dict gives back exactly those. Built in code, the fields
    # that differ from their defaults.
    written: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self):
        if not self.written:
            self.written = tuple(f.name for f in fields(self)
                                 if f.name != "written" and getattr(self, f.name) != f.default)
        problems = conflicts(self.to_dict())
        if problems:
            path, message, _ = problems[0]
            raise ValueError(f"{'.'.join(['load', *map(str, path)])}: {message}")

    @classmethod
    def from_dict(cls, d: dict) -> LoadSpec:
        """The section as validated (the schema allows no other keys)."""
        return cls(**d, written=tuple(d))

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.written}

    @property
    def seconds(self) -> float:
        """How long the load runs (its steps, or its duration)."""
        return load_duration(self.to_dict())


def load_duration(load: dict) -> float:
    """How long a load: section runs (its steps, or its duration)."""
    if "steps" in load:
        return len(load["steps"]) * parse_duration(load.get("step_duration", "30s"))
    return parse_duration(load.get("duration", "60s"))


def conflicts(load: dict, workloads=None) -> list[tuple[tuple, str, bool]]:
    """The keys of a load: section that rule each other out, as (path below load:, message, at the key)."""
    out = []
    shapes = [k for k in SHAPES if k in load]
    if len(shapes) > 1:
        out.append(((shapes[1],), f"choose one load shape, not {' and '.join(shapes)}", False))
    if "workload" in load and "mix" in load:
        out.append((("mix",), "give workload or mix, not both", False))
    for name in (load.get("mix") or {}) if workloads is not None else ():
        if name not in workloads:
            out.append((("mix", name), f"unknown workload {name!r}", True))
    if (load.get("workload") == "replay" or "replay_speed" in load) and "replay" not in load:
        out.append(((), "the replay workload needs load.replay: FILE", False))
    return out


def load_config(load: LoadSpec, urls: list[str], model: str | None, api_key_env: str | None, out_dir: str,
                tokenizer: str = "auto", ignore_eos: bool = True, keep_alive: bool = True) -> LoadConfig:
    """ignore_eos, keep_alive: the target file's switches (false for vendors that refuse unknown fields; for
    servers that close connections they promised to keep)."""
    plan = plan_from({"stop_timeout": "5s", **load.to_dict()})  # chaos.load's plan reads the section itself
    common = dict(input_tokens=load.input_tokens, output_tokens=load.output_tokens, temperature=load.temperature)
    if load.mix is not None:
        specs = [(WorkloadSpec(name, **common), float(w)) for name, w in load.mix.items()]
    elif load.workload == "replay" or load.replay is not None:
        opts = ReplayOptions(load.replay_scrub, load.replay_filter)
        specs = [(WorkloadSpec("replay", replay_file=load.replay, temperature=load.temperature,
                               extra=opts.extra()), 1.0)]
    else:
        specs = [(WorkloadSpec(load.workload or "chat", **common), 1.0)]
    if load.stability is not None:  # identical greedy probes mixed in at a share (docs/stability.md)
        from ..load.stability import with_stability

        specs = with_stability(specs, load.stability)
    t = {**DEFAULT_TIMEOUTS, **(load.timeouts or {})}

    def dur(v):
        return "auto" if v == "auto" else parse_duration(v)

    return LoadConfig(target=urls[0], also=urls[1:], plan=plan, workload=specs, out_dir=out_dir, model=model,
                      seed=load.seed, tokenizer=tokenizer, stream=load.stream,
                      timeouts=Timeouts(parse_duration(t["connect"]), dur(t["first_token"]), dur(t["total"])),
                      retries=load.retries, api_key_env=api_key_env, ignore_eos=ignore_eos,
                      keep_alive=keep_alive, workers=load.workers)
