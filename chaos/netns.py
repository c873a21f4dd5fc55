"""Hosts as network namespaces: each host of a run is a namespace with its own TCP stack and its own address on a
bridge the run makes, joined to it by a veth pair. Processes placed on a host run inside its namespace; the run
itself stays in the root namespace and reaches every host through the bridge, as a client on the same L2 segment.

Every name the run makes starts `lc-<tag>-` (the bridge `lc-<tag>-br`, host i's namespace `lc-<tag>-<i>` and the
root side of its veth `lc-<tag>-v<i>`; interface names stay within the kernel's 15 characters), and the layout is
journaled before anything is made: `chaos recover` removes exactly what a killed run made, nothing else. The
addresses are a /24 of 10.213.0.0/16 that no interface of the machine has: traffic never leaves the machine.

Needs root (CAP_NET_ADMIN and the right to mount /run/netns) and iproute2; the kernel faults on hosts also need
nft and tc. why_not() says what is missing, once, so a run refuses early and tests skip with that reason.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

from .errors import SetupError

PREFIX = "lc-"
INNER_DEV = "eth0"  # a host's side of its veth, inside its namespace
SUBNETS = ipaddress.ip_network("10.213.0.0/16")
MAX_HOSTS = 60
HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,23}$")


class HostsError(SetupError, RuntimeError):
    """Hosts could not be made or used (no privilege, a tool missing, the kernel said no): what and what to do."""


def sh(cmd: list[str], check: bool = True, timeout: float = 20,
       stdin: str | None = None) -> subprocess.CompletedProcess:
    """One iproute2 / nft / tc command (stdin: its input); HostsError with what it said where check and it
    failed."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise HostsError(f"{cmd[0]} is not installed: hosts and kernel faults need iproute2 (ip, tc) and nftables "
                         f"(nft)") from None
    except subprocess.TimeoutExpired:
        raise HostsError(f"`{' '.join(cmd)}` did not finish in {timeout:g}s") from None
    if check and done.returncode != 0:
        raise HostsError(f"`{' '.join(cmd)}` failed: {(done.stderr or done.stdout).strip()[:300]}")
    return done


def in_ns(netns: str, cmd: list[str]) -> list[str]:
    """cmd run inside a host's namespace (`ip netns exec` execs it in place: its pid is the command's)."""
    return ["ip", "netns", "exec", netns, *cmd]


_why_not: list[str | None] = []


def why_not() -> str | None:
    """None where this process can make hosts; else what is missing and what to do (asked once)."""
    if _why_not:
        return _why_not[0]
    reason = None
    missing = [t for t in ("ip", "nft", "tc") if shutil.which(t) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (apt-get install iproute2 nftables)"
    elif os.geteuid() != 0:
        reason = "hosts are network namespaces, which need root (CAP_NET_ADMIN): run as root, or leave hosts out"
    else:
        probe = f"{PREFIX}probe-{os.getpid() % 100000}"
        made = sh(["ip", "netns", "add", probe], check=False)
        if made.returncode != 0:
            reason = f"`ip netns add` failed here: {(made.stderr or made.stdout).strip()[:200]}"
        else:
            sh(["ip", "netns", "del", probe], check=False)
    _why_not.append(reason)
    return reason


def has_netem() -> str | None:
    """None where tc can add a netem qdisc (delay, jitter, reordering, duplication, corruption); else why not
    (this machine's kernel: "unknown qdisc", not compiled in)."""
    probe = f"{PREFIX}netem-{os.getpid() % 100000}"
    if why_not():
        return why_not()
    sh(["ip", "netns", "add", probe])
    try:
        sh(["ip", "-n", probe, "link", "set", "lo", "up"])
        done = sh(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay",
                   "1ms"], check=False)
        if done.returncode == 0:
            return None
        return f"this kernel has no netem ({(done.stderr or done.stdout).strip()[:120]})"
    finally:
        sh(["ip", "netns", "del", probe], check=False)


@dataclass(slots=True, frozen=True)
class Host:
    name: str  # as the target file names it
    index: int
    netns: str
    address: str
    veth: str  # its veth's root side, on the bridge

    def to_dict(self) -> dict:
        return {"name": self.name, "index": self.index, "netns": self.netns, "address": self.address,
                "veth": self.veth}


