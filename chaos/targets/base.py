"""What every target offers the runner: instances with URLs, health, and the verbs faults use."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlparse

import psutil

from ..common import signal_group, stop_group
from ..errors import SetupError


class TargetError(SetupError, RuntimeError):
    """The target could not be started or reached; the message says what to do."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return False
        except OSError:
            return True


@dataclass
class Instance:
    index: int
    id: str  # replica id: what x-served-by says
    url: str  # base URL without /v1
    port: int
    pid: int | None = None  # process-group leader (its own session)
    create_time: float | None = None  # tells a recycled PID from ours
    container: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)
    state: str = "down"  # up | down | paused
    log_path: str | None = None
    engine: str | None = None  # the Docker engine holding the container
    up_since: float | None = None  # when its last health wait passed (target.clock; a restart sets it anew)
    metrics_path: str | None = "/metrics"  # from the URL's root, where engines serve it; None: it serves none
    metrics_key_env: str | None = None  # the variable holding the bearer key its /metrics asks for (LiteLLM's)
    front: bool = False  # a gateway: every answer passes it, none names it as who served
    host: str | None = None  # the host (chaos.netns) its process runs on; None: this machine, on loopback

    @classmethod
    def on_loopback(cls, index: int, id: str, log_path: str, **more) -> Instance:
        """One at a free loopback port, found now: the process started for it binds the port."""
        port = free_port()
        return cls(index, id, f"http://127.0.0.1:{port}", port, log_path=log_path, **more)

    @classmethod
    def placed(cls, index: int, id: str, log_path: str, layout, **more) -> Instance:
        """On its host where the target's hosts (a chaos.netns.Layout) place it, else on loopback. A host is a
        namespace of its own: any port is free there, and this one is free here too."""
        host = layout.placement.get(id) if layout is not None else None
        if host is None:
            return cls.on_loopback(index, id, log_path, **more)
        port = free_port()
        return cls(index, id, f"http://{layout.host(host).address}:{port}", port, log_path=log_path, host=host,
                   **more)

    @property
    def bind_address(self) -> str:
        """The address its process listens on: its host's, or loopback."""
        return urlparse(self.url).hostname if self.host else "127.0.0.1"

    @property
    def metrics_url(self) -> str | None:
        """Prometheus text: at the root of the instance's host, not under an API base path (vLLM, llama.cpp's
        server and LiteLLM serve /metrics there; asking base_url + /metrics got vLLM's 404)."""
        if self.metrics_path is None:
            return None
        u = urlparse(self.url)
        return f"{u.scheme}://{u.netloc}{self.metrics_path}"

    def metrics_headers(self) -> dict:
        """Read at each scrape from the environment, so the key is in no object a journal or report is made of."""
        key = os.environ.get(self.metrics_key_env) if self.metrics_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def journal(self) -> dict:
        return {"index": self.index, "id": self.id, "url": self.url, "port": self.port, "pid": self.pid,
                "create_time": self.create_time, "container": self.container,
                "engine": self.engine, "up_since": self.up_since} | ({"front": True} if self.front else {}) | \
            ({"host": self.host} if self.host else {})


