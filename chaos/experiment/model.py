"""Experiments as typed objects: the last step of loading, and the pipeline that runs the steps.

Loading runs in one direction, each step a function in its own file: read (loader: bounded YAML with
positions), substitute (variables: ${NAME}), validate (validation: the JSON Schema), check (checks: the rules
the schema cannot state), build (here: the typed model). An experiment's target file is a second document: it
goes through the same read, substitute and validate after the experiment's, and its checks run first in the
check step, so every problem comes out in the order it always has.

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
from ..faults import FAULT_TYPES, Params
from .checks import check_experiment, check_target
from .loadspec import LoadSpec
from .loader import read_experiment, read_named_target, read_target
from .located import ExperimentError, Located
from .validation import validate_document, validate_experiment
from .variables import Masker, Variables, declared, substitute_experiment, substitute_target
from . import schema as S
from ..verify.spec import SLO, Verify
from ..verify.goodputspec import GoodputSLO

__all__ = ["SLO", "Verify", "Experiment", "TargetSpec", "FaultSpec", "load_experiment", "load_target"]

@dataclass(slots=True)
class TargetSpec:
    """A target: what every reader outside its kind's own class needs, as fields; the kind's own settings
    (its command, image, preset, ...) stay in settings, read once by that class into its typed settings
    (chaos.targets: ReferenceSettings, CommandSettings, DockerSettings, the stack's Part)."""

    kind: str
    name: str
    settings: dict  # the validated mapping, durations left as written
    source: str  # file it came from
    replicas: int = 1
    startup_timeout: float = 60.0
    ignore_eos: bool = True  # the load sends vLLM's ignore_eos when the workload fixes the output length
    keep_alive: bool = True  # the load's clients reuse connections
    allow_remote: bool = False  # replicas may listen beyond loopback / base_url may be remote
    # Taken from settings by __post_init__, so a spec built in code (a test, chaos load --target) has them too.
    api_key_env: str | None = field(init=False, default=None)  # the NAME of the key's variable, never the key
    base_url: str | None = field(init=False, default=None)  # an openai target's endpoint
    gateway: dict | None = field(init=False, default=None)  # a reference or stack target's gateway section
    links: list[str] = field(init=False, default_factory=list)  # proxies put on where no fault names them
    toxiproxy: dict = field(init=False, default_factory=dict)  # {url: ...} or {server: ...}; {}: the bundled one

    def __post_init__(self):
        if self.kind not in S.TARGET_KINDS:
            raise ValueError(f"target kind {self.kind!r}: one of {', '.join(sorted(S.TARGET_KINDS))}")
        if self.replicas < 1 or self.startup_timeout <= 0:
            raise ValueError(f"target {self.name}: replicas ({self.replicas}) and startup_timeout "
                             f"({self.startup_timeout:g}s) must be above 0")
        s = self.settings
        self.api_key_env, self.base_url, self.gateway = s.get("api_key_env"), s.get("base_url"), s.get("gateway")
        self.links, self.toxiproxy = list(s.get("links") or []), dict(s.get("toxiproxy") or {})

    @property
    def starts_processes(self) -> bool:
        return self.kind in ("reference", "process", "docker", "stack")


@dataclass(slots=True)
class FaultSpec:
    index: int
    type: str
    at: float
    name: str
    params: Params  # its type's own settings, typed (FAULT_TYPES[type].Params): all but type, at and name

    @classmethod
    def build(cls, index: int, type: str, at: float, name: str, settings: dict) -> FaultSpec:
        """From a fault's settings (its mapping but type, at and name), valid against the schema."""
        return cls(index, type, at, name, FAULT_TYPES[type].Params.build(settings))


@dataclass(slots=True)
class Experiment:
    name: str
    description: str
    path: str
    target: TargetSpec
    load: LoadSpec
    steady_window: float = 10.0
    steady_slo: SLO = field(default_factory=SLO)
    steady_health: bool = True
    steady_goodput: GoodputSLO | None = None  # steady_state.goodput: the bounds a good request meets, when given
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
        return self.load.seconds


@contextmanager
def _scrubbed(variables: Variables):
    """Problems leave through the mask of every secret the document and its target file hold: the one way
    an ExperimentError leaves load_experiment and load_target."""
    try:
        yield
    except ExperimentError as e:
        raise ExperimentError(variables.masker()(e.problems)) from None


def load_target(path_or_doc, cli_vars: dict | None = None) -> tuple[TargetSpec, dict]:
    """A target file (or one already read) through the pipeline: read, substitute, validate, check, build."""
    doc = read_target(path_or_doc)
    variables = Variables({}, cli_vars)
    with _scrubbed(variables):
        public, tvars = substitute_target(doc, variables)
        validate_document(doc, S.TARGET_FILE, mask=tvars.masker())
        check_target(doc)
        return build_target(doc.data, doc.file, public), doc.data


def load_experiment(path: str, cli_vars: dict[str, str] | None = None, target: str | None = None) -> Experiment:
    """An experiment file through the pipeline: read, substitute, validate (and its target file the same way),
    check, build. target: a target file to run the experiment against instead of the one it names (`chaos run
    --target`, the gate's baseline and candidate); looked for beside the experiment, then in the current
    directory."""
    doc = read_experiment(path)
    variables = Variables(declared(doc.data), cli_vars)
    with _scrubbed(variables):
        public = substitute_experiment(doc, variables)
        validate_experiment(doc, public, variables.masker(), inline_target=target is None)
        tref = doc.data["target"] if target is None else target
        if isinstance(tref, str):  # a file: validated against the target schema, with its own positions
            tdoc = read_named_target(doc, tref, overridden=target is not None)
            target_public, tvars = substitute_target(tdoc, variables)
            validate_document(tdoc, S.TARGET_FILE, mask=tvars.masker())
            spec = build_target(tdoc.data, tdoc.file, target_public)
            check_experiment(doc, spec, tdoc, ())
        else:
            target_public = public["target"]
            spec = build_target(tref, path, target_public)
            check_experiment(doc, spec, doc, ("target",))
        return build_experiment(doc, public, spec, target_public, variables)


def build_target(d: dict, source: str, public: dict) -> TargetSpec:
    return TargetSpec(kind=d["kind"], name=public.get("name") or d["kind"], settings=d, source=source,
                      replicas=int(d.get("replicas", 1)),
                      startup_timeout=parse_duration(d.get("startup_timeout", 120 if d["kind"] == "docker" else 60)),
                      ignore_eos=d.get("ignore_eos", True), keep_alive=d.get("keep_alive", True),
                      allow_remote=d.get("allow_remote", False))


def _metrics_interval(v) -> float:
    """metrics: {interval: ...} as validated: 0, false (YAML's off), "off" and "0s" turn scraping off."""
    return 0.0 if v in (0, False, "off", "0s") else parse_duration(v)


def build_experiment(doc: Located, public: dict, target: TargetSpec, target_public: dict,
                     variables: Variables) -> Experiment:
    """The typed experiment from a checked document (and its public form, and its built target)."""
    d = doc.data
    ss = d.get("steady_state") or {}
    faults = []
    for i, f in enumerate(d.get("faults") or []):
        settings = {k: v for k, v in f.items() if k not in ("type", "at", "name")}
        label = public["faults"][i].get("name") or f"{f['type']}#{i}"
        faults.append(FaultSpec.build(i, f["type"], parse_duration(f["at"]), label, settings))
    abort = d.get("abort_when") or {}
    resolved = copy.deepcopy(public)
    resolved["target"] = copy.deepcopy(target_public)
    return Experiment(name=d["name"], description=public.get("description", ""), path=doc.file, target=target,
                      load=LoadSpec.from_dict(d["load"]), steady_window=parse_duration(ss.get("window", "10s")),
                      steady_slo=SLO.from_dict(ss.get("slo")), steady_health=ss.get("health", True),
                      steady_goodput=GoodputSLO.from_dict(ss["goodput"]) if "goodput" in ss else None,
                      faults=faults, verify=Verify.from_dict(d.get("verify")),
                      abort_error_rate=parse_percent(abort["error_rate"]) if "error_rate" in abort else None,
                      abort_for=parse_duration(abort.get("for", "10s")), resolved=resolved,
                      abort_stops={k: abort[k] for k in ("metrics", "prometheus") if k in abort},
                      metrics_interval=_metrics_interval((d.get("metrics") or {}).get("interval", 1.0)),
                      mask=variables.masker(target.api_key_env))
