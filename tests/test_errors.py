"""chaos/errors.py: one base error, a few kinds by what the user must do, and one table of exit codes."""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib
import io
import pathlib
import pkgutil

import pytest

import chaos
from chaos.errors import (EXIT_CODES, ChaosError, Finding, InputError, Interrupted, ServiceError, SetupError,
                          counts_as, exit_code, handled, render, report)

KINDS = (InputError, SetupError, Interrupted, ServiceError, Finding)


def test_the_kinds_derive_from_the_base_and_the_table_gives_the_documented_codes():
    assert all(issubclass(k, ChaosError) for k in KINDS)
    # chaos run's documented codes (docs/experiments.md): 2 invalid input or setup failure, 130 interrupted
    assert EXIT_CODES == {InputError: 2, SetupError: 2, Interrupted: 130}
    assert exit_code(ServiceError("x")) is None and exit_code(Finding) is None and exit_code(ValueError()) is None

    class Deep(InputError, ValueError):
        pass

    assert exit_code(Deep("x")) == 2 and exit_code(Deep) == 2  # the nearest kind, an instance or a class


def test_a_message_with_a_hint_prints_both():
    e = SetupError("no Toxiproxy API at http://127.0.0.1:8474", hint="start toxiproxy-server, or drop toxiproxy.url")
    assert str(e) == e.message == "no Toxiproxy API at http://127.0.0.1:8474"  # the hint is not in the message
    assert render(e) == "error: no Toxiproxy API at http://127.0.0.1:8474\n" \
                        "hint: start toxiproxy-server, or drop toxiproxy.url"
    assert render(InputError("bad --var")) == "error: bad --var"
    err = io.StringIO()
    assert report(e, err) == 2
    assert err.getvalue() == render(e) + "\n"


def test_a_bare_error_reads_as_before():
    assert Interrupted().args == () and str(Interrupted()) == "" and repr(Interrupted()) == "Interrupted()"
    assert InputError("x").args == ("x",) and InputError("x").hint is None


def test_handled_prints_and_returns_the_tables_code_and_keeps_a_codeless_errors_traceback():
    @handled
    def command(error):
        raise error

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert command(InputError("bad file")) == 2
        assert command(Interrupted("stopped")) == 130
    assert err.getvalue() == "error: bad file\nerror: stopped\n"
    with pytest.raises(ServiceError):
        command(ServiceError("a 503 for a client"))  # never an exit code: a bug, with its traceback
    with pytest.raises(ValueError):
        command(ValueError("not ours"))

    @handled(stream="stdout", prefix="chaos proxy llm")
    def on_stdout():
        raise SetupError("cannot listen")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert on_stdout() == 2
    assert out.getvalue() == "chaos proxy llm: cannot listen\n"


def test_counts_as_gives_a_builtin_error_a_kind_and_keeps_a_kind_that_has_a_code():
    with pytest.raises(InputError) as e:
        with counts_as(InputError, ValueError):
            raise ValueError("--hold '0s': hold each level at least 1 s")
    assert str(e.value) == "--hold '0s': hold each level at least 1 s" and isinstance(e.value.__cause__, ValueError)

    class Rule(InputError, ValueError):
        pass

    class Dead(ServiceError, RuntimeError):
        pass

    with pytest.raises(Rule):
        with counts_as(SetupError, ValueError):
            raise Rule("a rule")  # an InputError already: it stays one
    with pytest.raises(SetupError):
        with counts_as(SetupError, RuntimeError):
            raise Dead("the engine has stopped")  # no code of its own: the RuntimeError it is counts
    with pytest.raises(KeyError):
        with counts_as(InputError, ValueError):
            raise KeyError("not listed")


