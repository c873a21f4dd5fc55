"""Experiments as pytest tests: `pytest --chaos experiments/` runs each experiment file as one test item, and
`@pytest.mark.chaos(FILE)` with the `chaos_run` fixture runs one inside an ordinary test. See docs/pytest-plugin.md.

pytest loads this module in every run of every project that has llm-chaos installed (the pytest11 entry point), so
it imports nothing heavy at import time: YAML and the experiment loader only once --chaos or the marker is used.
Each run is `python -m chaos run` in a child process, exactly what a user gets: its signal handlers, its rollback
and its exit code are the CLI's, never interleaved with pytest's own.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from .errors import Finding
from .rundir.files import REPORT_JSON

SUFFIXES = (".yaml", ".yml")
ROLLBACK_WAIT_S = 120  # after a Ctrl-C, how long a run gets to revert its faults before it is killed
_ROOTS = pytest.StashKey[list]()  # the --chaos paths, resolved: only YAML under them is collected


@dataclass(slots=True)
class ChaosRun:
    """One finished `chaos run`: what the chaos_run fixture gives a test to assert on."""
    file: Path
    run_dir: Path
    exit_code: int
    report: dict | None  # report.json, parsed; None when the run wrote none (invalid file, setup failure)
    stdout: str = ""
    stderr: str = ""

    @property
    def checks(self) -> list[dict]:
        """report.json's checks: name, measured, threshold, passed (True, False, None: not judged), detail."""
        return list((self.report or {}).get("checks") or [])

    @property
    def verdict(self) -> str | None:
        return (self.report or {}).get("verdict")

    def check(self, name: str) -> dict:
        """The check of that name from report.json (KeyError, listing the names, when there is none)."""
        for c in self.checks:
            if c.get("name") == name:
                return c
        raise KeyError(f"no check {name!r} in {self.run_dir}/report.json; it has: "
                       + ", ".join(repr(c.get("name")) for c in self.checks))


class ChaosRunFailed(Finding):
    """A run that did not pass: the message is the whole failure report (no traceback of ours is shown)."""


# -- options, collection ------------------------------------------------------------------------------------------
def pytest_addoption(parser) -> None:
    g = parser.getgroup("chaos", "llm-chaos experiments as tests")
    g.addoption("--chaos", action="append", default=[], metavar="PATH",
                help="collect each experiment YAML under PATH (a directory or a file; repeatable) as one test "
                     "that runs it like `chaos run` (exit 0 passes, 1/2/3 fail, 4 skips)")
    g.addoption("--chaos-var", action="append", default=[], metavar="NAME=VALUE",
                help="passed to every run as --var NAME=VALUE (repeatable; wins over a marker's vars)")
    g.addoption("--chaos-out", metavar="DIR", default=None,
                help="where the run directories go, one per run (default: reports/ in the current directory)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "chaos(file, vars=None, check=True): run this experiment file for the "
                                       "chaos_run fixture (see docs/pytest-plugin.md)")
    for item in config.getoption("chaos_var") or []:
        name, sep, _ = item.partition("=")
        if not sep or not name:
            raise pytest.UsageError(f"--chaos-var {item!r}: write NAME=VALUE, e.g. --chaos-var PRESET=tiny")
    paths = config.getoption("chaos") or []
    if not paths:
        return
    here = config.invocation_params.dir
    config.stash[_ROOTS] = [(here / p).resolve() for p in paths]
    # The --chaos paths are collection arguments. Alone on the command line they replace testpaths (the user asked
    # for the experiments, not the whole suite); given with other paths, they are added to them.
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        config.args = [*config.args, *paths]
    else:
        config.args = list(paths)


def pytest_collect_file(file_path: Path, parent):
    roots = parent.config.stash.get(_ROOTS, None)
    if not roots:
        return None
    p = file_path.resolve()
    # A file named on its own is run whatever it is: `chaos run` then says what it is ("not an experiment file").
    if p in roots or (p.suffix in SUFFIXES and any(r in p.parents for r in roots) and _looks_like_experiment(p)):
        return ExperimentFile.from_parent(parent, path=file_path)
    return None


