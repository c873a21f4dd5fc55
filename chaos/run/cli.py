"""`chaos run`, `validate`, `list`, `schema`, `recover`, `targets up|down`."""

from __future__ import annotations

import glob
import json
import os
import sys

from ..errors import InputError, SetupError, handled, report
from ..rundir.files import JOURNAL, REPORT_HTML

RUN_EPILOG = """exit codes: 0 passed, 1 verification failed, 2 invalid input or setup failure,
            3 aborted by a stop condition (abort_when), 4 inconclusive (nothing failed, but a check
            could not be judged, e.g. an instance came back too late to be routed requests; the
            report says why), 130 interrupted

examples:
  chaos run experiments/kill-instance.yaml
  chaos run experiments/kill-instance.yaml --var USERS=16 --out reports/gameday-1
  chaos run experiments/kill-instance.yaml --dry-run        # validate and print the schedule only
  chaos run experiments/kill-instance.yaml --json | jq .    # machine-readable events

Ctrl-C stops the run and reverts every fault; a second Ctrl-C reverts faster. If the run was
killed outright (SIGKILL, power loss), `chaos recover RUN_DIR` undoes what it left behind."""


def register(sub, formatter) -> None:
    p = sub.add_parser("run", help="run one experiment file", formatter_class=formatter, epilog=RUN_EPILOG,
                       description="Start (or reach) the target, drive load, inject the faults on schedule, "
                                   "verify what the target did, always roll faults back, and write a report "
                                   "(report.md, report.json, journal.jsonl, requests.jsonl) to the run directory.")
    p.add_argument("file", help="experiment YAML file")
    p.add_argument("--var", action="append", default=[], metavar="NAME=VALUE", help="set ${NAME} in the file")
    p.add_argument("--target", metavar="FILE",
                   help="run against this target file instead of the one the experiment names (its faults' "
                        "instances must exist there); how `chaos gate` runs one suite against two builds")
    p.add_argument("--dry-run", action="store_true", help="validate and print the plan; start nothing")
    p.add_argument("--out", help="run directory (default reports/NAME-UTCTIME)")
    p.add_argument("--json", action="store_true", help="JSON lines on stdout instead of the live view")
    p.set_defaults(func=cmd_run)

    v = sub.add_parser("validate", help="check experiment, target or suite files", formatter_class=formatter,
                       description="Validate files against the published schema (see `chaos schema`); every "
                                   "problem names file:line:column and the key. A suite (game days, the gate) is "
                                   "checked as `chaos gameday` loads it, each experiment it names included.",
                       epilog="example:\n  chaos validate experiments/*.yaml targets/*.yaml gamedays/*.yaml")
    v.add_argument("files", nargs="+")
    v.add_argument("--var", action="append", default=[], metavar="NAME=VALUE")
    v.set_defaults(func=cmd_validate)

    ls = sub.add_parser("list", help="list fault types, experiments or targets", formatter_class=formatter,
                        epilog="examples:\n  chaos list faults\n  chaos list experiments")
    ls.add_argument("what", choices=["faults", "experiments", "targets"])
    ls.set_defaults(func=cmd_list)

    sc = sub.add_parser("schema", help="print the JSON Schema of experiment or target files, or of report.json",
                        formatter_class=formatter,
                        epilog="examples:\n  chaos schema > .vscode/chaos-experiment.schema.json   # VS Code YAML "
                               "extension\n  chaos schema report > report.schema.json            # report.json, "
                               "version 2")
    sc.add_argument("which", nargs="?", default="experiment", choices=["experiment", "target", "report"])
    sc.set_defaults(func=cmd_schema)

    r = sub.add_parser("recover", help="undo what a killed run left behind", formatter_class=formatter,
                       description="Read RUN_DIR/journal.jsonl; revert every fault that was applied but not "
                                   "reverted, and stop every process the run started that still lives.",
                       epilog="example:\n  chaos recover reports/kill-instance-20261202T120000Z")
    r.add_argument("run_dir")
    r.set_defaults(func=cmd_recover)

    t = sub.add_parser("targets", help="start or stop a target outside a run", formatter_class=formatter,
                       description="`up` starts a target file's instances and leaves them running (state in "
                                   ".chaos/targets/NAME.json); `down` stops them.",
                       epilog="examples:\n  chaos targets up targets/reference.yaml --var PRESET=tiny\n"
                              "  chaos load http://127.0.0.1:PORT --users 8 --duration 30s\n"
                              "  chaos targets down targets/reference.yaml")
    t.add_argument("action", choices=["up", "down"])
    t.add_argument("target_file")
    t.add_argument("--var", action="append", default=[], metavar="NAME=VALUE",
                   help="set ${NAME} in the target file, e.g. --var PRESET=tiny (environment variables are not "
                        "read for these: a run's settings are the file's and the command line's)")
    t.set_defaults(func=cmd_targets)


