"""The fourth step of loading: rules the schema cannot state: across keys, about addresses and keys, and "would the run build this".

Each returns problems (file:line:col lines); none raises but check_target and check_experiment, which run them. A fault type's own rules are its class's `check`
(chaos.faults); semantic_checks adds the ones every fault gets, reading what the class says of itself.
"""

from __future__ import annotations

from urllib.parse import urlparse

from ..common import is_loopback, parse_duration
from ..faults import FAULT_TYPES
from . import schema as S
from ..verify.spec import SpecError, Verify
from .loadspec import LoadSpec, conflicts, load_config, load_duration
from .located import ExperimentError, Located, Path, locate_target, preview


def looks_like_a_key(name: str) -> bool:
    """A valid variable name that is more likely a pasted token (ghp_..., long mixed-case with digits)."""
    return (len(name) >= 20 and any(c.islower() for c in name) and any(c.isupper() for c in name)
            and any(c.isdigit() for c in name))


def _host_args(args: list) -> list[tuple[int, str | None]]:
    """(index, value) of every --host in a serve argument list; argparse takes --ho and --hos for it too."""
    out = []
    for i, a in enumerate(args):
        if not isinstance(a, str) or not a.startswith("--ho"):
            continue
        name, eq, value = a.partition("=")
        if "--host".startswith(name):
            out.append((i, value if eq else (args[i + 1] if i + 1 < len(args) else None)))
    return out


def target_checks(doc: Located, base: Path) -> list[str]:
    d, problems = doc.data, []
    for p in base:
        d = d[p]
    kind, remote_ok = d.get("kind"), d.get("allow_remote", False) is True
    if d.get("links"):
        from ..targets.links import link_names

        names = link_names(d, kind, d.get("replicas", 1))
        for i, link in enumerate(d["links"]):
            if link not in names:
                problems.append(doc.problem(base + ("links", i), f"no link {link!r}; this target has "
                                                                 f"{', '.join(names)}"))
    if kind == "reference":
        for i, host in _host_args(d.get("args") or []):
            if host is None:
                problems.append(doc.problem(base + ("args", i), "--host needs an address after it"))
            elif not is_loopback(host) and not remote_ok:
                problems.append(doc.problem(base + ("args", i), f"--host {host} would serve the replicas (and their "
                                                                f"fault routes) beyond loopback; use 127.0.0.1, or "
                                                                f"set allow_remote: true if that is what you want"))
        try:
            from ..reference.config import PRESETS  # stdlib only: cheap, and the truth about each preset
            ctx = PRESETS[d.get("preset", "small")].max_position_embeddings
            if d.get("max_model_len", 0) > ctx:
                problems.append(doc.problem(base + ("max_model_len",), f"{d['max_model_len']} exceeds the "
                                                                       f"{d.get('preset', 'small')} preset's "
                                                                       f"context of {ctx} tokens"))
        except (ImportError, KeyError):
            pass
    if kind in ("reference", "process", "stack") and d.get("hosts"):
        problems += _hosts_problems(doc, base, d)
    if kind == "stack":
        from ..targets.stack import check_stack

        problems += [doc.problem(base + path, message) for path, message in check_stack(d, doc.file)]
    if kind == "openai":
        try:
            u = urlparse(d["base_url"])
            u.port  # raises for a port that is not a number from 0 to 65535
        except ValueError as e:
            return problems + [doc.problem(base + ("base_url",), f"base_url is not a valid URL ({e}); write e.g. "
                                                                 f"https://api.example.com/v1")]
        if u.username or u.password:
            problems.append(doc.problem(base + ("base_url",), "base_url must not carry credentials "
                                                              "(user:password@); name the key's environment "
                                                              "variable with api_key_env"))
        elif "?" in d["base_url"] or "#" in d["base_url"]:
            # A query (?key=...) would be kept in the instance's url, which journals and reports show, and
            # sent on health checks but not by the load: the key belongs in api_key_env.
            problems.append(doc.problem(base + ("base_url",), "base_url must not carry a query (?...) or "
                                                              "fragment (#...); write e.g. "
                                                              "https://api.example.com/v1 and name the key's "
                                                              "environment variable with api_key_env"))
        elif not u.hostname:
            problems.append(doc.problem(base + ("base_url",), "base_url has no host; write e.g. "
                                                              "https://api.example.com/v1"))
        elif not is_loopback(u.hostname) and not remote_ok:
            problems.append(doc.problem(base + ("base_url",), f"{u.hostname} is not a loopback address; "
                                                              f"set allow_remote: true in the target to send "
                                                              f"load to a remote endpoint"))
        key = d.get("api_key_env")
        if isinstance(key, str) and looks_like_a_key(key):
            problems.append(doc.problem(base + ("api_key_env",), f"this looks like a key, not the NAME of the "
                                                                 f"variable that holds one; got {preview(key)}"))
    return problems