def _looks_like_experiment(path: Path) -> bool:
    """A mapping with target: or load: at its top level (a target file has neither). A file that does not parse is
    collected too: it may be a broken experiment, and its item then fails with the file:line of the problem."""
    from .experiment.loader import ExperimentError, read_file

    try:
        data = read_file(str(path)).data
    except ExperimentError:
        return True
    return isinstance(data, dict) and ("target" in data or "load" in data)


class ExperimentFile(pytest.File):
    def collect(self):
        yield ExperimentItem.from_parent(self, name=self.path.stem)


class ExperimentItem(pytest.Item):
    def runtest(self) -> None:
        run = run_experiment(self.config, self.path, {})
        _record(self, run)
        apply_outcome(run)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ChaosRunFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"chaos run {self.path.name}"


# -- the marker and fixture -----------------------------------------------------------------------------------------
@pytest.fixture
def chaos_run(request) -> ChaosRun:
    """Runs the file of the test's @pytest.mark.chaos(FILE, vars={...}, check=True). With check=True (the default)
    a run that did not pass fails or skips the test as a --chaos item would; check=False hands back any finished
    run for the test to judge itself. A relative FILE is taken from pytest's rootdir."""
    marker = request.node.get_closest_marker("chaos")
    if marker is None or not marker.args:
        pytest.fail(f"{request.node.nodeid}: the chaos_run fixture needs "
                    f"@pytest.mark.chaos('experiments/FILE.yaml') on the test", pytrace=False)
    file = Path(marker.args[0])
    if not file.is_absolute():
        file = request.config.rootpath / file
    variables = {str(k): str(v) for k, v in (marker.kwargs.get("vars") or {}).items()}
    run = run_experiment(request.config, file, variables)
    _record(request.node, run)
    return run  # judged in pytest_pyfunc_call: a failed run is a failed test, not an error in its setup


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    run = getattr(pyfuncitem, "funcargs", {}).get("chaos_run")
    marker = pyfuncitem.get_closest_marker("chaos")
    if isinstance(run, ChaosRun) and marker is not None and marker.kwargs.get("check", True):
        kind, message = outcome(run)
        if kind == "failed":
            pytest.fail(message, pytrace=False)
        apply_outcome(run)
    return None  # the test itself runs next, as usual


def _record(item, run: ChaosRun) -> None:
    """The run directory in the test's report (pytest's --junitxml writes it as a property)."""
    if run.run_dir.exists():
        item.user_properties.append(("chaos_run_dir", str(run.run_dir)))


# -- running one experiment -----------------------------------------------------------------------------------------
def run_experiment(config, file: Path, variables: dict[str, str]) -> ChaosRun:
    """`python -m chaos run FILE --out RUN_DIR --var ...` in its own session, so a Ctrl-C at the terminal reaches
    pytest only and is handed on to the run once (a second one once more: the run's "revert faster")."""
    merged = dict(variables)
    for item in config.getoption("chaos_var") or []:  # the command line wins, as --var wins over a file's vars:
        name, _, value = item.partition("=")
        merged[name] = value
    run_dir = _new_run_dir(config, file)
    cmd = [sys.executable, "-m", "chaos", "run", str(file), "--out", str(run_dir)]
    for name, value in merged.items():
        cmd += ["--var", f"{name}={value}"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                cwd=config.invocation_params.dir, start_new_session=True)
        code, interrupted = _wait(proc)
        out.seek(0)
        err.seek(0)
        stdout, stderr = (f.read().decode("utf-8", "replace") for f in (out, err))
    report = None
    try:
        report = json.loads((run_dir / REPORT_JSON).read_text())
    except (OSError, ValueError):
        try:
            run_dir.rmdir()  # an invalid file leaves the directory empty: leave no litter behind
        except OSError:
            pass
    run = ChaosRun(file, run_dir, 130 if interrupted else code, report, stdout, stderr)
    if run.exit_code == 130:  # stops the session, whatever a test asked of the marker: the user wants out
        apply_outcome(run)
    return run


