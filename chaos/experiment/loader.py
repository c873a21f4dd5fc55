"""Load YAML experiment and target files with positions, so every error names file:line:column.

Problems are collected, not raised one at a time: a user fixing a file sees all of them.
"""

from __future__ import annotations

import difflib
import os
import re

import jsonschema
import yaml


VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class ExperimentError(Exception):
    """Invalid input: each problem is one line 'file:line:col: key: message'."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems


Path = tuple  # keys and indices from the document root


class Located:
    """A parsed document and where each value (and each mapping key) sits in its file."""

    def __init__(self, file: str, data, values: dict, keys: dict):
        self.file, self.data, self.values, self.keys = file, data, values, keys

    def where(self, path: Path, key: bool = False) -> str:
        table = self.keys if key else self.values
        p = tuple(path)
        while p not in table and p:
            p = p[:-1]
        line, col = table.get(p, (1, 1))
        return f"{self.file}:{line}:{col}"

    def problem(self, path: Path, message: str, key: bool = False) -> str:
        return f"{self.where(path, key)}: {dotted(path) or '(top)'}: {message}"


def dotted(path: Path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_yaml(text: str, file: str) -> Located:
    try:
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise ExperimentError([f"{where}: YAML syntax error: {e.problem or e.context}"]) from None
    except yaml.YAMLError as e:
        raise ExperimentError([f"{file}: YAML error: {e}"]) from None
    if root is None:
        raise ExperimentError([f"{file}:1:1: the file is empty"])
    values: dict = {}
    keys: dict = {}
    problems: list[str] = []
    constructor = yaml.SafeLoader("")

    def build(node, path):
        values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, yaml.MappingNode):
            out = {}
            for k_node, v_node in node.value:
                k = constructor.construct_object(k_node, deep=True)
                if not isinstance(k, str):
                    problems.append(f"{file}:{k_node.start_mark.line + 1}:{k_node.start_mark.column + 1}: "
                                    f"keys must be strings, got {k!r}")
                    continue
                if k in out:
                    problems.append(f"{file}:{k_node.start_mark.line + 1}:{k_node.start_mark.column + 1}: "
                                    f"{dotted(path + (k,))}: duplicate key")
                keys[path + (k,)] = (k_node.start_mark.line + 1, k_node.start_mark.column + 1)
                out[k] = build(v_node, path + (k,))
            return out
        if isinstance(node, yaml.SequenceNode):
            return [build(n, path + (i,)) for i, n in enumerate(node.value)]
        return constructor.construct_object(node, deep=True)

    try:
        data = build(root, ())
    except yaml.YAMLError as e:
        raise ExperimentError([f"{file}: YAML error: {e}"]) from None
    if problems:
        raise ExperimentError(problems)
    return Located(file, data, values, keys)


def read_file(path: str) -> Located:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ExperimentError([f"{path}: no such file"]) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ExperimentError([f"{path}: cannot read: {e}"]) from None
    return parse_yaml(text, path)


def substitute(doc: Located, variables: dict[str, str]) -> list[str]:
    """Replace ${NAME} and ${NAME:-default} in string values, in place. Returns problems."""
    problems: list[str] = []

    def sub(value, path):
        if isinstance(value, dict):
            for k in value:
                value[k] = sub(value[k], path + (k,))
            return value
        if isinstance(value, list):
            return [sub(v, path + (i,)) for i, v in enumerate(value)]
        if not isinstance(value, str) or "${" not in value:
            return value

        def one(m):
            name, default = m.group(1), m.group(2)
            if name in variables:
                return str(variables[name])
            if default is not None:
                return default
            problems.append(doc.problem(path, f"${{{name}}} is not set: pass --var {name}=VALUE, declare it "
                                              f"under vars:, or export it"))
            return m.group(0)

        whole = VAR_REF.fullmatch(value)
        out = VAR_REF.sub(one, value)
        if whole and out != value:
            try:  # a whole-value reference keeps YAML's typing: ${USERS} -> 8, not "8"
                return yaml.safe_load(out)
            except yaml.YAMLError:
                return out
        return out

    doc.data = sub(doc.data, ())
    return problems


def _describe(schema: dict) -> str:
    if "description" in schema:
        return schema["description"]
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    return "valid here"


def validate(doc: Located, root_schema: dict, base: Path = ()) -> list[str]:
    """Schema problems of doc.data (or of the sub-document at base), each with file:line:col."""
    instance = doc.data
    for p in base:
        instance = instance[p]
    validator = jsonschema.Draft202012Validator(root_schema)
    problems: list[str] = []
    seen = set()
    for err in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path))):
        path = tuple(base) + tuple(err.absolute_path)
        v = err.validator
        if v in ("if", "allOf"):
            continue
        if v == "additionalProperties":
            allowed = sorted(err.schema.get("properties", {}))
            for key in err.instance:
                if key in err.schema.get("properties", {}):
                    continue
                hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                msg = f"unknown key {key!r}"
                if key in ("api_key", "key", "token", "password", "secret"):
                    msg += "; secrets come only from the environment: name the variable with api_key_env"
                elif hint:
                    msg += f" (did you mean {hint[0]!r}?)"
                else:
                    msg += f"; allowed here: {', '.join(allowed)}"
                problems.append(doc.problem(path + (key,), msg, key=True))
            continue
        if v == "required":
            missing = err.message.split("'")[1] if "'" in err.message else err.message
            msg = f"missing required key {missing!r}"
        elif v == "enum":
            hint = difflib.get_close_matches(str(err.instance), [str(x) for x in err.validator_value], n=1,
                                             cutoff=0.5)
            msg = f"{err.instance!r} is not one of {', '.join(map(str, err.validator_value))}"
            if hint:
                msg += f" (did you mean {hint[0]!r}?)"
        elif v in ("anyOf", "oneOf"):
            shown = repr(err.instance) if not isinstance(err.instance, (dict, list)) else "this value"
            msg = f"{shown} is not {_describe(err.schema)}"
        elif v == "type":
            msg = f"expected {err.validator_value}, got {type(err.instance).__name__} {err.instance!r}"[:160]
        elif v == "const":
            msg = f"{err.instance!r} is not {err.validator_value!r}"
        else:
            msg = err.message[:200]
        line = doc.problem(path, msg)
        if line not in seen:
            seen.add(line)
            problems.append(line)
    return problems


def locate_target(ref: str, experiment_file: str) -> str | None:
    for candidate in (os.path.join(os.path.dirname(os.path.abspath(experiment_file)), ref),
                      os.path.join(os.path.dirname(os.path.abspath(experiment_file)), "..", ref), ref):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None