def http_ok(url: str, timeout: float = 2.0, headers: dict | None = None) -> bool:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as r:
            return 200 <= r.status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Target:
    """Base class: a target has instances; runs start them (up) and always stop them (down)."""

    kind = "base"
    starts_processes = True
    health_path = "/health"  # a kind whose settings name another sets it

    def __init__(self, spec, out_dir: str):
        self.spec = spec
        self.out_dir = out_dir
        self.instances: list[Instance] = []
        self.model: str | None = None
        self.api_key_env: str | None = None
        self.limits = None  # chaos.targets.limits.Limits a vendor file states: the load is capped to them
        # Called with each instance the moment its process or container exists, before any health wait: the
        # runner journals it there, so a run killed while instances start still leaves their pids for recover.
        self.on_spawn = lambda inst: None
        self.clock = time.time  # for up_since: the runner sets its own, the one the load's records are on
        # One per run, in memory and in the environment of what the run starts only (never argv, the journal or a
        # log): the fault routes of its replicas and of its LLM proxies answer no one else on the machine.
        self.fault_token = secrets.token_urlsafe(32)
        self.links = None  # chaos.targets.links.Links, when faults sit on links: set before up()
        # The hosts its processes are laid out on (chaos.netns.Layout), planned by a kind that takes hosts:; made
        # at the first launch on one, journaled first (on_hosts), removed by down() once every instance stopped.
        self.hosts = None
        self.hosts_made = False
        self.hosts_removed: list[str] = []
        self.on_hosts = lambda layout: None

    def front(self, inst: Instance) -> str:
        """Where a client of inst connects: through its link's proxies, when it has a link."""
        return self.links.front(inst) if self.links is not None else inst.url

    @property
    def fronted(self) -> list[Instance]:
        """The instances the load sends to: the gateway where there is one, else the replicas."""
        return list(self.instances)

    @property
    def urls(self) -> list[str]:
        """Where the load goes."""
        return [self.front(i) for i in self.fronted]

    @property
    def replica_ids(self) -> list[str]:
        """The replica behind each of urls, where the load goes straight to them (no gateway: who served a
        request is where it was sent); [] where a gateway fronts them."""
        fronted = self.fronted
        return [i.id for i in fronted] if fronted and all(i in self.instances for i in fronted) else []

    def all_instances(self) -> list[Instance]:
        """Every process or container this target runs (primaries, and for some kinds backups and a gateway)."""
        return list(self.instances)

    def up(self, should_stop=lambda: False) -> None:
        raise NotImplementedError

    def down(self, grace: float = 10.0) -> None:
        """Every instance at once, each with the whole grace: N of them drain together, which costs one shutdown
        rather than N in a row. (The run stops its load first, so no front needs to stop taking requests first.)"""
        insts = self.all_instances()
        try:
            with ThreadPoolExecutor(max(1, len(insts)), thread_name_prefix="stop") as pool:
                for done in [pool.submit(self.stop_instance, inst, grace) for inst in insts]:
                    done.result()  # each was waited for; the first error, if any, goes on up
        finally:
            self.remove_hosts()

    def health_url(self, inst: Instance) -> str:
        return inst.url + self.health_path

    def healthy(self, inst: Instance) -> bool:
        return http_ok(self.health_url(inst))

    def wait_healthy(self, inst: Instance, timeout: float, should_stop=lambda: False) -> None:
        def exited() -> str | None:
            if inst.proc is not None and inst.proc.poll() is not None:
                return f"{inst.id} exited with {inst.proc.returncode} before it was healthy{self._log_tail(inst)}"
            return None

        if not self._poll_healthy(inst, timeout, should_stop, exited, lambda: time.sleep(0.1)):
            raise TargetError(f"{inst.id} did not become healthy at {self.health_url(inst)} within "
                              f"{self.spec.startup_timeout:.0f}s"
                              f"{self._log_tail(inst)}; raise startup_timeout in the target file if it is just slow")

    def _poll_healthy(self, inst: Instance, timeout: float, should_stop, exited, pause) -> bool:
        """True once inst answers its health check (it is then up), False when timeout has passed. exited() says
        why inst never will (None while it may), pause() waits between checks."""
        deadline = time.monotonic() + timeout
        while True:  # checked at least once: a later instance of a restart may have only moments left
            if should_stop():
                raise TargetError("interrupted while waiting for the target")
            why = exited()
            if why is not None:
                raise TargetError(why)
            if self.healthy(inst):
                inst.state, inst.up_since = "up", self.clock()
                return True
            if time.monotonic() >= deadline:
                return False
            pause()

    @staticmethod
    def _log_tail(inst: Instance) -> str:
        if inst.log_path and os.path.exists(inst.log_path):
            with open(inst.log_path, errors="replace") as f:
                tail = f.read()[-400:].strip()
            if tail:
                return f"; its last output: {tail}"
        return ""

    # -- verbs for instance faults -----------------------------------------------------------------
    def start_instance(self, inst: Instance) -> None:
        raise NotImplementedError

    def plan_hosts(self) -> None:
        """The layout of the file's hosts: (chaos.netns), planned now (addresses are needed before any command
        is written), made at the first launch on one."""
        hosts = (self.spec.settings or {}).get("hosts")
        if hosts:
            from ..netns import Layout, placement

            self.hosts = Layout.plan(list(hosts), os.path.abspath(self.out_dir), placement(hosts))

    def make_hosts(self) -> None:
        """The hosts, made once (journaled by on_hosts before anything exists)."""
        if self.hosts is None or self.hosts_made:
            return
        from .. import netns

        self.on_hosts(self.hosts.to_dict())
        self.hosts_made = True
        try:
            netns.create(self.hosts)
        except netns.HostsError as e:
            raise TargetError(f"the target's hosts: {e}") from None

    def load_places(self) -> tuple[dict[str, tuple[str, str, str]], str | None]:
        """The load's Locust processes the hosts place ({"master" | "w0"...: (namespace, address, host)}) and the
        bridge's address (where a master left on this machine listens for workers on hosts); ({}, None)
        without hosts."""
        if self.hosts is None:
            return {}, None
        from ..netns import LOAD_PROCESS

        return ({i: (self.hosts.host(h).netns, self.hosts.host(h).address, h)
                 for i, h in self.hosts.placement.items() if LOAD_PROCESS.match(i)}, self.hosts.gateway_address)

    def remove_hosts(self) -> list[str]:
        """Every namespace, veth and bridge of the hosts (their processes are stopped first by down)."""
        if self.hosts is None or not self.hosts_made:
            return []
        from .. import netns

        self.hosts_removed = netns.remove(self.hosts.to_dict())
        self.hosts_made = False
        return self.hosts_removed

    def launch(self, inst: Instance, cmd: list[str], env: dict | None = None, withhold: tuple[str, ...] = ()) -> None:
        """Start inst's process in its own session (in its host's namespace where it has one) and journal it
        (on_spawn) before any health wait."""
        if inst.host is not None:
            from .. import netns

            self.make_hosts()
            cmd = netns.in_ns(self.hosts.host(inst.host).netns, cmd)
        inst.proc, inst.create_time = spawn(cmd, inst.log_path, env, withhold=withhold)
        inst.pid = inst.proc.pid
        inst.state = "starting"
        self.on_spawn(inst)

    def stop_instance(self, inst: Instance, grace: float = 10.0) -> None:
        stop_group(inst.pid, inst.create_time, grace, inst.proc)
        inst.state, inst.up_since = "down", None

    def kill_instance(self, inst: Instance, sig: int) -> None:
        signal_group(inst.pid, inst.create_time, sig)
        if sig == signal.SIGKILL and inst.proc is not None:
            try:
                inst.proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
        inst.state, inst.up_since = "down", None

    def pause_instance(self, inst: Instance) -> None:
        signal_group(inst.pid, inst.create_time, signal.SIGSTOP)
        inst.state = "paused"

    def resume_instance(self, inst: Instance) -> None:
        signal_group(inst.pid, inst.create_time, signal.SIGCONT)
        inst.state = "up"

    def restart_instances(self, insts: list[Instance], should_stop=lambda: False) -> None:
        """Start them all, then wait for each: they come up concurrently, so restarting two costs one start-up,
        not two in a row. The health wait is startup_timeout for all of them together, from their start. Waits
        for every one even when one fails; raises TargetError naming each failure.

        should_stop is asked again after the stop (which may take its grace, or a container's stop timeout):
        a run tearing down meanwhile must not get fresh processes that outlive it."""
        for inst in insts:
            self.stop_instance(inst, grace=2.0)
        for inst in insts:
            if should_stop():
                raise TargetError(f"interrupted before {inst.id} was restarted")
            self.start_instance(inst)
        self.wait_all_healthy(insts, should_stop)

    def wait_all_healthy(self, insts: list[Instance], should_stop=lambda: False) -> None:
        errors = []
        deadline = time.monotonic() + self.spec.startup_timeout
        for inst in insts:  # all were started before the first wait: one deadline for all of them
            try:
                self.wait_healthy(inst, deadline - time.monotonic(), should_stop)
            except TargetError as e:
                if should_stop():
                    raise
                errors.append(str(e))
        if errors:
            raise TargetError("; ".join(errors))

    @property
    def tokenizer(self) -> str:
        """How the load counts tokens: auto asks the model list (the bundled server says so: exact bytes)."""
        return "auto"

    def routing_delay(self) -> float:
        """Seconds from an instance passing its health wait until traffic can reach it again: none when the load
        goes straight to the instances; a front (the gateway) adds its own health and ejection delays."""
        return 0.0

    def describe(self) -> dict:
        return {"kind": self.kind, "name": self.spec.name, "model": self.model,
                "instances": [i.journal() for i in self.all_instances()]} | \
            ({"hosts": self.hosts.to_dict()} if self.hosts is not None else {})


def spawn(cmd: list[str], log_path: str, env: dict | None = None,
          withhold: tuple[str, ...] = ()) -> tuple[subprocess.Popen, float]:
    """Start cmd in its own session (a process group we can signal whole); (proc, create_time). `withhold`: names
    of variables it must not inherit (another process's secrets)."""
    full = {k: v for k, v in os.environ.items() if k not in withhold}
    log = open(log_path, "ab")
    try:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env={**full, **(env or {})})
    except FileNotFoundError:
        raise TargetError(f"command not found: {cmd[0]!r}; check the target's command") from None
    except PermissionError:
        raise TargetError(f"cannot execute {cmd[0]!r} (permission denied)") from None
    finally:
        log.close()
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        created = None
    return proc, created


def write_json(path: str, obj) -> None:
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