def _wait(proc: subprocess.Popen) -> tuple[int, bool]:
    """The run's exit code, and whether pytest was interrupted meanwhile. Whatever stops pytest while a run is on
    (Ctrl-C, pytest-timeout's exception) first lets the run revert its faults: it gets SIGINT, never a kill,
    unless it is still going ROLLBACK_WAIT_S later."""
    try:
        return proc.wait(), False
    except KeyboardInterrupt:
        _stop(proc)
        return proc.returncode, True
    except BaseException:
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + ROLLBACK_WAIT_S
    while proc.poll() is None:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except KeyboardInterrupt:
            proc.send_signal(signal.SIGINT)  # the user is in a hurry: the run reverts faster, still reverts
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _new_run_dir(config, file: Path) -> Path:
    base = Path(config.getoption("chaos_out") or "reports")
    if not base.is_absolute():
        base = config.invocation_params.dir / base
    base.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1, 1000):  # mkdir is atomic: pytest-xdist workers never share a directory
        d = base / (f"{file.stem}-{stamp}" + (f"-{n}" if n > 1 else ""))
        try:
            d.mkdir()
            return d
        except FileExistsError:
            continue
    raise pytest.UsageError(f"{base}: no free run directory name for {file.stem}; clean it out")


# -- the outcome ----------------------------------------------------------------------------------------------------
def outcome(run: ChaosRun) -> tuple[str, str]:
    """(passed|failed|skipped|interrupted, message) of a finished run, by its exit code (see `chaos run --help`)."""
    rep = run.report or {}
    where = (f"report: {run.run_dir / 'report.md'}" if run.report is not None else
             f"run directory: {run.run_dir}" if run.run_dir.exists() else "")
    reason = rep.get("reason")
    if run.exit_code == 0:
        return "passed", ""
    if run.exit_code == 1 and run.report is not None:
        lines = [f"chaos run {run.file.name}: verification failed" + (f" ({reason})" if reason else "")]
        for c in run.checks:
            if c.get("passed") is False:
                detail = f" — {c['detail']}" if c.get("detail") else ""
                lines.append(f"  FAIL  {c.get('name')}: measured {c.get('measured')}, "
                             f"required {c.get('threshold')}{detail}")
        return "failed", "\n".join([*lines, where])
    if run.exit_code == 4:
        why = [f"{c.get('name')}: {str(c.get('detail') or '').removeprefix('not judged: ')}"
               for c in run.checks if c.get("passed") is None]
        return "skipped", (f"chaos run {run.file.name}: not judged: " + ("; ".join(why) or reason or "no reason given")
                           + (f" ({where})" if where else ""))
    if run.exit_code == 3:
        return "failed", f"chaos run {run.file.name}: aborted by abort_when: {reason or 'no reason given'}\n{where}"
    if run.exit_code == 130:
        return "interrupted", (f"chaos run {run.file.name} interrupted; its faults were reverted (if a fault "
                               f"outlived it, `chaos recover {run.run_dir}` undoes it)")
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
    errors += [ln for ln in run.stdout.splitlines() if ln.startswith("error:") and ln not in errors]
    if not errors and reason:
        errors = [f"error: {reason}"]
    if not errors:  # not the CLI's exit: a crash or a kill; the output's tail says what happened
        errors = (run.stderr.strip() or run.stdout.strip()).splitlines()[-15:]
    what = "invalid input or setup failure" if run.exit_code == 2 else f"exit code {run.exit_code}"
    return "failed", "\n".join([f"chaos run {run.file.name}: {what}", *errors] + ([where] if where else []))


def apply_outcome(run: ChaosRun) -> None:
    """Turns the outcome into pytest's: return (passed), ChaosRunFailed, pytest.skip, or pytest.exit(130)."""
    kind, message = outcome(run)
    if kind == "failed":
        raise ChaosRunFailed(message)
    if kind == "skipped":
        pytest.skip(message)
    if kind == "interrupted":
        pytest.exit(message, returncode=130)
