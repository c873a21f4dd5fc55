"""A target's links: named hops where network and stream faults sit, each a proxy on a free loopback port.

Link names: `client`, in front of the whole target (the load's way in: the gateway, or every replica when there
is none), and each instance's id (r0, r1, b0 ...), in front of that instance alone; behind a gateway that is
the gateway's way to it, so "jitter on the link to r1" or "r0 unreachable from the gateway" can be said.

A link exists when a fault names it or the target file lists it in `links:`, and for the whole run, from before
the load starts: the steady state, the faults and the recovery are all measured through the same hops. One hop
fronts one instance; from the client side it is [LLM proxy] → [Toxiproxy proxy] → the instance, each part
there only when a fault of its family is on the link (network faults: L4, through the Toxiproxy API; LLM faults:
L7, the SSE-aware proxy of chaos.proxy.llm).
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from ..common import FAULT_TOKEN_ENV, FAULT_TOKEN_HEADER
from .base import Instance, Target, TargetError, free_port, http_ok, spawn
from .toxiproxy_api import ToxiproxyAPI, ToxiproxyError

L4, L7 = "network", "llm"
PROXY_START_TIMEOUT_S = 20.0


@dataclass(slots=True)
class Hop:
    """The proxies in front of one instance."""

    instance: str  # the id of the instance it fronts
    upstream: str  # that instance's URL (scheme, host, port, and the base path an openai target has)
    l4_name: str | None = None  # its Toxiproxy proxy
    l4_listen: str | None = None  # host:port that proxy listens on
    l7: Instance | None = None  # its LLM proxy process

    @property
    def front(self) -> str:
        """Where a client of this instance connects instead."""
        u = urlparse(self.upstream)
        if self.l7 is not None:
            return self.l7.url + u.path.rstrip("/")
        if self.l4_listen:
            return f"http://{self.l4_listen}{u.path.rstrip('/')}"
        return self.upstream

    def journal(self) -> dict:
        return {"instance": self.instance, "upstream": self.upstream, "toxiproxy_proxy": self.l4_name,
                "listen": self.l4_listen, "llm_proxy": self.l7.url if self.l7 else None}


def link_names(target_settings: dict, kind: str, replicas: int) -> list[str]:
    """The link names a target offers (for validation): client and each instance's id."""
    prefix = {"reference": "r", "process": "p", "docker": "d", "stack": "r"}.get(kind)
    names = ["client"] + ([f"{prefix}{i}" for i in range(replicas)] if prefix else [])
    g = target_settings.get("gateway") if kind == "reference" else None
    if g is not None:
        names += [f"b{i}" for i in range((g.get("backup") or {}).get("replicas", 0))]
    return names


