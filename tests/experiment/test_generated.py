"""Generated experiments: every numeric, duration, percentage and token-range field of valid experiments is
set, one at a time, to hostile values (NaN, infinities, huge, negative, inverted ranges, out-of-range text) and
to random in-range values. For every document:

    `chaos validate` accepts it  <=>  the model builds it  <=>  `chaos run --dry-run` exits 0
    and what the model builds, the run builds too (load plan, workloads, gateway settings, targets, faults);

anything refused is refused with file:line:col (at the mutated value's line), never a traceback; and a value
outside every field's stated range (NaN, inf, 1e300, 10**30, inverted ranges, 150%) is always refused.
"""

import contextlib
import io
import random
import re
import subprocess
import sys

import pytest
import yaml

from chaos.cli import build_parser
from chaos.experiment.loader import ExperimentError, read_file
from chaos.experiment.model import load_experiment

pytestmark = pytest.mark.beside  # its slow tests judge state, not time: beside the whole runs under xdist

GATEWAY = {"retries": 2, "first_token_timeout": "5s", "total_timeout": "30s", "backoff": "50ms",
           "max_concurrency": 64, "max_queue": 10, "queue_timeout": "5s", "cache_size": 10,
           "health_interval": "1s", "eject": {"after_failures": 3, "for": "5s"},
           "breaker": {"error_rate": "50%", "min_requests": 5, "window": 20, "open": "5s"},
           "backup": {"replicas": 1, "preset": "tiny"}}
SLO = {"p50_latency": "1s", "p95_latency": 3, "p99_latency": "4s", "ttft_p95": "500ms", "ttft_p99": 2,
       "error_rate": "1%"}
BASE = {
    "name": "gen",
    "target": {"kind": "reference", "replicas": 2, "preset": "tiny", "threads": 1, "max_model_len": 512,
               "startup_timeout": "30s", "gateway": GATEWAY},
    "load": {"workload": "chat", "users": 4, "spawn_rate": 2, "duration": "20s", "max_requests": 100,
             "input_tokens": "30-80", "output_tokens": 8, "temperature": 0.5, "seed": 1, "retries": 1,
             "timeouts": {"connect": "2s", "first_token": "10s", "total": 30}, "stop_timeout": "2s"},
    "steady_state": {"window": "5s", "slo": SLO},
    "faults": [{"type": "kill_instance", "at": "5s", "instance": 1, "count": 1, "restart_after": "2s"},
               {"type": "pause_instance", "at": 6, "instance": 0, "duration": "2s"},
               {"type": "server_hook", "at": "7.5s", "instance": 0, "duration": 2, "step_delay_ms": 10,
                "hang_s": 0.5, "kv_block_cap": 64, "fail_fraction": 0.1}],
    "verify": {"error_rate_during_fault": {"max": 0.1}, "recovery_time": {"max": "10s", "window": "5s"},
               "slo_after": {"p95_latency": "3s"}, "status_codes": {"allowed": [200, 503]},
               "fallback": {"within": "5s"}},
    "abort_when": {"error_rate": "50%", "for": "5s"},
}
# The other load shapes, each with the fields only it has.
SHAPES = [
    {"workload": "chat", "steps": [1, 2, 3], "step_duration": "5s", "spawn_rate": 4, "output_tokens": "4-8"},
    {"mix": {"chat": 3, "json": 1.5}, "ramp": "1:4", "duration": "20s", "output_tokens": 8},
    {"workload": "chat", "rate": 2.5, "max_users": 8, "poisson": True, "duration": 20, "output_tokens": 8},
]

HOSTILE_ALWAYS = [float("nan"), float("-inf"), 1e300, 10**30, "99999999999h"]
HOSTILE_SOMETIMES = [0, -1, 3.5, True, "150%", "80-30"]


def walk(node, path=()):
    """(path, value) of every node of a document, the root first; a path is its keys and indices."""
    yield path, node
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield from walk(v, path + (k,))


def numeric_leaves(d):
    """Paths of every leaf that is a number or text that reads as one (durations, %, ranges, ramps)."""
    for path, v in walk(d):
        if (isinstance(v, (int, float)) and not isinstance(v, bool)) or (
                isinstance(v, str) and re.fullmatch(r"[\d.]+\s*(ms|s|m|h|%)?|\d+-\d+|\d+:\d+", v)):
            yield path


def put(doc, path, value):
    import copy

    doc = copy.deepcopy(doc)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


def random_in_range(rng, value):
    """A random value of the same form as value (mostly in range; the schema decides)."""
    if isinstance(value, int):
        return rng.choice([0, 1, 2, rng.randint(0, 10), rng.randint(0, 10**6)])
    if isinstance(value, float):
        return rng.choice([0.0, rng.random(), rng.uniform(0, 2), rng.uniform(0, 10**4)])
    if value.endswith("%"):
        return f"{rng.uniform(0, 100):.3f}%"
    if "-" in value:
        lo = rng.randint(1, 500)
        return f"{lo}-{lo + rng.randint(0, 500)}"
    if ":" in value:
        return f"{rng.randint(1, 50)}:{rng.randint(1, 50)}"
    return f"{rng.uniform(0, 30):.2f}{rng.choice(['s', 'ms', 'm', ''])}"