def semantic_checks(doc: Located, target) -> list[str]:
    d, problems = doc.data, []
    load = d["load"]
    problems += [doc.problem(("load", *path), message, key=key) for path, message, key
                 in conflicts(load, S.LOAD["properties"]["workload"]["enum"])]
    total = load_duration(load)
    for i, f in enumerate(d.get("faults") or []):
        cls = FAULT_TYPES[f["type"]]
        at = parse_duration(f["at"])
        if at >= total:
            problems.append(doc.problem(("faults", i, "at"), f"at {at:g}s is not before the end of the load "
                                                             f"({total:g}s): the fault would never run"))
        if cls.needs_started_target and not target.starts_processes:
            problems.append(doc.problem(("faults", i, "type"), f"{f['type']} needs a target the run starts "
                                                               f"(reference, process, docker, stack), not "
                                                               f"{target.kind}"))
        problems += [doc.problem(("faults", i, *path), message) for path, message in cls.check(f, target)]
        inst = f.get("instance")
        backups = ((target.gateway or {}).get("backup") or {}).get("replicas", 0)
        ids = ({f"r{k}" for k in range(target.replicas)} | {f"b{k}" for k in range(backups)}
               | ({"gw"} if target.gateway is not None else set()))
        if target.kind == "stack":
            ids = {f"r{k}" for k in range(target.replicas)} | ({"gw"} if target.gateway is not None else set())
        if target.kind in ("reference", "stack") and isinstance(inst, str) and inst not in ("random", "all") \
                and inst not in ids:
            problems.append(doc.problem(("faults", i, "instance"), f"no instance {inst!r}; this target has "
                                                                   f"{', '.join(sorted(ids))}"))
        if isinstance(inst, int) and inst >= target.replicas:
            problems.append(doc.problem(("faults", i, "instance"), f"instance {inst} does not exist: the target "
                                                                   f"has {target.replicas} (0-{target.replicas - 1})"))
        if cls.counts_instances and f.get("count", 1) > target.replicas:
            problems.append(doc.problem(("faults", i, "count"), f"count {f['count']} exceeds the "
                                                                f"{target.replicas} instances"))
    prom = (d.get("abort_when") or {}).get("prometheus")
    if prom:
        host = urlparse(prom["url"]).hostname
        if not host:
            problems.append(doc.problem(("abort_when", "prometheus", "url"), "no host; write e.g. "
                                                                             "http://127.0.0.1:9090"))
        elif not is_loopback(host) and not target.allow_remote:
            problems.append(doc.problem(("abort_when", "prometheus", "url"), f"{host} is not a loopback address; "
                                                                             f"set allow_remote: true in the "
                                                                             f"target to ask a remote Prometheus"))
    return problems


def run_would_build(doc: Located, target) -> list[str]:
    """Build what the run builds from these settings (the load plan and workloads, the gateway's settings),
    so nothing validate accepts is refused when the run starts. Reached only after the checks above, so a
    problem here is a gap in them: it still gets a line, not a traceback."""
    problems = []
    try:
        from ..load.workloads import Workload

        cfg = load_config(LoadSpec.from_dict(doc.data["load"]), ["http://127.0.0.1:9"], None, None, ".")
        # The sizes the workloads can hit (a case's own text and template set a floor), counted as the run may:
        # the run counts exactly for any server that says it is llm-chaos's (a process or openai target may be
        # running `chaos reference serve`), estimated for others, so any other kind must meet both floors. The
        # exact floor is the larger, so it is tried first. Replay logs are read at run.
        generated = [(spec, w) for spec, w in cfg.workload if spec.name != "replay"]
        for tokenizer in (("byte",) if target.kind == "reference" else ("byte", "estimate")) if generated else ():
            try:
                Workload(generated, tokenizer=tokenizer)
            except ValueError as e:
                if tokenizer == "byte" and target.kind != "reference" and "input_tokens" in str(e):
                    raise ValueError(f"{e} (a {target.kind} target may serve llm-chaos's reference server, "
                                     f"which the run counts exactly)") from None
                raise
    except (ValueError, TypeError, RuntimeError) as e:
        problems.append(doc.problem(("load",), f"the run would refuse this load: {e}"))
    gw = target.gateway
    if target.kind == "reference" and gw is not None:
        try:
            from ..reference.gateway.settings import GatewaySettings
            from ..targets.reference import gateway_settings

            GatewaySettings.from_dict(gateway_settings(gw))
        except (ValueError, TypeError) as e:
            where = ("target", "gateway") if target.source == doc.file else ()
            problems.append(f"{target.source if not where else doc.where(where)}: gateway: the gateway would "
                            f"refuse these settings: {e}")
    return problems


