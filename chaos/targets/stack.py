"""A user's own stack: a gateway of any command (LiteLLM, Envoy, nginx, the bundled one) in front of replicas of
any command (vLLM, llama.cpp's server, SGLang, the bundled server).

The gateway's config is rendered from a Jinja template the target file names, with each replica's address: the
address of its link when a fault sits between the gateway and it, so "stall the stream from r1" puts the LLM proxy
on exactly that hop. Every process is started in its own session (a kill takes its whole group: vLLM's engine
processes outlive its API server otherwise), health-checked, journaled the moment it exists and stopped by the run.

Secrets: the variables a part lists under `secrets:` must be set, reach that part's processes only (every other
process the run starts is spawned without them), and never reach a file the run writes: the template is rendered
without the environment, and a rendered config that holds a secret's value is refused.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from urllib.parse import urlparse

import yaml

from ..common import env_text, parse_duration
from .base import Instance, Target, TargetError

CONFIG_NAME = "gateway-config"  # RUN_DIR/gateway-config.<ext>: the rendered template, as the gateway read it
FAKE_PORT0 = 61001  # the sentinel ports a template is checked with before any port is taken


@dataclass(slots=True)
class Part:
    """One role of the stack, as the target file's `replica:` or `gateway:` mapping says it."""

    command: list[str]
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    engine: str = "other"  # how its errors and metrics read (docs/engines.md)
    env: dict = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    build: str = ""  # the command that makes what `files` and the command need (said when they are missing)
    config: str | None = None  # the gateway's template, relative to the target file
    api_base: str = "/v1"  # the OpenAI API's base path on this part, for a template's api_base
    routing_delay: float = 0.0
    metrics_key_env: str | None = None  # its /metrics wants this variable's value as a bearer key
    check: list[str] | None = None  # tests the rendered config before anything starts (nginx -t)

    @classmethod
    def from_dict(cls, d: dict) -> Part:
        cmd = d["command"]
        return cls(command=shlex.split(cmd) if isinstance(cmd, str) else [str(p) for p in cmd],
                   health_path=d.get("health_path", "/health"), metrics_path=d.get("metrics_path", "/metrics"),
                   engine=d.get("engine", "other"), env=env_text(d.get("env")),
                   secrets=tuple(d.get("secrets") or ()), files=tuple(d.get("files") or ()),
                   build=d.get("build", ""), config=d.get("config"), api_base=d.get("api_base", "/v1"),
                   routing_delay=parse_duration(d.get("routing_delay", 0)),
                   metrics_key_env=d.get("metrics_key_env"),
                   check=None if d.get("check") is None else
                   shlex.split(d["check"]) if isinstance(d["check"], str) else [str(p) for p in d["check"]])


def template_path(target_file: str, config: str) -> str:
    return config if os.path.isabs(config) else os.path.join(os.path.dirname(os.path.abspath(target_file)), config)


def replica_context(inst: Instance, url: str, api_base: str) -> dict:
    u = urlparse(url)
    return {"id": inst.id, "index": inst.index, "host": u.hostname, "port": u.port, "url": url.rstrip("/"),
            "api_base": url.rstrip("/") + api_base}


def render(template_file: str, replicas: list[dict], model: str, port: int, host: str = "127.0.0.1") -> str:
    """The gateway's config from its template; raises TargetError naming the template and the line."""
    import jinja2

    try:
        with open(template_file) as f:
            text = f.read()
    except OSError as e:
        raise TargetError(f"cannot read the gateway's config template {template_file}: {e.strerror}") from None
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    try:
        return env.from_string(text).render(replicas=replicas, model=model, port=port, host=host)
    except jinja2.TemplateSyntaxError as e:
        raise TargetError(f"{template_file}:{e.lineno}: the gateway's config template does not parse: "
                          f"{e.message}") from None
    except jinja2.UndefinedError as e:
        raise TargetError(f"{template_file}: {e.message}; a template has replicas (each with id, index, host, "
                          f"port, url, api_base), model, port and host (where the gateway listens)") from None


def check_rendered(template_file: str, text: str, replicas: list[dict]) -> None:
    """Every replica's address is in the config, and a YAML or JSON config parses."""
    missing = [r["id"] for r in replicas if f"{r['host']}:{r['port']}" not in text]
    if missing:
        what = "no replica" if len(missing) == len(replicas) else f"not {', '.join(missing)}"
        raise TargetError(f"{template_file}: the rendered config names {what}: loop over `replicas` and write "
                          f"each one's {{{{ r.api_base }}}} (or host and port) where the gateway lists its "
                          f"upstreams")
    name = template_file.removesuffix(".j2").removesuffix(".jinja")
    try:
        if name.endswith((".yaml", ".yml")):
            yaml.safe_load(text)
        elif name.endswith(".json"):
            json.loads(text)
    except (ValueError, yaml.YAMLError) as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (rendered line {mark.line + 1})" if mark is not None else ""
        raise TargetError(f"{template_file}: the rendered config does not parse{where}: "
                          f"{str(e).splitlines()[0]}") from None