# Every error class of chaos/, with the exit code today's commands end with when it reaches them (None: it never
# does; it is answered to a client, or recorded), and the builtin class it was before the tree, which it still is
# (an `except ValueError` written before still catches it). A class added to chaos/ fails the walk below until it
# is given a kind here.
ERRORS = {
    "chaos.experiment.located.ExperimentError": (2, None),  # chaos run/validate/gate/gameday: each problem, exit 2
    "chaos.experiment.loader._Refused": (2, None),  # the loader turns it into an ExperimentError
    "chaos.verify.specerror.SpecError": (2, ValueError),  # an ExperimentError of the file's verify: section
    "chaos.plan.slo.SLOError": (2, ValueError),  # chaos capacity --slo
    "chaos.reference.loader.CheckpointError": (2, ValueError),  # chaos reference serve --checkpoint
    "chaos.proxy.llm.rules.RuleError": (2, ValueError),  # chaos proxy llm --rules (the admin API answers 400)
    "chaos.scaffold.InitError": (2, None),  # chaos init
    "chaos.report.rerender.ReportError": (2, None),  # chaos report RUN_DIR
    "chaos.report.comparison.CompareError": (2, None),  # chaos report --compare
    "chaos.run.recover.RecoverError": (2, RuntimeError),  # chaos recover
    "chaos.gate.verdict.GateError": (2, None),  # chaos gate
    "chaos.targets.base.TargetError": (2, RuntimeError),  # chaos run, targets up, load, replay, sweep...
    "chaos.load.errors.LoadError": (2, RuntimeError),  # chaos run, load, replay, sweep, capacity, compare
    "chaos.faults.base.FaultError": (2, RuntimeError),  # chaos run: a fault that could not be injected
    "chaos.plan.capacity.RefusedLoad": (2, RuntimeError),  # chaos capacity: every request refused with a 4xx
    "chaos.faults.params.ParamsError": (2, ValueError),  # a fault's settings built in code (the schema stops a file's)
    "chaos.targets.toxiproxy_api.ToxiproxyError": (2, RuntimeError),  # a TargetError by the time a run sees it
    "chaos.reference.launcher.LaunchError": (2, RuntimeError),  # chaos selftest hostile
    "chaos.reference.server.ServeError": (2, RuntimeError),  # chaos reference serve
    "chaos.reference.serving.ListenError": (2, RuntimeError),  # chaos reference serve, gateway
    "chaos.gameday.runner.GamedayError": (2, None),  # chaos gameday: the folder's lock, --resume
    "chaos.gameday.historyformat.HistoryError": (2, None),  # chaos gameday: a history.sqlite it cannot read
    "chaos.netns.HostsError": (2, RuntimeError),  # hosts not made (no root, a tool missing): a TargetError by a run
    "chaos.errors.Interrupted": (130, None),  # chaos run: a signal stopped it
    "chaos.reference.protocol.APIError": (None, None),  # the reference server's error answers
    "chaos.reference.gateway.errors.GatewayError": (None, None),
    "chaos.http1.wire.HTTPError": (None, None),
    "chaos.http1.pool.UpstreamError": (None, None),
    "chaos.http1.pump.StreamIdle": (None, None),
    "chaos.reference.serving.BodyTooLarge": (None, None),
    "chaos.reference.serving.WorkerError": (None, RuntimeError),
    "chaos.reference.serving.WorkerBusy": (None, RuntimeError),
    "chaos.reference.engine.async_engine.EngineDeadError": (None, RuntimeError),
    "chaos.proxy.toxiproxy.toxics.ApiError": (None, None),  # the Toxiproxy-compatible API's error answers
    "chaos.proxy.llm.stream.StreamEnd": (None, None),  # an LLM fault ending a stream
    "chaos.load.locustfile._Timeout": (None, None),  # a request's timeout, in its record
    "chaos.run.scrape.NotPrometheus": (None, ValueError),  # an instance's /metrics, in metrics.jsonl
    "chaos.pytest_plugin.ChaosRunFailed": (None, None),  # pytest --chaos: a test that failed
}
ROOT = pathlib.Path(chaos.__file__).parent


def source_of(info: pkgutil.ModuleInfo) -> pathlib.Path:
    base = pathlib.Path(info.module_finder.path) / info.name.rpartition(".")[2]
    return base / "__init__.py" if info.ispkg else base.with_suffix(".py")