def _hosts_problems(doc: Located, base: Path, d: dict) -> list[str]:
    """A target's hosts: every instance on one host, a command that listens on {host}, and no proxy on a hop
    between hosts."""
    from ..netns import placement_problems

    g = d.get("gateway")
    n = d.get("replicas", 1)
    if d["kind"] == "process":
        ids = [f"p{i}" for i in range(n)]
    elif d["kind"] == "stack":
        ids = [f"r{i}" for i in range(n)] + (["gw"] if g is not None else [])
    else:
        backups = ((g or {}).get("backup") or {}).get("replicas", 0)
        ids = [f"r{i}" for i in range(n)] + ([f"b{i}" for i in range(backups)] + ["gw"] if g is not None else [])
    out = [doc.problem(base + ("hosts", *path), message) for path, message in placement_problems(d["hosts"], ids)]
    cmd = d.get("command")
    if d["kind"] == "process" and "{host}" not in (cmd if isinstance(cmd, str) else " ".join(map(str, cmd or []))):
        out.append(doc.problem(base + ("command",), "with hosts:, the command must listen on {host} (its host's "
                                                    "address; 127.0.0.1 there is the host's own loopback, which "
                                                    "no other host reaches)"))
    for i, link in enumerate(d.get("links") or []):
        if link != "client":
            out.append(doc.problem(base + ("links", i), f"link {link} sits between hosts, where a proxy on this "
                                                        f"machine's loopback cannot: with hosts, fault that hop "
                                                        f"with a kernel fault on its host (packet_loss, partition, "
                                                        f"tcp_reset, link_rate)"))
    return out


def _load_places(doc: Located, target) -> list[str]:
    """The load's Locust processes a target's hosts: place must be ones the load has (load.workers)."""
    workers = doc.data["load"].get("workers", 0)
    out = []
    for host, ids in ((target.settings or {}).get("hosts") or {}).items():
        for i in ids:
            if i == "master" and not workers or i.startswith("w") and int(i[1:]) >= workers:
                out.append(doc.problem(("load", "workers") if "workers" in doc.data["load"] else ("load",),
                                       f"the target places {i} on host {host}, but the load has "
                                       f"{workers or 'no'} Locust workers: give load.workers: "
                                       f"{max(1, int(i[1:]) + 1 if i.startswith('w') else 1)} or more"))
    return out


def check_target(doc: Located, base: Path = ()) -> None:
    """A target's own rules (in its file, or at base in an experiment); raises the problems."""
    problems = target_checks(doc, base)
    if problems:
        raise ExperimentError(problems)


def _replay_file(doc: Located) -> list[str]:
    """load.replay found beside the experiment (or in the current directory), the path put in its place."""
    load = doc.data["load"]
    if not isinstance(load.get("replay"), str):
        return []
    found = locate_target(load["replay"], doc.file)
    if found is None:
        return [doc.problem(("load", "replay"), f"replay file {load['replay']!r} not found (looked beside "
                                                f"{doc.file} and in the current directory)")]
    load["replay"] = found
    return []


def verify_problems(doc: Located) -> list[str]:
    """The problems (file:line:col) of the values the verify: section's own checks refuse."""
    try:
        Verify.from_dict(doc.data.get("verify"))
    except SpecError as e:
        return [doc.problem(("verify", *path), message) for path, message in e.problems]
    return []


def check_experiment(doc: Located, target, target_doc: Located, target_base: Path) -> None:
    """The target's rules (target_doc at target_base: its own file, or the experiment's target:), then the
    experiment's with that target; raises the problems."""
    check_target(target_doc, target_base)
    problems = semantic_checks(doc, target) + _replay_file(doc) + verify_problems(doc) + _load_places(doc, target)
    problems = problems or run_would_build(doc, target)
    if problems:
        raise ExperimentError(problems)