def documents():
    bases = [BASE] + [put(BASE, ("load",), shape) for shape in SHAPES]
    rng = random.Random(19)
    for b, base in enumerate(bases):
        for path in numeric_leaves(base):
            if b and (path[0] != "load" or path[1] in BASE["load"] and path[1] != "output_tokens"):
                continue  # fields BASE has were mutated there already
            for v in HOSTILE_ALWAYS:
                yield put(base, path, v), path, True
            for v in HOSTILE_SOMETIMES:
                yield put(base, path, v), path, False
            if path[-1] == "ramp":
                yield put(base, path, "0:4"), path, False
            for _ in range(2 if path[0] == "load" else 1):
                yield put(base, path, random_in_range(rng, base_value(base, path))), path, False


def base_value(doc, path):
    for p in path:
        doc = doc[p]
    return doc


def run_builds(exp, tmp_path):
    """What `chaos run` builds before it starts anything, built here from what the model gave."""
    from chaos.faults import make_fault
    from chaos.reference.gateway.settings import GatewaySettings
    from chaos.experiment.loadspec import load_config
    from chaos.targets import make_target
    from chaos.targets.reference import gateway_settings

    load_config(exp.load, ["http://127.0.0.1:9"], None, None, str(tmp_path))
    if exp.target.settings.get("gateway") is not None:
        GatewaySettings.from_dict(gateway_settings(exp.target.settings["gateway"]))
    target = make_target(exp.target, str(tmp_path))
    for s in exp.faults:
        make_fault(s, target)


PARSER = build_parser()


def dry_run(path) -> tuple[int, str]:
    """`chaos run PATH --dry-run`, in this process (the command's own parser and function)."""
    out, err = io.StringIO(), io.StringIO()
    args = PARSER.parse_args(["run", str(path), "--dry-run"])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = args.func(args)
    return code, err.getvalue()


@pytest.mark.slow
def test_generated_documents_validate_build_and_dry_run_agree(tmp_path):
    cases = list(documents())
    assert len(cases) > 800
    files = []
    for i, (doc, path, hostile) in enumerate(cases):
        f = tmp_path / f"g{i}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        files.append(f)
    # `chaos validate` as a user runs it, one process for every file (a line per file), on the other core
    # while this process does the dry runs.
    validate = subprocess.Popen([sys.executable, "-m", "chaos", "validate", *map(str, files)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dry = [dry_run(f) for f in files]
    out, err = validate.communicate(timeout=600)
    assert "Traceback" not in err, err[-3000:]
    ok = {line.split(": ok")[0] for line in out.splitlines() if ": ok" in line}
    errors: dict[str, list[str]] = {}
    for line in err.splitlines():
        m = re.match(r"error: (\S+?\.yaml):\d+:\d+: ", line)
        if m:
            errors.setdefault(m.group(1), []).append(line[len("error: "):])
    accepted = 0
    for f, (doc, path, hostile), (code, dry_err) in zip(files, cases, dry):
        name, shown = str(f), f"{'.'.join(map(str, path))} = {doc_value(doc, path)!r}"
        assert (name in ok) != (name in errors), (shown, out[-500:], err[-500:])
        assert code == (0 if name in ok else 2), (shown, dry_err)
        assert "Traceback" not in dry_err
        if name in ok:
            accepted += 1
            assert not hostile, f"{shown} was accepted"
            run_builds(load_experiment(name), tmp_path)  # the model builds it, and so does the run
        else:  # the dry run's exit 2 is the model's ExperimentError (anything else would have raised here)
            line = read_file(name).values.get(path, (None,))[0]
            if hostile:  # out of every range: refused where it is written
                assert any(p.startswith(f"{name}:{line}:") for p in errors[name]), (shown, line, errors[name])
    assert accepted > 60  # the random in-range values are mostly taken


def doc_value(doc, path):
    try:
        return base_value(doc, path)
    except (KeyError, IndexError, TypeError):
        return None


@pytest.mark.slow
def test_the_command_line_dry_run_agrees_on_a_sample(tmp_path):
    rng = random.Random(7)
    cases = list(documents())
    sample = [c for c in cases if c[2]][:1] + rng.sample(cases, 3)
    for i, (doc, path, hostile) in enumerate(sample):
        f = tmp_path / f"s{i}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        r = subprocess.run([sys.executable, "-m", "chaos", "run", str(f), "--dry-run"], capture_output=True,
                           text=True, timeout=60)
        assert "Traceback" not in r.stderr
        try:
            load_experiment(str(f))
            assert r.returncode == 0, r.stderr
        except ExperimentError:
            assert r.returncode == 2 and re.search(rf"error: {re.escape(str(f))}:\d+:\d+: ", r.stderr)


@pytest.mark.parametrize("value", [".nan", ".inf", "1e400", "100000000000000000000000000000", "-3", "1.0e+29"])
def test_hostile_values_through_variables_are_refused(tmp_path, value):
    f = tmp_path / "v.yaml"
    f.write_text("vars: {U: 2}\n" + yaml.safe_dump({**BASE, "load": {**BASE["load"], "users": "${U}"}},
                                                   sort_keys=False))
    load_experiment(str(f))
    with pytest.raises(ExperimentError) as e:
        load_experiment(str(f), {"U": value})
    assert all(re.match(rf"{re.escape(str(f))}:\d+:\d+: load.users: ", p) for p in e.value.problems)