def runs_in_locust(path: pathlib.Path) -> bool:
    """A module that imports Locust or gevent runs only inside a Locust process: imported here, it would patch this
    process with gevent. Its classes are read from its source instead."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = [a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module and not n.level]
    return any(m.partition(".")[0] in ("locust", "gevent") for m in names)


def error_classes(package) -> tuple[dict[str, type], dict[str, list[str]]]:
    """Every exception class defined in the package's modules: 'module.Class' -> the class, for each module that
    can be imported here (a __main__ is not: it runs its command), and 'module.Class' -> its bases' names, read from
    the source, for a module that runs only inside Locust (each class with a base that is a builtin exception or
    one of the kinds of chaos.errors)."""
    imported, read = {}, {}
    kinds = {k.__name__ for k in (ChaosError, *KINDS)}
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        if info.name.endswith(".__main__"):
            continue
        if runs_in_locust(source_of(info)):
            for node in ast.walk(ast.parse(source_of(info).read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = [b.id if isinstance(b, ast.Name) else b.attr for b in node.bases
                             if isinstance(b, (ast.Name, ast.Attribute))]
                    if set(bases) & kinds or any(isinstance(getattr(builtins, b, None), type)
                                                 and issubclass(getattr(builtins, b), BaseException) for b in bases):
                        read[f"{info.name}.{node.name}"] = bases
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                imported[f"{info.name}.{name}"] = obj
    return imported, read


def outside_the_tree(imported: dict[str, type], read: dict[str, list[str]]) -> list[str]:
    kind_names = {k.__name__ for k in KINDS}
    return sorted([q for q, cls in imported.items() if not issubclass(cls, ChaosError)]
                  + [q for q, bases in read.items() if not set(bases) & kind_names])


def test_every_error_class_of_the_toolkit_derives_from_the_base():
    imported, read = error_classes(chaos)
    kinds = {f"chaos.errors.{k.__name__}" for k in (ChaosError, *KINDS)}
    assert len(imported) > 30 and kinds <= set(imported) and read  # the Locust file's _Timeout is read
    assert outside_the_tree(imported, read) == []
    every = set(imported) | set(read)
    assert sorted(every - kinds - set(ERRORS)) == [], "a new error class: give it a kind, and a line in ERRORS"
    assert sorted(set(ERRORS) - every) == [], "ERRORS names a class that is gone"


def test_the_table_gives_each_class_the_code_its_commands_end_with_and_each_keeps_its_builtin_base():
    for qualified, (code, builtin) in ERRORS.items():
        module, _, name = qualified.rpartition(".")
        if runs_in_locust(ROOT.parent / (module.replace(".", "/") + ".py")):
            continue
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, ChaosError), qualified
        assert exit_code(cls) == code, qualified
        assert builtin is None or issubclass(cls, builtin), qualified
        assert sum(issubclass(cls, k) for k in KINDS) == 1, qualified  # exactly one kind


def test_the_walk_finds_an_error_class_outside_the_tree(tmp_path, monkeypatch):
    """The walk above can fail: a package with a class outside the tree, one through another such class, and a
    Locust module's, read and not imported."""
    top = tmp_path / "errtree_probe"
    top.mkdir()
    (top / "__init__.py").write_text("")
    (top / "a.py").write_text("from chaos.errors import InputError\nclass Good(InputError, ValueError):\n    pass\n"
                              "class Bad(RuntimeError):\n    pass\nclass WorseStill(Bad):\n    pass\n"
                              "class NotAnError:\n    pass\n")
    # imported by mistake, it would stop at its first line, before Locust patched this process
    (top / "swarm.py").write_text("import errtree_no_such_module\nimport locust\nfrom chaos.errors import Finding\n"
                                  "class Timeout(Finding):\n    pass\nclass Loose(Exception):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import errtree_probe

    imported, read = error_classes(errtree_probe)  # swarm.py would fail to import: it is only read
    assert sorted(imported) == ["errtree_probe.a.Bad", "errtree_probe.a.Good", "errtree_probe.a.WorseStill"]
    assert read == {"errtree_probe.swarm.Timeout": ["Finding"], "errtree_probe.swarm.Loose": ["Exception"]}
    assert outside_the_tree(imported, read) == ["errtree_probe.a.Bad", "errtree_probe.a.WorseStill",
                                                "errtree_probe.swarm.Loose"]


def test_an_experiment_error_prints_each_problem_on_a_line_of_its_own():
    from chaos.experiment.loader import ExperimentError

    e = ExperimentError(["a.yaml:1:1: load: required", "a.yaml:2:3: faults[0].at: a duration"])
    assert render(e) == "error: a.yaml:1:1: load: required\nerror: a.yaml:2:3: faults[0].at: a duration"


def test_the_documented_table_is_the_table():
    """docs/experiments.md's table of kinds says each kind's code as EXIT_CODES gives it ("none": no code)."""
    import re

    text = (ROOT.parent / "docs" / "experiments.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| [^|]* \| (\d+|none) \|", text, re.M))
    assert rows == {k.__name__: str(EXIT_CODES[k]) if k in EXIT_CODES else "none" for k in KINDS}