@handled
def cmd_run(a) -> int:
    from ..experiment.variables import cli_vars
    from ..experiment.model import load_experiment
    from .runner import Runner
    from .view import View

    exp = load_experiment(a.file, cli_vars(a.var), target=a.target)
    if a.dry_run:
        print(f"{exp.name}: {exp.description}")
        print(f"target: {exp.target.kind} ({exp.target.replicas} instance(s)) from {exp.target.source}")
        print(f"load: {json.dumps(exp.mask(exp.load.to_dict()))} for {exp.load_duration:g}s")
        for f in exp.faults:
            print(f"  at {f.at:6.1f}s  {f.type} {json.dumps(exp.mask(f.params.to_dict()))}")
        _print_links(exp)
        _warn(exp)
        print("valid; nothing started (--dry-run)")
        return 0
    runner = Runner(exp, a.out, View("json" if a.json else "auto"))
    try:
        os.makedirs(runner.run_dir, exist_ok=True)
    except OSError as e:
        raise SetupError(f"cannot create the run directory {runner.run_dir}: {e.strerror or e}") from None
    if os.path.exists(os.path.join(runner.run_dir, JOURNAL)):
        raise InputError(f"{runner.run_dir} already holds a run; choose another --out")
    code = runner.execute()
    rep = getattr(runner, "report", None)
    if rep and not a.json:
        print()
        for c in rep["checks"]:
            mark = {True: "PASS", False: "FAIL", None: "NOT JUDGED"}[c["passed"]]
            why = f" — {c['detail']}" if c["passed"] is None else ""
            print(f"  {mark}  {c['name']}: {c['measured']} (required {c['threshold']}){why}")
        print(f"\n{exp.name}: {rep['verdict'].upper()}" + (f" — {rep['reason']}" if rep.get("reason") else ""))
        print(f"report: {os.path.join(runner.run_dir, 'report.md')}"
              + (" (and report.html, junit.xml)" if os.path.exists(os.path.join(runner.run_dir, REPORT_HTML))
                 else ""))
    elif rep:
        print(json.dumps({"event": "result", "verdict": rep["verdict"], "exit_code": code,
                          "run_dir": runner.run_dir, "checks": rep["checks"]}))
    return code


def _print_links(exp) -> None:
    from ..faults import wanted_links

    wanted = wanted_links(exp)
    if not wanted:
        return
    tp = exp.target.toxiproxy
    engine = (f"the toxiproxy-server at {tp['url']}" if "url" in tp else f"{tp['server']} (started by the run)"
              if "server" in tp else "the bundled Toxiproxy-compatible proxy (started by the run)")
    gateway = exp.target.kind in ("reference", "stack") and exp.target.gateway is not None
    print("links (each a proxy on a free loopback port, from before the load to the end of the run):")
    for link, families in sorted(wanted.items()):
        where = ("in front of the whole target" if link == "client" else
                 f"between the gateway and {link}" if gateway else f"in front of {link}")
        parts = (["LLM proxy"] if "llm" in families else []) + ([f"Toxiproxy: {engine}"] if "network" in families
                                                                 else [])
        print(f"  {link:8s} {where}: {' → '.join(parts)}")


def cmd_validate(a) -> int:
    from ..experiment.loader import ExperimentError, read_file
    from ..experiment.variables import cli_vars
    from ..experiment.model import load_experiment, load_target

    code = 0
    for path in a.files:
        try:
            doc = read_file(path)
            if isinstance(doc.data, dict) and "kind" in doc.data and "load" not in doc.data:
                load_target(doc, cli_vars(a.var))
                what = "target"
            elif isinstance(doc.data, dict) and "experiments" in doc.data and "load" not in doc.data:
                from ..suite.model import load_suite

                suite = load_suite(path, cli_vars(a.var))  # as `chaos gameday` and `chaos gate` load it
                what = f"suite of {len(suite.entries)} experiment(s)"
            else:
                exp = load_experiment(path, cli_vars(a.var))
                what = "experiment"
                _warn(exp, path)
            print(f"{path}: ok ({what})")
        except ExperimentError as e:  # this file's problems; the next file is checked still
            code = report(e)
    return code


def _warn(exp, where: str | None = None) -> None:
    """Advice, not errors: the file is valid, but its timing may leave checks unjudged."""
    from .timing import restart_warnings

    for w in restart_warnings(exp):
        print(f"warning: {where + ': ' if where else ''}{w}", file=sys.stderr)