@dataclass(slots=True, frozen=True)
class Layout:
    """The hosts of a run and the bridge that joins them: made by create(), removed by remove()."""

    tag: str
    subnet: str  # e.g. 10.213.7.0/24: .1 is the bridge (the runner's address), hosts from .2
    hosts: tuple[Host, ...] = ()
    placement: dict = field(default_factory=dict)  # instance id -> the name of the host it runs on
    bridge: str = field(init=False)

    def __post_init__(self):
        if not re.fullmatch(r"[0-9a-f]{6}", self.tag):
            raise ValueError(f"tag {self.tag!r}: six hex digits")
        object.__setattr__(self, "bridge", f"{PREFIX}{self.tag}-br")

    @classmethod
    def plan(cls, names: list[str], seed: str, placement: dict | None = None) -> Layout:
        """A layout for these host names, its tag and subnet drawn from seed (the run's folder) and clear of every
        address the machine has now; placement: instance id -> host name."""
        bad = [n for n in names if not HOST_NAME.match(n)]
        if bad:
            raise HostsError(f"host name(s) {bad}: lowercase letters, digits and '-', starting with a letter, "
                             f"at most 24 characters")
        if len(set(names)) != len(names) or not names or len(names) > MAX_HOSTS:
            raise HostsError(f"hosts: 1 to {MAX_HOSTS} distinct names (got {names})")
        digest = hashlib.sha256(seed.encode()).hexdigest()
        tag = digest[:6]
        taken = used_networks()
        subnets = list(SUBNETS.subnets(new_prefix=24))
        start = int(digest[6:10], 16) % len(subnets)
        for k in range(len(subnets)):
            net = subnets[(start + k) % len(subnets)]
            if not any(net.overlaps(t) for t in taken):
                break
        else:
            raise HostsError(f"every /24 of {SUBNETS} is in use on this machine: remove old bridges "
                             f"(`ip link show type bridge`), or run `chaos recover` on the runs that made them")
        first = net.network_address + 2
        hosts = tuple(Host(n, i, f"{PREFIX}{tag}-{i}", str(first + i), f"{PREFIX}{tag}-v{i}")
                      for i, n in enumerate(names))
        return cls(tag, str(net), hosts, dict(placement or {}))

    @property
    def gateway_address(self) -> str:
        """The bridge's own address: where the root namespace (the runner, its load) is seen from the hosts."""
        return str(ipaddress.ip_network(self.subnet).network_address + 1)

    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise HostsError(f"no host {name!r} (the hosts are {', '.join(h.name for h in self.hosts)})")

    def to_dict(self) -> dict:
        return {"tag": self.tag, "subnet": self.subnet, "bridge": self.bridge,
                "hosts": [h.to_dict() for h in self.hosts], "placement": dict(self.placement)}

    @classmethod
    def from_dict(cls, d: dict) -> Layout:
        return cls(d["tag"], d["subnet"], tuple(Host(**h) for h in d.get("hosts") or ()), d.get("placement") or {})


def placement(hosts: dict[str, list[str]]) -> dict[str, str]:
    """A target file's hosts: (host name -> the instance ids on it) as instance id -> host name."""
    return {inst: name for name, ids in (hosts or {}).items() for inst in ids or ()}


LOAD_PROCESS = re.compile(r"^(master|w[0-9]+)$")  # the load's Locust processes a hosts: may place