@dataclass
class Links:
    """The links of one run: starts and stops their proxies, and says where each instance is reached."""

    target: object
    wanted: dict[str, set[str]]
    out_dir: str
    run_tag: str = "run"
    hops: dict[str, Hop] = field(default_factory=dict)  # instance id -> its hop
    api: ToxiproxyAPI | None = None
    external: bool = False  # the Toxiproxy server is the user's: its proxies must be deleted, it must not be stopped
    processes: list[Instance] = field(default_factory=list)  # proxy processes this run started
    on_spawn: object = lambda inst: None
    on_created: object = lambda info: None  # journals the proxies to be made on a server, before they are

    def __post_init__(self):
        for link, families in self.wanted.items():
            for inst in self.members(link):
                hop = self.hops.setdefault(inst.id, Hop(inst.id, inst.url))
                if L4 in families and urlparse(inst.url).scheme != "http":
                    raise TargetError(f"link {link!r}: network faults work on plain TCP and {inst.url} is "
                                      f"{urlparse(inst.url).scheme}://; use LLM faults (the L7 proxy speaks TLS "
                                      f"to the upstream) or an http:// endpoint")
                hop.l4_name = hop.l4_name or (f"chaos-{self.run_tag}-{inst.id}" if L4 in families else None)
                if L7 in families and hop.l7 is None:
                    port = free_port()
                    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", inst.id)  # an openai target's id is host:port
                    hop.l7 = Instance(0, f"llm-proxy-{inst.id}", f"http://127.0.0.1:{port}", port,
                                      log_path=os.path.join(self.out_dir, f"llm-proxy-{safe}.log"))

    # -- which instances a link covers ------------------------------------------------------------------
    def members(self, link: str) -> list[Instance]:
        t = self.target
        gateway = getattr(t, "gateway", None)
        if link == "client":
            return [gateway] if gateway is not None else list(t.instances)
        match = [i for i in t.all_instances() if i.id == link and i is not gateway]
        if not match:
            raise TargetError(f"no link {link!r}: this target has "
                              f"{', '.join(['client'] + [i.id for i in t.all_instances() if i is not gateway])}")
        return match

    def hops_of(self, link: str) -> list[Hop]:
        return [self.hops[i.id] for i in self.members(link) if i.id in self.hops]

    def front(self, inst: Instance) -> str:
        hop = self.hops.get(inst.id)
        return hop.front if hop else inst.url

    def llm_log_paths(self) -> list[str]:
        return [h.l7.log_path + ".jsonl" for h in self.hops.values() if h.l7 is not None]

    def describe(self) -> list[dict]:
        out = []
        for link, families in sorted(self.wanted.items()):
            hops = self.hops_of(link)
            out.append({"link": link, "families": sorted(families), "fronts": [h.instance for h in hops],
                        "hops": [h.journal() for h in hops]})
        return out

    def summary(self) -> list[str]:
        """One line per link: what stands between its client and each instance it fronts."""
        lines = []
        for link, families in sorted(self.wanted.items()):
            chains = []
            for h in self.hops_of(link):
                parts = ([f"LLM proxy {h.l7.url}"] if h.l7 else []) + ([f"toxiproxy {h.l4_listen or h.l4_name}"]
                                                                       if h.l4_name else [])
                chains.append(" → ".join(parts + [h.instance]))
            lines.append(f"link {link} ({', '.join(sorted(families))} faults): {'; '.join(chains)}")
        return lines

    # -- up and down ------------------------------------------------------------------------------------
    def up(self, should_stop=lambda: False) -> None:
        if any(h.l4_name for h in self.hops.values()):
            self._toxiproxy_up(should_stop)
            # Written ahead: a run SIGKILLed between a create and its journal line left a proxy on the user's
            # server that `chaos recover` never knew of. Deleting a name that was never made is a no-op.
            self.on_created({"toxiproxy": self.api.url, "external": self.external,
                             "proxies": [h.l4_name for h in self.hops.values() if h.l4_name]})
            try:
                for hop in self.hops.values():
                    if hop.l4_name:
                        u = urlparse(hop.upstream)
                        hop.l4_listen = self.api.create_proxy(hop.l4_name, f"{u.hostname}:{u.port or 80}")
            except ToxiproxyError as e:
                raise TargetError(f"could not create the links' proxies: {e}") from None
        for hop in self.hops.values():
            if hop.l7 is not None:
                upstream = f"http://{hop.l4_listen}" if hop.l4_listen else _origin(hop.upstream)
                self._start(hop.l7, [sys.executable, "-m", "chaos", "proxy", "llm", "--listen",
                                     f"127.0.0.1:{hop.l7.port}", "--upstream", upstream,
                                     "--log", hop.l7.log_path + ".jsonl"],
                            hop.l7.url + "/__chaos/health", {FAULT_TOKEN_ENV: self.token}, should_stop)

    @property
    def token(self) -> str:
        return self.target.fault_token

    def admin_headers(self) -> dict:
        return {FAULT_TOKEN_HEADER: self.token}

    def _toxiproxy_up(self, should_stop) -> None:
        conf = self.target.spec.toxiproxy
        if "url" in conf:
            self.api, self.external = ToxiproxyAPI(conf["url"]), True
            try:
                self.api.version()
            except ToxiproxyError as e:
                raise TargetError(f"no Toxiproxy API at {conf['url']} ({e}); start your toxiproxy-server, or drop "
                                  f"toxiproxy.url from the target file to use the bundled proxy") from None
            return
        port = free_port()
        inst = Instance(0, "toxiproxy", f"http://127.0.0.1:{port}", port,
                        log_path=os.path.join(self.out_dir, "toxiproxy.log"))
        if "server" in conf:
            cmd = [conf["server"], "-host", "127.0.0.1", "-port", str(port)]
        else:
            cmd = [sys.executable, "-m", "chaos", "proxy", "serve", "--host", "127.0.0.1", "--port", str(port)]
        self.api = ToxiproxyAPI(inst.url)
        self._start(inst, cmd, inst.url + "/version", None, should_stop)

    def _start(self, inst: Instance, cmd: list[str], ready_url: str, env: dict | None, should_stop) -> None:
        # a stack's secrets (LiteLLM's master key) are its parts' alone: a proxy forwards headers, it needs none
        inst.proc, inst.create_time = spawn(cmd, inst.log_path, env, withhold=getattr(self.target, "secrets", ()))
        inst.pid, inst.state = inst.proc.pid, "starting"
        self.processes.append(inst)
        self.on_spawn(inst)
        deadline = time.monotonic() + PROXY_START_TIMEOUT_S
        headers = self.admin_headers() if "/__chaos/" in ready_url else None
        while not http_ok(ready_url, timeout=1.0, headers=headers):
            if inst.proc.poll() is not None:
                raise TargetError(f"{inst.id} exited with {inst.proc.returncode} before it answered"
                                  f"{Target._log_tail(inst)}")
            if should_stop():
                raise TargetError(f"interrupted while starting {inst.id}")
            if time.monotonic() > deadline:
                raise TargetError(f"{inst.id} did not answer {ready_url} within {PROXY_START_TIMEOUT_S:g}s"
                                  f"{Target._log_tail(inst)}")
            time.sleep(0.05)
        inst.state = "up"

    def down(self, grace: float = 5.0) -> list[str]:
        """Delete what was made on a user's server, stop what was started. Returns problems (for the notes)."""
        from ..common import stop_group

        problems = []
        if self.external and self.api is not None:
            for hop in self.hops.values():
                if hop.l4_listen:
                    try:
                        self.api.delete_proxy(hop.l4_name)
                    except ToxiproxyError as e:
                        problems.append(f"could not delete proxy {hop.l4_name} from {self.api.url}: {e}")
        for inst in reversed(self.processes):
            stop_group(inst.pid, inst.create_time, grace, inst.proc)
            inst.state = "down"
        return problems


def delete_journaled_proxies(info: dict) -> list[str]:
    """For `chaos recover`: the proxies a killed run made on the user's own Toxiproxy server."""
    if not info.get("external"):
        return []
    api, done = ToxiproxyAPI(info["toxiproxy"]), []
    for name in info.get("proxies") or []:
        try:
            if api.delete_proxy(name):
                done.append(f"deleted proxy {name} (and its toxics) from {api.url}")
        except ToxiproxyError as e:
            done.append(f"could not delete proxy {name} from {api.url}: {e}")
    return done


def _origin(url: str) -> str:
    u = urlparse(url)
    return f"{u.scheme}://{u.netloc}"
