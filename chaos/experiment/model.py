"""Experiments as typed objects, built from validated files with semantic checks of their own."""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field

from ..common import parse_duration, parse_percent
from ..load.shapes import SHAPES
from . import schema as S
from .loader import ExperimentError, Located, locate_target, read_file, substitute, validate


@dataclass(slots=True)
class SLO:
    p50_latency: float | None = None
    p95_latency: float | None = None
    p99_latency: float | None = None
    ttft_p95: float | None = None
    ttft_p99: float | None = None
    error_rate: float | None = None

    @classmethod
    def from_dict(cls, d: dict | None) -> "SLO":
        d = d or {}
        return cls(**{k: (parse_percent(v) if k == "error_rate" else parse_duration(v)) for k, v in d.items()})

    def is_empty(self) -> bool:
        return all(getattr(self, f) is None for f in self.__slots__)


@dataclass(slots=True)
class TargetSpec:
    kind: str
    name: str
    settings: dict  # the validated mapping, durations left as written
    source: str  # file it came from
    replicas: int = 1
    startup_timeout: float = 60.0

    @property
    def starts_processes(self) -> bool:
        return self.kind in ("reference", "process", "docker")


@dataclass(slots=True)
class FaultSpec:
    index: int
    type: str
    at: float
    name: str
    params: dict  # everything but type/at/name, durations parsed


@dataclass(slots=True)
class Experiment:
    name: str
    description: str
    path: str
    target: TargetSpec
    load: dict
    steady_window: float = 10.0
    steady_slo: SLO = field(default_factory=SLO)
    steady_health: bool = True
    faults: list[FaultSpec] = field(default_factory=list)
    verify: dict = field(default_factory=dict)
    abort_error_rate: float | None = None
    abort_for: float = 10.0
    resolved: dict = field(default_factory=dict)  # the document after ${VAR} substitution

    @property
    def load_duration(self) -> float:
        return load_duration(self.load)


def load_duration(load: dict) -> float:
    """How long a load: section runs (its steps, or its duration)."""
    if "steps" in load:
        return len(load["steps"]) * parse_duration(load.get("step_duration", "30s"))
    return parse_duration(load.get("duration", "60s"))


DURATION_PARAMS = {"restart_after", "duration"}


def load_target(path_or_doc, cli_vars: dict | None = None) -> tuple[TargetSpec, dict]:
    doc = read_file(path_or_doc) if isinstance(path_or_doc, str) else path_or_doc
    problems = substitute(doc, {**os.environ, **(cli_vars or {})}) or validate(doc, S.TARGET_FILE)
    if problems:
        raise ExperimentError(problems)
    return _target_spec(doc.data, doc.file), doc.data


def _target_spec(d: dict, source: str) -> TargetSpec:
    return TargetSpec(kind=d["kind"], name=d.get("name") or d["kind"], settings=d, source=source,
                      replicas=int(d.get("replicas", 1)),
                      startup_timeout=parse_duration(d.get("startup_timeout", 120 if d["kind"] == "docker" else 60)))


