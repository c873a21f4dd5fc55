"""The third step of loading: check a located document against the schema; each problem is one line with file:line:col and what to write.

Two additions to JSON Schema, because YAML is not JSON: an integer is an int (3.0 is refused, where JSON Schema
would take it), and the keyword `x-chaos` checks what a pattern cannot: the range of a duration or percentage
written as text ("9000000h", "150%") and the order of a token range ("80-30").
"""

from __future__ import annotations

import difflib
import math
import re

import jsonschema
from jsonschema.exceptions import ValidationError

from . import schema as S
from .located import ExperimentError, Located, Path, preview

SECRET_KEYS = ("api_key", "key", "token", "password", "secret")
RANGE_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|%)?\s*$")
_SCALE = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600, "%": 0.01}


def _is_int(checker, instance) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _text_range(validator, spec, instance, schema):
    """x-chaos: {kind: duration|percent|tokens|ramp, min, max, exclusive_min}; numbers are checked by the
    schema's minimum/maximum, text here. Text that does not parse is left to the pattern's own error."""
    if not isinstance(instance, str):
        return
    kind, lo, hi, excl = spec["kind"], spec.get("min"), spec.get("max"), spec.get("exclusive_min", False)
    try:
        if kind in ("duration", "percent"):  # the value as written, unbounded: bounding it is this check's job
            m = _NUMBER_UNIT.match(instance)
            if not m or (m.group(2) == "%") != (kind == "percent"):
                return
            values = [float(m.group(1)) * _SCALE[m.group(2)]]
        elif kind == "tokens":
            a, _, b = instance.partition("-")
            values = [int(a), int(b or a)]
            if values[0] > values[1]:
                yield ValidationError(f"{instance!r}: the low end comes first (write {values[1]}-{values[0]})")
                return
        else:  # ramp START:END
            a, _, b = instance.partition(":")
            values = [int(a), int(b)]
    except ValueError:
        return
    for v in values:
        if (lo is not None and (v <= lo if excl else v < lo)) or (hi is not None and v > hi):
            yield ValidationError(f"{instance!r} is out of range: {spec['text']}")
            return


def _dispatch(validator, spec, instance, schema):
    """x-dispatch: {key, schemas}: validate against the one schema the instance's key names. The same verdicts
    as the published allOf of if/then branches, evaluating one branch instead of all of them."""
    key = instance.get(spec["key"]) if isinstance(instance, dict) else None
    if isinstance(key, str):  # anything else fails the key's own enum
        sub = spec["schemas"].get(key)
        if sub is not None:
            yield from validator.descend(instance, sub)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, validators={"x-chaos": _text_range, "x-dispatch": _dispatch},
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_int))


def _branch(s: dict):
    """(key, value, then) of an {"if": {"properties": {key: {"const": value}}}, "then": ...} branch, else None."""
    props = s.get("if", {}).get("properties", {}) if set(s) == {"if", "then"} else {}
    if len(props) == 1:
        (key, cond), = props.items()
        if set(cond) == {"const"}:
            return key, cond["const"], s["then"]
    return None


def _compiled(schema):
    """The schema with every allOf made only of kind/type branches turned into one x-dispatch."""
    if isinstance(schema, list):
        return [_compiled(x) for x in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _compiled(v) for k, v in schema.items()}
    branches = [_branch(b) for b in schema.get("allOf", [])]
    if branches and all(branches) and len({b[0] for b in branches}) == 1:
        del out["allOf"]
        out["x-dispatch"] = {"key": branches[0][0], "schemas": {v: _compiled(t) for _, v, t in branches}}
    return out


_VALIDATORS: dict[int, tuple[dict, object]] = {}


def _validator(schema: dict):
    # Keyed by id, holding the schema itself: while it is cached its id cannot pass to another object, and
    # the identity check refuses an entry left by a schema that is gone (CPython reuses freed ids).
    hit = _VALIDATORS.get(id(schema))
    if hit is None or hit[0] is not schema:
        hit = _VALIDATORS[id(schema)] = (schema, Validator(_compiled(schema)))
    return hit[1]


def _describe(schema: dict) -> str:
    if "description" in schema:
        return schema["description"]
    if "enum" in schema:
        return "one of " + ", ".join(map(str, schema["enum"]))
    return "valid here"


def range_text(schema: dict) -> str:
    lo = schema.get("minimum", schema.get("exclusiveMinimum"))
    hi = schema.get("maximum", schema.get("exclusiveMaximum"))
    low = None if lo is None else (f"more than {lo:g}" if "exclusiveMinimum" in schema else f"at least {lo:g}")
    high = None if hi is None else (f"less than {hi:g}" if "exclusiveMaximum" in schema else f"at most {hi:g}")
    if "minimum" in schema and "maximum" in schema:
        return f"from {lo:g} to {hi:g}"
    return ", ".join(x for x in (low, high) if x) or "in range"