def placement_problems(hosts: dict, ids: list[str]) -> list[tuple[tuple, str]]:
    """(path under hosts:, problem) for each instance placed twice, an id the target has not, and an instance
    left off: with hosts, every process of the target runs on one (a gateway on a host cannot reach a replica on
    this machine's loopback). The load's processes (master, w0...) may be placed too, or left on this machine."""
    out, seen = [], {}
    for name, placed in (hosts or {}).items():
        for i, inst in enumerate(placed or ()):
            if inst not in ids and not LOAD_PROCESS.match(inst):
                out.append(((name, i), f"no instance {inst!r}; this target has {', '.join(ids)}"))
            elif inst in seen:
                out.append(((name, i), f"{inst} is on host {seen[inst]} already: an instance runs on one host"))
            else:
                seen[inst] = name
    left = [i for i in ids if i not in seen]
    if hosts and left:
        out.append(((), f"{', '.join(left)} on no host: with hosts:, place every instance ({', '.join(ids)})"))
    return out


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network an interface of the machine (root namespace) is on."""
    out = sh(["ip", "-4", "-j", "addr", "show"], check=False)
    nets = []
    try:
        for link in json.loads(out.stdout or "[]"):
            for a in link.get("addr_info") or []:
                nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    except (ValueError, KeyError):
        pass
    return nets


def create(layout: Layout) -> None:
    """Make the bridge, each host's namespace and its veth, and their addresses; a failure part way removes what
    was made and raises HostsError. The caller journals layout.to_dict() first."""
    reason = why_not()
    if reason:
        raise HostsError(f"cannot make hosts: {reason}")
    prefix = ipaddress.ip_network(layout.subnet).prefixlen
    try:
        sh(["ip", "link", "add", layout.bridge, "type", "bridge"])
        sh(["ip", "addr", "add", f"{layout.gateway_address}/{prefix}", "dev", layout.bridge])
        sh(["ip", "link", "set", layout.bridge, "up"])
        for h in layout.hosts:
            sh(["ip", "netns", "add", h.netns])
            sh(["ip", "link", "add", h.veth, "type", "veth", "peer", "name", INNER_DEV, "netns", h.netns])
            sh(["ip", "link", "set", h.veth, "master", layout.bridge])
            sh(["ip", "link", "set", h.veth, "up"])
            sh(["ip", "-n", h.netns, "addr", "add", f"{h.address}/{prefix}", "dev", INNER_DEV])
            sh(["ip", "-n", h.netns, "link", "set", INNER_DEV, "up"])
            sh(["ip", "-n", h.netns, "link", "set", "lo", "up"])
    except HostsError:
        remove(layout.to_dict())
        raise


def remove(plan: dict) -> list[str]:
    """Remove what a layout (its journaled dict) made, whatever of it exists: each host's namespace (its veth
    goes with it), a veth left in the root namespace, the bridge. Only names of the run's own tag. Returns what
    was removed."""
    tag = plan.get("tag", "")
    if not re.fullmatch(r"[0-9a-f]{6}", str(tag)):
        return []
    mine = f"{PREFIX}{tag}-"
    done = []
    have = set(namespaces())
    for h in plan.get("hosts") or []:
        if not str(h.get("netns", "")).startswith(mine):
            continue
        if h["netns"] in have and sh(["ip", "netns", "del", h["netns"]], check=False).returncode == 0:
            done.append(f"namespace {h['netns']}")
        if str(h.get("veth", "")).startswith(mine) and link_exists(h["veth"]):
            if sh(["ip", "link", "del", h["veth"]], check=False).returncode == 0:
                done.append(f"veth {h['veth']}")
    bridge = f"{mine}br"
    if link_exists(bridge) and sh(["ip", "link", "del", bridge], check=False).returncode == 0:
        done.append(f"bridge {bridge}")
    return done


def namespaces() -> list[str]:
    out = sh(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def link_exists(name: str, netns: str | None = None) -> bool:
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", name]
    return sh(cmd, check=False).returncode == 0


def leftovers(tag: str | None = None) -> list[str]:
    """Namespaces and links of ours (of one run's tag, or of any) that exist now: what a test asserts is empty
    after a rollback or `chaos recover`."""
    mine = f"{PREFIX}{tag}-" if tag else PREFIX
    out = [f"namespace {n}" for n in namespaces() if n.startswith(mine)]
    links = json.loads(sh(["ip", "-j", "link", "show"], check=False).stdout or "[]")
    out += [f"link {ln['ifname']}" for ln in links if str(ln.get("ifname", "")).startswith(mine)]
    return out


# -- what is on the wire: counters ------------------------------------------------------------------------------

def tcp_counters(netns: str) -> dict[str, int]:
    """A host's TCP counters (its own stack): RetransSegs, OutRsts, InErrs, ... from /proc/net/snmp, and the
    TcpExt ones (TCPTimeouts, TCPLostRetransmit, ...) from /proc/net/netstat."""
    out = {}
    for path in ("/proc/net/snmp", "/proc/net/netstat"):
        text = sh(in_ns(netns, ["cat", path])).stdout.splitlines()
        for head, values in zip(text[::2], text[1::2]):
            keys, vals = head.split(), values.split()
            if keys and keys[0] in ("Tcp:", "TcpExt:") and keys[0] == vals[0]:
                out.update({k: int(v) for k, v in zip(keys[1:], vals[1:]) if v.lstrip("-").isdigit()})
    return out


def link_counters(netns: str | None, dev: str = INNER_DEV) -> dict[str, int]:
    """An interface's counters (a host's, or the root namespace's where netns is None): rx/tx bytes, packets,
    dropped."""
    where = ["-n", netns] if netns else []
    info = json.loads(sh(["ip", *where, "-s", "-j", "link", "show", "dev", dev]).stdout)[0]
    s = info.get("stats64") or info.get("stats") or {}
    return {f"{way}_{k}": int(s.get(way, {}).get(k, 0)) for way in ("rx", "tx") for k in ("bytes", "packets",
                                                                                          "dropped")}
