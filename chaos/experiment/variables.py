"""The second step of loading: ${NAME} in experiment and target files, and keeping secret values out of everything a run writes.

A file may use only the variables it declares: under `vars:` (with a default), or in place with
`${NAME:-default}`, or given on the command line with --var. The environment supplies values only for names
declared under `vars:`: an in-place default is that default or a --var, never the environment, so neither
`${ANY_ENV_VAR}` nor `${DATABASE_URL:-none}` can copy an arbitrary variable into a report.

A variable whose name says it is secret (KEY, TOKEN, SECRET, PASSWORD, PASSWD, CREDENTIAL, in any case) is
substituted where the run needs it (a command line, an env: entry) but masked in the public form of the
document (what experiment.resolved.json holds), and Masker scrubs its value from any other text. So is a
literal value under a target's `env:` whose name says it is secret (env: {OPENAI_API_KEY: sk-...}).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import yaml

from .located import ExperimentError, Located, Path

VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL", re.IGNORECASE)
MASK = "***"
MIN_MASKED_TEXT = 4  # shorter values are masked where they are substituted, but not searched for in free text


def is_secret(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def _text(v) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


def cli_vars(items) -> dict[str, str]:
    """The --var NAME=VALUE items every command takes; a bad item is refused as a bad file's line is."""
    from ..common import parse_vars

    try:
        return parse_vars(items)
    except ValueError as e:
        raise ExperimentError([str(e)]) from None


class Variables:
    """The values ${NAME} may take: --var beats the environment, which beats the file's declared default."""

    def __init__(self, declared: Mapping, cli: Mapping | None = None, env: Mapping | None = None):
        self.env = os.environ if env is None else env
        self.cli = dict(cli or {})
        self.values = {k: _text(v) for k, v in declared.items()}
        for name in self.values:
            if name in self.env:
                self.values[name] = self.env[name]
        self.values.update(self.cli)
        self.used_secrets: dict[str, str] = {}  # secret names substituted somewhere, with their values
        self.literal_secrets: list[str] = []  # secret-named env: entries written as plain values
        self.derived: list[Variables] = []  # a target file's variables: its own vars: may hold secrets

    def with_defaults(self, declared: Mapping) -> "Variables":
        """These variables over a target file's own vars: (the experiment's values win)."""
        out = Variables({**declared, **{k: v for k, v in self.values.items()}}, self.cli, self.env)
        out.used_secrets = self.used_secrets  # one record for the experiment and its target file
        out.literal_secrets = self.literal_secrets
        self.derived.append(out)
        return out

    def lookup(self, name: str, default: str | None) -> str | None:
        if name in self.values:  # declared under vars: (the environment applied), or given with --var
            return self.values[name]
        return default  # ${NAME:-default} declares NAME in place, for its default and --var only

    def secret_values(self) -> list[str]:
        names = {n for n in self.values if is_secret(n)} | set(self.used_secrets)
        vals = {self.values.get(n, self.used_secrets.get(n)) for n in names} | set(self.literal_secrets)
        for d in self.derived:
            vals |= set(d.secret_values())
        return sorted((v for v in vals if v), key=len, reverse=True)

    def masker(self, key_env: str | None = None) -> "Masker":
        return Masker(self.secret_values(), key_env)


def mask_env(target, public, variables: Variables) -> None:
    """A target's env: entries whose name says secret: *** in the public form, their values for the Masker.
    Called right after substitution, before validation, so even an error about such a value is scrubbed."""
    env = target.get("env") if isinstance(target, dict) else None
    pub = public.get("env") if isinstance(public, dict) else None
    if not isinstance(env, dict) or not isinstance(pub, dict):
        return
    for k, v in env.items():
        if isinstance(k, str) and is_secret(k):
            pub[k] = MASK
            variables.literal_secrets += _scalars(v)


def _scalars(v) -> list[str]:
    """The text of every string or number in v (a wrong type is quoted by its error all the same)."""
    if isinstance(v, dict):
        return [t for x in v.values() for t in _scalars(x)]
    if isinstance(v, list):
        return [t for x in v for t in _scalars(x)]
    return [str(v)] if isinstance(v, (str, int, float)) and not isinstance(v, bool) else []