def cmd_list(a) -> int:
    if a.what == "faults":
        from ..faults import FAULT_TYPES

        families = {"instance": "instance faults (processes and containers the run started)",
                    "network": "network faults on a link (Toxiproxy toxics; link: client or an instance id)",
                    "llm": "LLM faults on a link (the SSE-aware proxy; probability, count, occurrences, match)",
                    "input": "input faults (abnormal requests, each with the answer a good service gives)"}
        for family, title in families.items():
            print(f"{title}:")
            for name, cls in sorted(FAULT_TYPES.items()):
                if getattr(cls, "family", "instance") == family:
                    print(f"  {name:<19} {cls.summary}")
        print("\nEach type's settings: `chaos schema` (JSON Schema), and docs/experiments.md.")
        return 0
    from ..experiment.loader import ExperimentError, read_file

    folder = "experiments" if a.what == "experiments" else "targets"
    files = sorted(glob.glob(os.path.join(folder, "*.yaml")))
    # users' stacks and real engines (opt-in: scripts/engines.sh builds them), vendors
    subs = ("stacks", "engines", "vendors") if folder == "targets" else ("stacks", "engines")
    files += [f for sub in subs for f in sorted(glob.glob(os.path.join(folder, sub, "*.yaml")))]
    if not files:
        print(f"no {folder}/*.yaml here", file=sys.stderr)
        return 0
    width = max(len(f) for f in files)
    for f in files:
        try:
            d = read_file(f).data  # bounded: a hostile file in the folder costs a line, not the machine
            desc = (d.get("description") or d.get("kind", "")) if isinstance(d, dict) else ""
        except ExperimentError:
            desc = "(not a valid file: chaos validate says why)"
        said = proves(f) if folder == "experiments" else _header(f)
        print(f"{f:<{width}}  {said or _first_sentence(str(desc))}")
    return 0


def _opening_comment(path: str, lines: int = 20) -> list[str]:
    """The comment lines a file opens with, '#' stripped (each read bounded: a hostile file costs nothing)."""
    out = []
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for _ in range(lines):
                line = f.readline(4096)
                if not line.startswith("#"):
                    break
                out.append(line.lstrip("#").strip())
    except OSError:
        pass
    return out


def proves(path: str) -> str | None:
    """What an experiment shows: its `# Proves: ...` header line, if it has one."""
    return next((c[len("Proves:"):].strip() for c in _opening_comment(path) if c.startswith("Proves:")), None)


def _header(path: str) -> str | None:
    """A target file's opening comment, its first sentence (what the target is)."""
    lines = _opening_comment(path)
    return _first_sentence(" ".join(lines)) if lines else None


def _first_sentence(text: str, limit: int = 110) -> str:
    text = " ".join(text.split())
    end = text.find(". ")
    text = text if end < 0 else text[:end + 1]
    return text if len(text) <= limit else text[:limit - 1].rsplit(" ", 1)[0] + "…"


def cmd_schema(a) -> int:
    if a.which == "report":
        from ..report.schema import REPORT
        print(json.dumps(REPORT, indent=2))
        return 0
    from ..experiment import schema as S
    print(json.dumps(S.EXPERIMENT if a.which == "experiment" else S.TARGET_FILE, indent=2))
    return 0


@handled
def cmd_recover(a) -> int:
    from .recover import recover

    actions = recover(a.run_dir)
    for line in actions or ["nothing was left behind"]:
        print(line)
    return 0


@handled
def cmd_targets(a) -> int:
    from ..common import stop_group
    from ..experiment.variables import cli_vars
    from ..experiment.model import load_target
    from ..targets import TargetError, make_target
    from ..targets.base import write_json

    spec, _ = load_target(a.target_file, cli_vars(a.var))
    state_dir = os.path.join(".chaos", "targets")
    os.makedirs(state_dir, exist_ok=True)
    state = os.path.join(state_dir, f"{spec.name}.json")
    if a.action == "up":
        if os.path.exists(state):
            raise InputError(f"{spec.name} looks up already ({state}); run `chaos targets down {a.target_file}` "
                             f"first")
        target = make_target(spec, state_dir)
        try:
            target.up()
        except TargetError:
            target.down(grace=1)  # what started of it, before the error is said
            raise
        write_json(state, target.describe())
        for i in target.all_instances():  # the gateway too: where a client goes
            print(f"{i.id}: {i.url} (pid {i.pid})")
        return 0
    if not os.path.exists(state):
        print(f"{spec.name} is not up (no {state})")
        return 0
    info = json.load(open(state))
    for inst in reversed(info["instances"]):  # the front (a gateway) first
        if inst.get("container"):
            from ..targets.docker import remove_container
            remove_container(inst["container"], inst.get("engine"))
        else:
            stop_group(inst.get("pid"), inst.get("create_time"), grace=5)
        print(f"stopped {inst['id']}")
    if info.get("hosts"):  # the namespaces, veths and bridge it was laid out on, once nothing runs in them
        from ..netns import remove

        for what in remove(info["hosts"]):
            print(f"removed {what}")
    os.remove(state)
    return 0