def run_check(part: Part, template_file: str, text: str) -> str | None:
    """The gateway's own test of its rendered config (nginx -t), in a scratch folder: None when it passes,
    else what it said."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="chaos-check-") as scratch:
        path = os.path.join(scratch, CONFIG_NAME + config_suffix(template_file))
        with open(path, "w") as f:
            f.write(text)
        cmd = [p.replace("{config}", path).replace("{run_dir}", scratch).replace("{python}", sys.executable)
               for p in part.check]
        try:
            done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=60, env={k: v for k, v in os.environ.items() if k not in part.secrets})
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"its check {cmd[0]} could not run: {e}"
        if done.returncode == 0:
            return None
        said = (done.stderr + done.stdout).replace(path, "the rendered config").strip().splitlines()
        return f"its check ({' '.join(part.check)}) exited {done.returncode}: " + " | ".join(said[-5:])


def config_suffix(template_file: str) -> str:
    name = os.path.basename(template_file).removesuffix(".j2").removesuffix(".jinja")
    return os.path.splitext(name)[1] or ".conf"


def check_stack(d: dict, target_file: str) -> list[tuple[tuple, str]]:
    """Before anything starts: (path in the target mapping, problem) for each missing file or command and a
    template that does not render, parse or name every replica."""
    problems = []
    for role in ("replica", "gateway"):
        if role not in d:
            continue
        part = Part.from_dict(d[role])
        hint = f"; build it with {part.build}" if part.build else ""
        exe = part.command[0] if part.command else ""
        if "/" in exe and not os.path.exists(exe):
            problems.append(((role, "command"), f"{exe} does not exist{hint}"))
        elif "/" not in exe and not exe.startswith("{") and shutil.which(exe) is None:
            problems.append(((role, "command"), f"command not found: {exe!r}{hint}"))
        port_said = any("{port}" in p for p in part.command)  # or, for a gateway, its config says {{ port }}
        if role == "gateway" and (part.config is not None) != any("{config}" in p for p in part.command):
            problems.append(((role, "command"), "config: and {config} in the command go together: the gateway "
                                                "must be told where its rendered config is"))
        for i, path in enumerate(part.files):
            if not os.path.exists(path):
                problems.append(((role, "files", i), f"{path} does not exist{hint}"))
        if role == "gateway" and part.config is not None:
            tpl = template_path(target_file, part.config)
            api_base = Part.from_dict(d["replica"]).api_base
            reps = [replica_context(Instance(i, f"r{i}", f"http://127.0.0.1:{FAKE_PORT0 + i}", FAKE_PORT0 + i),
                                    f"http://127.0.0.1:{FAKE_PORT0 + i}", api_base)
                    for i in range(int(d.get("replicas", 1)))]
            try:
                text = render(tpl, reps, d.get("model", ""), FAKE_PORT0 - 1)
                check_rendered(tpl, text, reps)
                port_said = port_said or str(FAKE_PORT0 - 1) in text
                said = run_check(part, tpl, text) if part.check and not problems else None
                if said:
                    problems.append(((role, "check"), f"{tpl}: the rendered config fails {said}"))
            except TargetError as e:
                problems.append(((role, "config"), str(e)))
                port_said = True  # said once is enough
        if d.get("hosts") and role == "replica" and not any("{host}" in p for p in part.command):
            problems.append(((role, "command"), "with hosts:, the command must listen on {host} (its host's "
                                                "address; 127.0.0.1 there is the host's own loopback, which no "
                                                "other host reaches)"))
        if not port_said:
            problems.append(((role, "command"), "the command must contain {port}, where it should listen (the run "
                                                "picks a free loopback port)" + (", or its config template "
                                                "{{ port }}" if role == "gateway" else "")))
    return problems


class StackTarget(Target):
    kind = "stack"

    def __init__(self, spec, out_dir):
        super().__init__(spec, out_dir)
        s = spec.settings
        self.model = s["model"]
        self.api_key_env = s.get("api_key_env")
        self.replica_part = Part.from_dict(s["replica"])
        self.gateway_part = Part.from_dict(s["gateway"]) if "gateway" in s else None
        self.plan_hosts()
        for i in range(spec.replicas):
            self.instances.append(Instance.placed(i, f"r{i}", os.path.join(out_dir, f"replica-r{i}.log"), self.hosts,
                                                  metrics_path=self.replica_part.metrics_path,
                                                  metrics_key_env=self.replica_part.metrics_key_env))
        self.gateway: Instance | None = None
        self.config_path: str | None = None
        if self.gateway_part is not None:
            self.gateway = Instance.placed(0, "gw", os.path.join(out_dir, "gateway.log"), self.hosts,
                                           metrics_path=self.gateway_part.metrics_path,
                                           metrics_key_env=self.gateway_part.metrics_key_env, front=True)
            if self.gateway_part.config is not None:
                tpl = template_path(spec.source, self.gateway_part.config)
                self.config_path = os.path.join(out_dir, CONFIG_NAME + config_suffix(tpl))
        self.secrets = tuple(sorted({n for p in self.parts() for n in p.secrets}))  # the proxies get none of them
        missing = [n for p in self.parts() for n in p.secrets if not os.environ.get(n)]
        if missing:
            raise TargetError(f"the stack needs {', '.join(sorted(set(missing)))} in the environment (its secrets: "
                              f"passed to the processes that list them, written nowhere); export it first")

    def parts(self) -> list[Part]:
        return [self.replica_part] + ([self.gateway_part] if self.gateway_part else [])

    def part_of(self, inst: Instance) -> Part:
        return self.gateway_part if inst is self.gateway else self.replica_part

    @property
    def fronted(self) -> list[Instance]:
        return [self.gateway] if self.gateway else list(self.instances)

    def all_instances(self) -> list[Instance]:
        return self.instances + ([self.gateway] if self.gateway else [])

    def health_url(self, inst: Instance) -> str:
        return inst.url + self.part_of(inst).health_path

    @property
    def tokenizer(self) -> str:
        # bundled replicas count bytes, which a gateway in front (LiteLLM says owned_by openai) hides from auto
        return "byte" if self.replica_part.engine == "reference" else "auto"

    def routing_delay(self) -> float:
        return self.gateway_part.routing_delay if self.gateway_part else 0.0

    def command(self, inst: Instance) -> list[str]:
        fill = {"{port}": str(inst.port), "{host}": inst.bind_address, "{replica}": str(inst.index), "{id}": inst.id,
                "{config}": self.config_path or "", "{run_dir}": self.out_dir, "{python}": sys.executable}
        out = []
        for p in self.part_of(inst).command:
            for k, v in fill.items():
                p = p.replace(k, v)
            out.append(p)
        return out

    def render_config(self) -> None:
        """The gateway's config, with each replica reached through its link where it has one."""
        g = self.gateway_part
        tpl = template_path(self.spec.source, g.config)
        reps = [replica_context(i, self.front(i), self.replica_part.api_base) for i in self.instances]
        text = render(tpl, reps, self.model, self.gateway.port, self.gateway.bind_address)
        check_rendered(tpl, text, reps)
        for name in (n for p in self.parts() for n in p.secrets):
            value = os.environ.get(name)
            if value and len(value) >= 4 and value in text:
                raise TargetError(f"{tpl}: the rendered config holds the value of ${name}; refer to it the way "
                                  f"the gateway reads its environment (LiteLLM: os.environ/{name}) so no file "
                                  f"the run writes holds it")
        with open(self.config_path, "w") as f:
            f.write(text)

    def _env(self, part: Part) -> tuple[dict, tuple[str, ...]]:
        """The part's env, and the secrets of the other parts, which its processes must not see."""
        others = {n for p in self.parts() if p is not part for n in p.secrets} - set(part.secrets)
        return part.env, tuple(sorted(others))

    def start_instance(self, inst: Instance) -> None:
        env, withheld = self._env(self.part_of(inst))
        self.launch(inst, self.command(inst), env, withhold=withheld)

    def up(self, should_stop=lambda: False) -> None:
        for inst in self.instances:
            self.start_instance(inst)
        self.wait_all_healthy(self.instances, should_stop)
        if self.gateway is not None:
            if self.config_path is not None:
                self.render_config()
            self.start_instance(self.gateway)
            self.wait_healthy(self.gateway, self.spec.startup_timeout, should_stop)

    def describe(self) -> dict:
        out = super().describe()
        out["engines"] = {i.id: self.part_of(i).engine for i in self.all_instances()}
        if self.config_path:
            out["gateway_config"] = os.path.basename(self.config_path)
        return out