def load_experiment(path: str, cli_vars: dict[str, str] | None = None) -> Experiment:
    doc = read_file(path)
    if not isinstance(doc.data, dict):
        raise ExperimentError([f"{path}:1:1: an experiment file is a mapping (name:, target:, load:, ...)"])
    declared = doc.data.get("vars") if isinstance(doc.data.get("vars"), dict) else {}
    # --var beats the environment, which beats the file's declared defaults.
    variables = {**{k: str(v) for k, v in declared.items()}, **os.environ, **(cli_vars or {})}
    problems = substitute(doc, variables)
    if problems:  # the unresolved values would only add confusing type errors
        raise ExperimentError(problems)
    problems = validate(doc, S.EXPERIMENT)
    if problems:
        raise ExperimentError(problems)
    d = doc.data

    # The target: a file (validated against the target schema, with its own positions) or inline.
    tref = d["target"]
    if isinstance(tref, str):
        found = locate_target(tref, path)
        if found is None:
            raise ExperimentError([doc.problem(("target",), f"target file {tref!r} not found (looked beside "
                                                            f"{path} and in the current directory)")])
        tdoc = read_file(found)
        tprobs = substitute(tdoc, variables) or validate(tdoc, S.TARGET_FILE)
        if tprobs:
            raise ExperimentError(tprobs)
        target = _target_spec(tdoc.data, found)
        target_doc = tdoc.data
    else:
        tprobs = validate(doc, S.TARGET_FILE, base=("target",))
        if tprobs:
            raise ExperimentError(tprobs)
        target = _target_spec(tref, path)
        target_doc = tref

    problems += _semantic_checks(doc, target)
    if isinstance(d["load"].get("replay"), str):
        found = locate_target(d["load"]["replay"], path)
        if found is None:
            problems.append(doc.problem(("load", "replay"), f"replay file {d['load']['replay']!r} not found "
                                                            f"(looked beside {path} and in the current directory)"))
        else:
            d["load"]["replay"] = found
    if problems:
        raise ExperimentError(problems)

    ss = d.get("steady_state") or {}
    faults = []
    for i, f in enumerate(d.get("faults") or []):
        params = {k: (parse_duration(v) if k in DURATION_PARAMS else v) for k, v in f.items()
                  if k not in ("type", "at", "name")}
        faults.append(FaultSpec(i, f["type"], parse_duration(f["at"]), f.get("name") or f"{f['type']}#{i}", params))
    abort = d.get("abort_when") or {}
    resolved = copy.deepcopy(d)
    resolved["target"] = target_doc
    return Experiment(name=d["name"], description=d.get("description", ""), path=path, target=target,
                      load=d["load"], steady_window=parse_duration(ss.get("window", "10s")),
                      steady_slo=SLO.from_dict(ss.get("slo")), steady_health=ss.get("health", True),
                      faults=faults, verify=d.get("verify") or {},
                      abort_error_rate=parse_percent(abort["error_rate"]) if "error_rate" in abort else None,
                      abort_for=parse_duration(abort.get("for", "10s")), resolved=resolved)


def _semantic_checks(doc: Located, target: TargetSpec) -> list[str]:
    d, problems = doc.data, []
    load = d["load"]
    shapes = [k for k in SHAPES if k in load]
    if len(shapes) > 1:
        problems.append(doc.problem(("load", shapes[1]), f"choose one load shape, not {' and '.join(shapes)}"))
    if "workload" in load and "mix" in load:
        problems.append(doc.problem(("load", "mix"), "give workload or mix, not both"))
    for name in (load.get("mix") or {}):
        if name not in S.LOAD["properties"]["workload"]["enum"]:
            problems.append(doc.problem(("load", "mix", name), f"unknown workload {name!r}", key=True))
    if (load.get("workload") == "replay" or "replay_speed" in load) and "replay" not in load:
        problems.append(doc.problem(("load",), "the replay workload needs load.replay: FILE"))
    total = load_duration(load)
    for i, f in enumerate(d.get("faults") or []):
        at = parse_duration(f["at"])
        if at >= total:
            problems.append(doc.problem(("faults", i, "at"), f"at {at:g}s is not before the end of the load "
                                                             f"({total:g}s): the fault would never run"))
        if f["type"] in ("kill_instance", "pause_instance", "server_hook") and not target.starts_processes:
            problems.append(doc.problem(("faults", i, "type"), f"{f['type']} needs a target the run starts "
                                                               f"(reference, process, docker), not {target.kind}"))
        if f["type"] == "server_hook" and target.kind != "reference":
            problems.append(doc.problem(("faults", i, "type"), "server_hook needs a reference target"))
        if f["type"] == "server_hook" and not any(k in f for k in ("step_delay_ms", "hang_s", "kv_block_cap",
                                                                     "fail_fraction")):
            problems.append(doc.problem(("faults", i), "server_hook needs one of step_delay_ms, hang_s, "
                                                       "kv_block_cap, fail_fraction"))
        inst = f.get("instance")
        ids = {f"r{i}" for i in range(target.replicas)} | {
            f"b{i}" for i in range(((target.settings.get("gateway") or {}).get("backup") or {}).get("replicas", 0))} | (
            {"gw"} if target.settings.get("gateway") is not None else set())
        if target.kind == "reference" and isinstance(inst, str) and inst not in ("random", "all") and inst not in ids:
            problems.append(doc.problem(("faults", i, "instance"), f"no instance {inst!r}; this target has "
                                                                   f"{', '.join(sorted(ids))}"))
        if isinstance(inst, int) and inst >= target.replicas:
            problems.append(doc.problem(("faults", i, "instance"), f"instance {inst} does not exist: the target "
                                                                   f"has {target.replicas} (0-{target.replicas - 1})"))
        if f.get("count", 1) > target.replicas:
            problems.append(doc.problem(("faults", i, "count"), f"count {f['count']} exceeds the "
                                                                f"{target.replicas} instances"))
    return problems