def substitute(doc: Located, variables: Variables) -> tuple[list[str], object]:
    """Replace ${NAME} and ${NAME:-default} in string values of doc.data, in place; returns (problems, the
    public form: the same document with every secret variable's value masked). Top-level vars: is literal."""
    problems: list[str] = []

    def one_string(value: str, path):
        real_parts, public_parts, last, secret = [], [], 0, False
        for m in VAR_REF.finditer(value):
            name, default = m.group(1), m.group(2)
            got = variables.lookup(name, default)
            if got is None:
                problems.append(doc.problem(path, f"${{{name}}} is not declared: declare it under vars: "
                                                  f"(vars: {{{name}: default}}) or pass --var {name}=VALUE; "
                                                  f"the environment supplies only variables the file declares"))
                got = m.group(0)
            lit = value[last:m.start()]
            real_parts += [lit, got]
            if is_secret(name) and got != m.group(0):
                variables.used_secrets[name] = got
                public_parts += [lit, MASK]
                secret = True
            else:
                public_parts += [lit, got]
            last = m.end()
        real = "".join(real_parts) + value[last:]
        public = "".join(public_parts) + value[last:]
        if VAR_REF.fullmatch(value) and real != value:
            try:  # a whole-value reference keeps YAML's typing: ${USERS} -> 8, not "8"
                typed = yaml.safe_load(real)
            except yaml.YAMLError:
                typed = real
            if not isinstance(typed, (dict, list)):
                real = typed
                public = public if secret else typed
        return real, public

    def walk(value, path):
        if isinstance(value, dict):
            pub = {}
            for k in value:
                if path == () and k == "vars":
                    pub[k] = {n: (MASK if is_secret(n) else v) for n, v in (value[k] or {}).items()} \
                        if isinstance(value[k], dict) else value[k]
                    continue
                value[k], pub[k] = walk(value[k], path + (k,))
            return value, pub
        if isinstance(value, list):
            pairs = [walk(v, path + (i,)) for i, v in enumerate(value)]
            return [p[0] for p in pairs], [p[1] for p in pairs]
        if isinstance(value, str) and "${" in value:
            return one_string(value, path)
        return value, value

    doc.data, public = walk(doc.data, ())
    return problems, public


def key_env_reference(doc: Located, base: Path) -> list[str]:
    """Before substitution: api_key_env: ${OPENAI_API_KEY} would put the key itself where its name belongs."""
    d = doc.data
    for p in base:
        d = d.get(p) if isinstance(d, dict) else None
    v = d.get("api_key_env") if isinstance(d, dict) else None
    if isinstance(v, str) and "${" in v:
        m = re.search(r"\$\{([A-Za-z_][A-Za-z0-9_]*)", v)
        name = m.group(1) if m else "NAME"
        return [doc.problem(base + ("api_key_env",), f"api_key_env takes the variable's NAME: write "
                                                     f"api_key_env: {name}, not ${{{name}}}")]
    return []


def declared(data) -> dict:
    """A document's own vars: (a mapping, or nothing: the schema refuses anything else later)."""
    return data.get("vars") if isinstance(data, dict) and isinstance(data.get("vars"), dict) else {}


def substitute_experiment(doc: Located, variables: Variables) -> dict:
    """The experiment with its ${NAME}s replaced in place; returns its public form. Raises the problems."""
    problems = key_env_reference(doc, ("target",))
    if problems:
        raise ExperimentError(problems)
    problems, public = substitute(doc, variables)
    mask_env(doc.data.get("target"), public.get("target"), variables)
    if problems:  # the unresolved values would only add confusing type errors
        raise ExperimentError(problems)
    return public


def substitute_target(doc: Located, variables: Variables) -> tuple[dict, Variables]:
    """A target file with its ${NAME}s replaced in place, over its own vars: (the experiment's values win);
    returns its public form and the variables it saw. Raises the problems."""
    tvars = variables.with_defaults(declared(doc.data))
    problems = key_env_reference(doc, ())
    if problems:
        raise ExperimentError(problems)
    problems, public = substitute(doc, tvars)
    mask_env(doc.data, public, tvars)
    if problems:
        raise ExperimentError(problems)
    return public, tvars


class Masker:
    """Scrubs secret values from strings and from JSON-like structures (keys and values), returning copies.

    It knows the secret variables an experiment used and, read when it is called, the value behind the
    target's api_key_env: the key is never stored, yet is scrubbed if anything ever printed it.
    """

    def __init__(self, secrets: list[str] = (), key_env: str | None = None):
        self.secrets = [s for s in secrets if len(s) >= MIN_MASKED_TEXT]
        self.key_env = key_env

    def with_secret(self, value: str) -> Masker:
        """The same mask, scrubbing one more value (a run's own secret: its fault token)."""
        return Masker([*self.secrets, value], self.key_env)

    def _values(self) -> list[str]:
        key = os.environ.get(self.key_env) if self.key_env else None
        vals = self.secrets + ([key] if key and len(key) >= MIN_MASKED_TEXT else [])
        return sorted(set(vals), key=len, reverse=True)

    def __call__(self, obj):
        vals = self._values()
        if not vals:
            return obj
        return self._mask(obj, vals)

    def _mask(self, obj, vals):
        if isinstance(obj, str):
            for v in vals:
                if v in obj:
                    obj = obj.replace(v, MASK)
            return obj
        if isinstance(obj, dict):
            return {self._mask(k, vals) if isinstance(k, str) else k: self._mask(v, vals) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._mask(v, vals) for v in obj)
        return obj