def _message(err: ValidationError, path: Path, mask) -> str:
    # The value is masked before it is quoted and clipped: a clipped secret would no longer match the mask.
    v, inst = err.validator, mask(err.instance)
    if path and path[-1] == "api_key_env" and v in ("pattern", "maxLength"):
        return (f"must NAME the environment variable that holds the key (letters, digits and _, not starting "
                f"with a digit), not hold the key itself; got {preview(str(inst))}")
    if v == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        return f"missing required key {missing!r}"
    if v == "enum":
        hint = difflib.get_close_matches(str(inst), [str(x) for x in err.validator_value], n=1, cutoff=0.5)
        msg = f"{inst!r} is not one of {', '.join(map(str, err.validator_value))}"
        return msg + (f" (did you mean {hint[0]!r}?)" if hint else "")
    if v in ("anyOf", "oneOf"):
        shown = repr(inst) if not isinstance(inst, (dict, list)) else "this value"
        return f"{shown} is not {_describe(err.schema)}"
    if v == "type":
        return f"expected {err.validator_value}, got {type(inst).__name__} {inst!r}"[:160]
    if v == "const":
        return f"{inst!r} is not {err.validator_value!r}"
    if v in RANGE_KEYWORDS:
        return f"{inst!r} is out of range: {range_text(err.schema)}"
    if v == "pattern":
        return f"{str(inst)[:80]!r} is not {_describe(err.schema)}"
    if v in ("maxItems", "minItems", "maxLength", "maxProperties"):
        return f"too {'many' if v.startswith('max') else 'few'}: {v} is {err.validator_value}"
    if v == "x-chaos":
        return mask(err.message)
    return mask(err.message)[:200]


def _unknown_keys(doc: Located, err: ValidationError, path: Path) -> list[str]:
    props = err.schema.get("properties", {})
    patterns = err.schema.get("patternProperties", {})
    allowed = sorted(props)
    out = []
    for key in err.instance:
        if key in props or any(re.search(p, key) for p in patterns):
            continue
        hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        msg = f"unknown key {key!r}"
        if key in SECRET_KEYS:
            msg += "; secrets come only from the environment: name the variable with api_key_env"
        elif hint:
            msg += f" (did you mean {hint[0]!r}?)"
        else:
            msg += f"; allowed here: {', '.join(allowed)}"
        out.append(doc.problem(path + (key,), msg, key=True))
    return out


def validate(doc: Located, root_schema: dict, base: Path = (), mask=None) -> list[str]:
    """Schema problems of doc.data (or of the sub-document at base), each with file:line:col. mask (a
    Masker) scrubs the values quoted: substitution came first, so a bad value may be a secret's."""
    mask = mask or (lambda x: x)
    instance = doc.data
    for p in base:
        instance = instance[p]
    problems: list[str] = []
    seen = set()
    errors = sorted(_validator(root_schema).iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    wrong_type = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    for err in errors:
        if err.validator in RANGE_KEYWORDS and tuple(err.absolute_path) in wrong_type:
            continue  # "expected integer, got float 1e+29" says it; its range is the next thing to fix
        path = tuple(base) + tuple(err.absolute_path)
        if err.validator in ("if", "allOf", "x-dispatch"):
            continue
        lines = (_unknown_keys(doc, err, path) if err.validator == "additionalProperties"
                 else [doc.problem(path, _message(err, path, mask))])
        for line in lines:
            if line not in seen:
                seen.add(line)
                problems.append(line)
    return problems


def nonfinite(doc: Located) -> list[str]:
    """Every float that is not finite (.inf, .nan): no setting here means infinity, and NaN passes every
    comparison the schema makes. After substitution: ${X} may bring one in."""
    problems: list[str] = []

    def walk(v, path):
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, path + (k,))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                walk(x, path + (i,))
        elif isinstance(v, float) and not math.isfinite(v):
            problems.append(doc.problem(path, f"{v!r} is not a finite number; give a finite value in the "
                                              f"range the key allows (see `chaos schema`)"))

    walk(doc.data, ())
    return problems


def validate_document(doc: Located, schema: dict, mask=None) -> None:
    """A whole document (a target file, a suite) against its schema; raises its problems."""
    problems = nonfinite(doc) or validate(doc, schema, mask=mask)
    if problems:
        raise ExperimentError(problems)


def validate_experiment(doc: Located, public: dict, mask, inline_target: bool) -> None:
    """An experiment against its schema and, when the run takes the target written in it (inline_target: no
    other target file given), that target against the target's; raises the problems."""
    validate_document(doc, S.EXPERIMENT, mask=mask)
    if public["name"] != doc.data["name"]:
        raise ExperimentError([doc.problem(("name",), "a secret variable cannot be part of the name: the name "
                                                      "is written into the run directory's path")])
    if inline_target and isinstance(doc.data["target"], dict):
        problems = validate(doc, S.TARGET_FILE, base=("target",), mask=mask)
        if problems:
            raise ExperimentError(problems)