# -- the command line: real invocations end with the table's code and say what today's commands say ---------------
def chaos_cli(cwd, *args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def files(tmp_path):
    (tmp_path / "bad.yaml").write_text("name: x\nload: 3\nfaults: [1]\n")
    (tmp_path / "log.jsonl").write_text('{"nope": 1}\n')
    (tmp_path / "rules.json").write_text('[{"name": "x", "effect": "nope"}]')
    (tmp_path / "empty").mkdir()
    return tmp_path


CLI_CASES = [  # (arguments, the kind whose code it ends with, what it says first, and where)
    (["run", "missing.yaml"], InputError, "error: missing.yaml: no such file", "stderr"),
    (["validate", "missing.yaml"], InputError, "error: missing.yaml: no such file", "stderr"),
    (["run", "bad.yaml", "--dry-run"], InputError, "error: bad.yaml:1:1: (top): missing required key 'target'\n"
     "error: bad.yaml:3:10: faults[0]: expected object, got int 1\n", "stderr"),  # a problem a line
    (["run", "bad.yaml", "--var", "NOEQ"], InputError, "error: --var 'NOEQ': write NAME=VALUE, e.g. --var PRESET=tiny",
     "stderr"),
    (["recover", "empty"], InputError, "error: empty has no journal.jsonl: is it a run directory (reports/NAME-TIME)?",
     "stderr"),
    (["report", "--compare", "empty", "empty"], InputError,
     "error: empty: no requests.jsonl: give two run directories of `chaos run` or `chaos load`", "stderr"),
    (["sweep", "http://127.0.0.1:9", "--hold", "0s"], InputError, "error: --hold '0s': hold each level at least 1 s",
     "stderr"),  # a ValueError of a flag
    (["replay", "log.jsonl", "http://10.1.2.3:8000"], InputError,
     "error: http://10.1.2.3:8000 is not on loopback; pass --allow-remote to replay against it", "stderr"),
    (["load", "missing.yaml"], SetupError,
     "error: TARGET 'missing.yaml' is neither a URL (http://127.0.0.1:8000) nor a target file", "stderr"),
    (["proxy", "llm", "--listen", "127.0.0.1:0", "--upstream", "http://127.0.0.1:9", "--rules", "rules.json"],
     InputError, "chaos proxy llm: effect: 'nope' is not one of", "stderr"),
]


@pytest.mark.parametrize("args, kind, first, where", CLI_CASES, ids=[" ".join(c[0][:3]) for c in CLI_CASES])
def test_a_command_ends_an_error_with_the_tables_code(files, args, kind, first, where):
    r = chaos_cli(files, *args)
    said = r.stderr if where == "stderr" else r.stdout
    assert r.returncode == EXIT_CODES[kind], (r.returncode, r.stderr[-800:])
    assert said.startswith(first) and "Traceback" not in r.stderr, said


def test_a_bad_file_is_said_one_problem_a_line_and_a_good_file_still_checked(files):
    bad = str(files / "bad.yaml")
    r = chaos_cli(ROOT.parent, "validate", bad, "experiments/kill-instance.yaml")  # its target file is found there
    assert r.returncode == EXIT_CODES[InputError]
    errors = [line for line in r.stderr.splitlines() if not line.startswith("warning: ")]  # the good file's advice
    assert len(errors) == 3 and all(line.startswith(f"error: {bad}:") for line in errors), r.stderr
    assert "experiments/kill-instance.yaml: ok (experiment)" in r.stdout


def test_a_listen_error_of_the_gateway_is_a_setup_error(files):
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = chaos_cli(files, "reference", "gateway", "--port", str(port), "--upstream", "r0=http://127.0.0.1:9")
    assert r.returncode == EXIT_CODES[SetupError]
    assert r.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: ") and "Traceback" not in r.stderr
