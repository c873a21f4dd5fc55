"""Experiments as typed objects, built from validated files with semantic checks of their own.

Everything a run may write about an experiment comes from its public form: labels (description, names) and
`resolved` have secret variables (and secret-named env: entries) masked, and `mask` scrubs them (and the API
key) from anything else. Problems are scrubbed the same way before they are raised: substitution comes first,
so a value an error quotes may be a secret's.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..common import parse_duration, parse_percent
from . import schema as S
from .checks import key_env_reference, load_duration, run_would_build, semantic_checks, target_checks
from .loader import ExperimentError, Located, locate_target, nonfinite, read_file
from .validation import validate
from .variables import Masker, Variables, mask_env, substitute
from ..verify.spec import SLO, SpecError, Verify

__all__ = ["SLO", "Verify", "Experiment", "TargetSpec", "FaultSpec", "load_experiment", "load_target"]

EXPERIMENT_KEYS = ("name", "target", "load")


@dataclass(slots=True)
class TargetSpec:
    kind: str
    name: str
    settings: dict  # the validated mapping, durations left as written
    source: str  # file it came from
    replicas: int = 1
    startup_timeout: float = 60.0
    ignore_eos: bool = True  # the load sends vLLM's ignore_eos when the workload fixes the output length
    keep_alive: bool = True  # the load's clients reuse connections
    allow_remote: bool = False  # replicas may listen beyond loopback / base_url may be remote

    @property
    def starts_processes(self) -> bool:
        return self.kind in ("reference", "process", "docker", "stack")


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
    verify: Verify = field(default_factory=Verify)
    abort_error_rate: float | None = None
    abort_for: float = 10.0
    abort_stops: dict = field(default_factory=dict)  # abort_when's metrics: and prometheus: (chaos.run.stops)
    metrics_interval: float = 1.0  # seconds between scrapes of every instance's /metrics; 0: not scraped
    resolved: dict = field(default_factory=dict)  # public: the document after ${VAR}s, secrets masked
    mask: Masker = field(default_factory=Masker)  # mask(str or JSON-like) -> a copy with secrets scrubbed

    @property
    def load_duration(self) -> float:
        return load_duration(self.load)


DURATION_PARAMS = {"restart_after", "duration"}


def _is_target(data) -> bool:
    return isinstance(data, dict) and "kind" in data


def _not_a_target(file: str) -> ExperimentError:
    # Never quote what the file holds: it may be any file at all (target: /etc/shadow).
    return ExperimentError([f"{file}:1:1: not a target file: a target file is a YAML mapping with kind: "
                            f"({', '.join(sorted(S.TARGET_KINDS))}) at its top level"])


@contextmanager
def _scrubbed(variables: Variables):
    """Problems leave through the mask of every secret the document and its target file hold: the one way
    an ExperimentError leaves load_experiment and load_target."""
    try:
        yield
    except ExperimentError as e:
        raise ExperimentError(variables.masker()(e.problems)) from None


def _target_doc(doc: Located, variables: Variables) -> object:
    """Substitute and validate a target file; returns its public form."""
    own = doc.data.get("vars") if isinstance(doc.data.get("vars"), dict) else {}
    tvars = variables.with_defaults(own)
    problems = key_env_reference(doc, ())
    if problems:
        raise ExperimentError(problems)
    problems, public = substitute(doc, tvars)
    mask_env(doc.data, public, tvars)
    problems = problems or nonfinite(doc) or validate(doc, S.TARGET_FILE, mask=tvars.masker())
    problems = problems or target_checks(doc, ())
    if problems:
        raise ExperimentError(problems)
    return public


def load_target(path_or_doc, cli_vars: dict | None = None) -> tuple[TargetSpec, dict]:
    doc = read_file(path_or_doc, role="a target") if isinstance(path_or_doc, str) else path_or_doc
    if not _is_target(doc.data):
        raise _not_a_target(doc.file)
    variables = Variables({}, cli_vars)
    with _scrubbed(variables):
        public = _target_doc(doc, variables)
    return _target_spec(doc.data, doc.file, public), doc.data


def _target_spec(d: dict, source: str, public: dict) -> TargetSpec:
    return TargetSpec(kind=d["kind"], name=public.get("name") or d["kind"], settings=d, source=source,
                      replicas=int(d.get("replicas", 1)),
                      startup_timeout=parse_duration(d.get("startup_timeout", 120 if d["kind"] == "docker" else 60)),
                      ignore_eos=d.get("ignore_eos", True), keep_alive=d.get("keep_alive", True),
                      allow_remote=d.get("allow_remote", False))


def _verify(doc: Located) -> tuple[Verify, list[str]]:
    """The typed verify: section, or the problems (file:line:col) of the values its checks refuse."""
    try:
        return Verify.from_dict(doc.data.get("verify")), []
    except SpecError as e:
        return Verify(), [doc.problem(("verify", *path), message) for path, message in e.problems]


def _metrics_interval(v) -> float:
    """metrics: {interval: ...} as validated: 0, false (YAML's off), "off" and "0s" turn scraping off."""
    return 0.0 if v in (0, False, "off", "0s") else parse_duration(v)


def load_experiment(path: str, cli_vars: dict[str, str] | None = None, target: str | None = None) -> Experiment:
    """target: a target file to run the experiment against instead of the one it names (`chaos run --target`,
    the gate's baseline and candidate); looked for beside the experiment, then in the current directory."""
    doc = read_file(path, role="an experiment")
    if not isinstance(doc.data, dict) or not any(k in doc.data for k in EXPERIMENT_KEYS):
        hint = " (this is a target file: name it from an experiment with target: FILE)" if _is_target(
            doc.data) else ""
        raise ExperimentError([f"{path}:1:1: not an experiment file: an experiment is a YAML mapping with "
                               f"name:, target: and load: at its top level{hint}"])
    declared = doc.data.get("vars") if isinstance(doc.data.get("vars"), dict) else {}
    variables = Variables(declared, cli_vars)
    with _scrubbed(variables):
        return _experiment(doc, path, variables, target)


def _experiment(doc: Located, path: str, variables: Variables, target_override: str | None = None) -> Experiment:
    problems = key_env_reference(doc, ("target",))
    if problems:
        raise ExperimentError(problems)
    problems, public = substitute(doc, variables)
    if isinstance(doc.data, dict) and isinstance(public, dict):
        mask_env(doc.data.get("target"), public.get("target"), variables)
    if problems:  # the unresolved values would only add confusing type errors
        raise ExperimentError(problems)
    problems = nonfinite(doc) or validate(doc, S.EXPERIMENT, mask=variables.masker())
    if problems:
        raise ExperimentError(problems)
    d = doc.data
    if public["name"] != d["name"]:
        raise ExperimentError([doc.problem(("name",), "a secret variable cannot be part of the name: the name "
                                                      "is written into the run directory's path")])

    # The target: a file (validated against the target schema, with its own positions) or inline.
    tref = d["target"] if target_override is None else target_override
    if isinstance(tref, str):
        found = locate_target(tref, path)
        if found is None and target_override is not None:
            raise ExperimentError([f"target file {tref!r} not found (given to run {path} against; looked in the "
                                   f"current directory and beside the experiment)"])
        if found is None:
            raise ExperimentError([doc.problem(("target",), f"target file {tref!r} not found (looked beside "
                                                            f"{path} and in the current directory)")])
        tdoc = read_file(found, role="a target")
        if not _is_target(tdoc.data):
            raise _not_a_target(found)
        target_public = _target_doc(tdoc, variables)
        target = _target_spec(tdoc.data, found, target_public)
    else:
        tprobs = validate(doc, S.TARGET_FILE, base=("target",), mask=variables.masker())
        tprobs = tprobs or target_checks(doc, ("target",))
        if tprobs:
            raise ExperimentError(tprobs)
        target_public = public["target"]
        target = _target_spec(tref, path, target_public)

    problems += semantic_checks(doc, target)
    if isinstance(d["load"].get("replay"), str):
        found = locate_target(d["load"]["replay"], path)
        if found is None:
            problems.append(doc.problem(("load", "replay"), f"replay file {d['load']['replay']!r} not found "
                                                            f"(looked beside {path} and in the current directory)"))
        else:
            d["load"]["replay"] = found
    verify, vprobs = _verify(doc)
    problems += vprobs
    problems = problems or run_would_build(doc, target)
    if problems:
        raise ExperimentError(problems)

    ss = d.get("steady_state") or {}
    faults = []
    for i, f in enumerate(d.get("faults") or []):
        params = {k: (parse_duration(v) if k in DURATION_PARAMS else v) for k, v in f.items()
                  if k not in ("type", "at", "name")}
        label = public["faults"][i].get("name") or f"{f['type']}#{i}"
        faults.append(FaultSpec(i, f["type"], parse_duration(f["at"]), label, params))
    abort = d.get("abort_when") or {}
    resolved = copy.deepcopy(public)
    resolved["target"] = copy.deepcopy(target_public)
    return Experiment(name=d["name"], description=public.get("description", ""), path=path, target=target,
                      load=d["load"], steady_window=parse_duration(ss.get("window", "10s")),
                      steady_slo=SLO.from_dict(ss.get("slo")), steady_health=ss.get("health", True),
                      faults=faults, verify=verify,
                      abort_error_rate=parse_percent(abort["error_rate"]) if "error_rate" in abort else None,
                      abort_for=parse_duration(abort.get("for", "10s")), resolved=resolved,
                      abort_stops={k: abort[k] for k in ("metrics", "prometheus") if k in abort},
                      metrics_interval=_metrics_interval((d.get("metrics") or {}).get("interval", 1.0)),
                      mask=variables.masker(target.settings.get("api_key_env")))
