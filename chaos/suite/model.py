"""Suite files: a list of experiments, each with its target and overrides, run one after another by `chaos gameday`
and `chaos gate`. Validated like experiment files: every problem names file:line:column, and each experiment is
loaded (with its target and variables) before anything starts.

    name: nightly
    vars: {PRESET: tiny}              # given to every experiment as --var
    stop_on_failure: false            # a failed experiment does not stop the rest (the default)
    experiments:
      - file: experiments/kill-instance.yaml
        target: targets/reference.yaml   # instead of the one the experiment names
        vars: {USERS: 4}
      - {file: experiments/slow-replica.yaml, name: slow, stop_on_failure: true}
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..experiment import schema as S
from ..experiment.loader import read_file
from ..experiment.located import ExperimentError, Located, locate_target
from ..experiment.validation import validate_document

NAME = {"type": "string", "pattern": r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$",
        "description": "letters, digits, . _ -; names the run's folder"}
_VALUES = {"type": "object", "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
           "additionalProperties": {"type": ["string", "number", "boolean"]}}
ENTRY = S._obj({
    "file": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "the experiment file"},
    "name": NAME,
    "target": {"type": "string", "minLength": 1, "maxLength": 1000,
               "description": "a target file to run it against instead of the one it names"},
    "vars": {**_VALUES, "description": "--var for this experiment (over the suite's vars)"},
    "stop_on_failure": {"type": "boolean", "description": "stop the suite when this one fails"},
}, ["file"])
SUITE = {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "llm-chaos suite", **S._obj({
    "name": NAME,
    "description": {"type": "string", "maxLength": 4000},
    "vars": {**_VALUES, "description": "--var for every experiment of the suite"},
    "stop_on_failure": {"type": "boolean", "description": "stop at the first failed experiment (default false)"},
    "experiments": {"type": "array", "items": ENTRY, "minItems": 1, "maxItems": 200},
}, ["name", "experiments"])}


@dataclass(slots=True)
class Entry:
    name: str
    file: str  # as located: a path that exists
    target: str | None
    vars: dict[str, str]
    stop_on_failure: bool

    def __post_init__(self):
        if not re.fullmatch(NAME["pattern"], self.name):
            raise ValueError(f"entry name {self.name!r}: {NAME['description']}")


@dataclass(slots=True)
class Suite:
    name: str
    path: str
    description: str = ""
    entries: list[Entry] = field(default_factory=list)

    def __post_init__(self):
        names = [e.name for e in self.entries]
        if len(set(names)) != len(names):
            raise ValueError("two experiments of the suite share a name")


def _text(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def load_suite(path: str, cli_vars: dict[str, str] | None = None, target: str | None = None,
               check_experiments: bool = True) -> Suite:
    """The suite at path, every entry's experiment loaded with its variables and target (target: run every
    entry against this target file instead, as the gate does). Raises ExperimentError with every problem."""
    doc = read_file(path, role="a suite")
    if not isinstance(doc.data, dict) or "experiments" not in doc.data:
        raise ExperimentError([f"{path}:1:1: not a suite file: a suite is a YAML mapping with name: and "
                               f"experiments: (a list of {{file: EXPERIMENT}}) at its top level"])
    validate_document(doc, SUITE)
    problems: list[str] = []
    d = doc.data
    common = {k: _text(v) for k, v in (d.get("vars") or {}).items()}
    entries, seen = [], {}
    for i, e in enumerate(d["experiments"]):
        found = locate_target(e["file"], path)
        if found is None:
            problems.append(doc.problem(("experiments", i, "file"), f"experiment file {e['file']!r} not found "
                                                                     f"(looked beside {path} and in the current "
                                                                     f"directory)"))
            continue
        name = e.get("name") or os.path.splitext(os.path.basename(found))[0]
        if name in seen:
            problems.append(doc.problem(("experiments", i), f"a second experiment named {name!r} (the first is "
                                                            f"item {seen[name]}): give one of them a name:"))
            continue
        seen[name] = i
        tref = target or e.get("target")
        if tref is not None and target is None:
            tfound = locate_target(tref, path)
            if tfound is None:
                problems.append(doc.problem(("experiments", i, "target"), f"target file {tref!r} not found"))
                continue
            tref = tfound
        entry = Entry(name, found, tref, {**common, **{k: _text(v) for k, v in (e.get("vars") or {}).items()},
                                          **(cli_vars or {})},
                      bool(e.get("stop_on_failure", d.get("stop_on_failure", False))))
        if check_experiments:
            problems += _entry_problems(doc, i, entry)
        entries.append(entry)
    if problems:
        raise ExperimentError(problems)
    return Suite(d["name"], path, d.get("description", ""), entries)


def _entry_problems(doc: Located, i: int, entry: Entry) -> list[str]:
    from ..experiment.model import load_experiment

    try:
        load_experiment(entry.file, entry.vars, target=entry.target)
    except ExperimentError as err:
        where = doc.where(("experiments", i))
        return [f"{where}: experiments[{i}] ({entry.name}): {p}" for p in err.problems]
    return []


def load_plan(path: str, cli_vars: dict[str, str] | None = None, target: str | None = None) -> Suite:
    """A suite file, or one experiment file as a suite of one (so `chaos gate ... experiments/kill.yaml` works)."""
    doc = read_file(path, role="a suite or experiment")
    if isinstance(doc.data, dict) and "experiments" not in doc.data and "load" in doc.data:
        name = os.path.splitext(os.path.basename(path))[0]
        entry = Entry(re.sub(r"[^A-Za-z0-9._-]", "-", name)[:100] or "experiment", path, target,
                      dict(cli_vars or {}), False)
        problems = _entry_problems(doc, 0, entry)
        if problems:
            raise ExperimentError([p.split(": experiments[0] ", 1)[-1] for p in problems])
        return Suite(entry.name, path, "", [entry])
    return load_suite(path, cli_vars, target)
