"""Kernel network faults on a host's link (hosts: chaos/netns.py), beside Toxiproxy's byte-level toxics: the
packets themselves are lost, dropped, reset or shaped by the host's own kernel, so TCP retransmits, times out and
backs off for real, which no proxy can make happen (a proxy's TCP never loses a segment).

- packet_loss: each packet of the host's link dropped at `rate` (nftables `numgen random`), both ways;
- partition: every packet between the host and `peer` (or every other host) dropped, then healed;
- tcp_reset: TCP packets answered with a reset (nftables `reject with tcp reset`), all of them or at `rate`;
- link_rate: the host's link shaped to `rate` KB/s each way (tbf on both ends of its veth);
- netem: delay, jitter, reordering, duplication, corruption where the kernel has netem (this machine's has not:
  the check says so before anything runs, and the latency toxic gives delay and jitter instead).

Each fault is one nftables table (or the qdiscs) of its own in the host's namespace, named from the fault, made
in apply and removed in revert; the plan journals the namespace and the names, so `chaos recover` removes them
from the journal alone. The rules count what they matched: revert reads the counters, which the run journals and
notes ("dropped 512 of 10,240 packets"), the fault verified on the wire rather than by its command having run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from .. import netns as N
from ..schemabits import DURATION, PERCENT, POSITIVE, integer
from .base import Fault, FaultContext, FaultError
from .params import Params, setting

HOST = {"type": "string", "pattern": N.HOST_NAME.pattern, "description": "a host of the target's hosts:"}
PEER = {"type": "string", "pattern": N.HOST_NAME.pattern,
        "description": "only packets to and from this host (default: every packet of the host's link)"}


# The TCP counters a fault's evidence keeps (chaos.netns.tcp_counters has them all): segments in and out, what was
# sent again and why, resets, failed and reset connections.
TCP_KEPT = ("InSegs", "OutSegs", "RetransSegs", "TCPTimeouts", "TCPLostRetransmit", "TCPSynRetrans", "OutRsts",
            "EstabResets", "AttemptFails")


def at_random(rate: float) -> str:
    """The nftables match of a packet taken at rate (in steps of 0.01 %); none where it takes every one."""
    n = round(rate * 10_000)
    return "" if n >= 10_000 else f"numgen random mod 10000 < {n} "


def tcp_now(netns: str) -> dict[str, int]:
    got = N.tcp_counters(netns)
    return {k: got.get(k, 0) for k in TCP_KEPT}


@dataclass(slots=True, frozen=True, kw_only=True)
class HostLinkParams(Params):
    host: str = setting(HOST)
    peer: str | None = setting(PEER, None)
    duration: float | None = setting(POSITIVE, None)


class HostFault(Fault):
    """A fault on a host's link: acts on the namespace of a host the run made (target.hosts)."""

    family = "kernel"
    Params = HostLinkParams
    needs_started_target = True

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        hosts = (target.settings or {}).get("hosts") or {}
        if not hosts:
            return [(("host",), f"{fault.get('type')} acts on a host's link: give the target hosts: (each a network "
                                "namespace the run makes; docs/hosts.md)")]
        out = []
        for key in ("host", "peer"):
            if fault.get(key) is not None and fault[key] not in hosts:
                out.append(((key,), f"no host {fault[key]!r}; the target's hosts are {', '.join(hosts)}"))
        if fault.get("peer") is not None and fault.get("peer") == fault.get("host"):
            out.append((("peer",), "the peer must be another host than host"))
        return out

    def __init__(self, spec, target):
        super().__init__(spec, target)
        d = spec.params.duration
        self.revert_at = None if d is None else spec.at + d
        self.table = "lc_" + re.sub(r"[^A-Za-z0-9_]", "_", spec.name)[:40]
        self.netns: str | None = None
        self.peer_address: str | None = None
        self.evidence: dict | None = None

    @classmethod
    def preflight(cls, spec) -> None:
        why = N.why_not()
        if why:
            raise FaultError(f"fault {spec.name} acts on a host's link, and hosts cannot be made here: {why}")

    def plan(self, ctx: FaultContext) -> dict:
        layout = getattr(self.target, "hosts", None)
        if layout is None:
            raise FaultError(f"fault {self.spec.name}: the target has no hosts (its hosts: were not made)")
        host = layout.host(self.spec.params.host)
        self.netns = host.netns
        self.victims = [i for i in self.target.all_instances() if getattr(i, "host", None) == host.name]
        peer = getattr(self.spec.params, "peer", None)
        if peer is not None:
            self.peer_address = layout.host(peer).address
        return {"netns": self.netns, "table": self.table, "host": host.name, "peer": peer}

    def victim_ids(self) -> str:
        return f"host {self.spec.params.host}"

    def lasting(self) -> str:
        return "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"

    # -- nftables: one table, an input and an output chain on the host's link ------------------------------------
    def verdict(self) -> str:
        """What a matched packet gets (an nftables statement)."""
        raise NotImplementedError

    def match(self, way: str) -> str:
        dev = f'{"iifname" if way == "in" else "oifname"} "{N.INNER_DEV}"'
        if self.peer_address:
            dev += f" ip {'saddr' if way == 'in' else 'daddr'} {self.peer_address}"
        return dev

    def ruleset(self) -> str:
        chains = []
        for way, hook in (("in", "input"), ("out", "output")):
            # the first rule counts every packet it could take, the second what it took
            chains.append(f"  chain {way} {{\n    type filter hook {hook} priority -10; policy accept;\n"
                          f"    {self.match(way)} counter\n    {self.match(way)} {self.verdict()}\n  }}")
        return f"table inet {self.table} {{\n" + "\n".join(chains) + "\n}\n"

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        try:
            self.tcp_before = {name: tcp_now(ns) for name, ns in self.witnesses()}
        except N.HostsError:  # a host gone or unreadable: the fault still applies; its evidence says less
            self.tcp_before = {}
        r = N.sh(N.in_ns(self.netns, ["nft", "-f", "-"]), check=False, stdin=self.ruleset())
        if r.returncode != 0:
            self.applied = False
            raise FaultError(f"fault {self.spec.name}: nft refused the rules in host {self.spec.params.host}: "
                             f"{r.stderr.strip()[:300]}")

    def counters(self) -> dict:
        """{in|out: (packets seen, packets taken)} from the table's counters."""
        r = N.sh(N.in_ns(self.netns, ["nft", "-j", "list", "table", "inet", self.table]), check=False)
        out: dict[str, list[int]] = {}
        try:
            items = json.loads(r.stdout or "{}").get("nftables") or []
        except ValueError:
            return {}
        for it in items:
            rule = it.get("rule")
            if not rule:
                continue
            n = next((e["counter"]["packets"] for e in rule.get("expr") or [] if "counter" in e), None)
            if n is not None:
                out.setdefault(rule["chain"], []).append(n)
        return {way: (v[0], v[1]) for way, v in out.items() if len(v) == 2}

    def revert(self, ctx: FaultContext) -> None:
        if self.reverted or self.netns is None:
            self.reverted = True
            return
        self.reverted = True
        try:
            self.evidence = self.measure()
        except N.HostsError:
            self.evidence = None
        r = N.sh(N.in_ns(self.netns, ["nft", "delete", "table", "inet", self.table]), check=False)
        if r.returncode != 0 and "No such file" not in r.stderr:
            self.revert_error = f"nft delete table {self.table} in {self.netns}: {r.stderr.strip()[:200]}"

    def measure(self) -> dict:
        c = self.counters()
        seen = sum(v[0] for v in c.values())
        taken = sum(v[1] for v in c.values())
        before = getattr(self, "tcp_before", None) or {}
        tcp = {}
        for name, ns in self.witnesses():
            now, was = tcp_now(ns), before.get(name) or {}
            tcp[name] = {k: v - was.get(k, 0) for k, v in now.items()}
        return {"packets": seen, "taken": taken, "by_way": c, "tcp": tcp}

    def witnesses(self) -> list[tuple[str, str]]:
        """(host name, namespace) of the hosts whose TCP counters tell what the fault did: the host and its peer,
        or every host (a sender retransmits, so the counters that rise are often the other side's)."""
        layout, p = self.target.hosts, self.spec.params
        names = [p.host] + ([p.peer] if getattr(p, "peer", None) else [h.name for h in layout.hosts
                                                                         if h.name != p.host])
        return [(n, layout.host(n).netns) for n in names]

    def evidence_text(self) -> str | None:
        e = self.evidence
        if not e:
            return None
        share = f" ({e['taken'] / e['packets']:.1%})" if e["packets"] else ""
        tcp = "; ".join(f"{name} retransmitted {t['RetransSegs']:,} TCP segments ({t['TCPTimeouts']:,} timeouts), "
                        f"sent {t['OutRsts']:,} resets" for name, t in (e.get("tcp") or {}).items()
                        if name == self.spec.params.host or t["RetransSegs"] or t["OutRsts"]) or "no host retransmitted"
        return f"on the wire: {self.took} {e['taken']:,} of {e['packets']:,} packets{share}; meanwhile {tcp}"

    took = "took"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        ns, table = plan.get("netns"), plan.get("table")
        if not ns or not table or ns not in N.namespaces():
            return "its host is gone (recover removes the hosts)"
        r = N.sh(N.in_ns(ns, ["nft", "delete", "table", "inet", table]), check=False)
        return f"removed nftables table {table} in {ns}" if r.returncode == 0 else "nothing was left"


@dataclass(slots=True, frozen=True, kw_only=True)
class LossParams(HostLinkParams):
    rate: float = setting(PERCENT)  # the share of packets dropped, each way


class PacketLoss(HostFault):
    type = "packet_loss"
    summary = "drop packets on a host's link at rate, both ways (nftables random drop: TCP retransmits for real)"
    Params = LossParams
    schema = LossParams.schema(summary)
    took = "dropped"

    def verdict(self) -> str:
        return f"{at_random(self.spec.params.rate)}counter drop"

    def describe(self) -> str:
        peer = f" to and from {self.spec.params.peer}" if self.spec.params.peer else ""
        return f"{self.spec.params.rate:.2%} packet loss on host {self.spec.params.host}'s link{peer} at " \
               f"{self.spec.at:g}s{self.lasting()}"


class Partition(HostFault):
    type = "partition"
    summary = "cut a host off from peer (or from every host and the runner): every packet dropped, then healed"
    schema = HostLinkParams.schema(summary)
    took = "dropped"

    def verdict(self) -> str:
        return "counter drop"

    def describe(self) -> str:
        peer = self.spec.params.peer or "everything"
        return f"partition between host {self.spec.params.host} and {peer} at {self.spec.at:g}s{self.lasting()}"


@dataclass(slots=True, frozen=True, kw_only=True)
class ResetParams(HostLinkParams):
    rate: float = setting(PERCENT, 1.0)  # the share of TCP packets answered with a reset


class TcpReset(HostFault):
    type = "tcp_reset"
    summary = "answer a host's TCP packets with a reset (nftables reject with tcp reset), all or at rate"
    Params = ResetParams
    schema = ResetParams.schema(summary)
    took = "reset"

    def verdict(self) -> str:
        # never a reset itself: the resets this rule sends leave through the output hook too
        return f"meta l4proto tcp tcp flags & rst == 0 {at_random(self.spec.params.rate)}counter reject with tcp reset"

    def describe(self) -> str:
        peer = f" from {self.spec.params.peer}" if self.spec.params.peer else ""
        return f"TCP resets ({self.spec.params.rate:.0%} of packets) on host {self.spec.params.host}'s link{peer} " \
               f"at {self.spec.at:g}s{self.lasting()}"


@dataclass(slots=True, frozen=True, kw_only=True)
class RateParams(Params):
    host: str = setting(HOST)
    rate: int = setting(integer(1, 10_000_000))  # KB/s (1,000 bytes), each way
    duration: float | None = setting(POSITIVE, None)


class LinkRate(HostFault):
    """tbf on both ends of the host's veth: the host's side shapes what it sends, the bridge's side what it gets
    (shaping is on a device's way out; this kernel has no ifb for the way in)."""

    type = "link_rate"
    summary = "shape a host's link to rate KB/s each way (tc tbf on both ends of its veth)"
    Params = RateParams
    schema = RateParams.schema(summary)

    def plan(self, ctx: FaultContext) -> dict:
        out = super().plan(ctx)
        host = self.target.hosts.host(self.spec.params.host)
        self.devs = [(self.netns, N.INNER_DEV), (None, host.veth)]
        return {**out, "qdiscs": [[ns, dev] for ns, dev in self.devs]}

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        self.before = {dev: self._sent(ns, dev) for ns, dev in self.devs}
        bps = self.spec.params.rate * 1000
        burst = max(4 * 1514, bps // 50)  # 20 ms of it, and at least a few full frames
        for ns, dev in self.devs:
            cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bps * 8}bit", "burst",
                   str(burst), "latency", "200ms"]
            r = N.sh(N.in_ns(ns, cmd) if ns else cmd, check=False)
            if r.returncode != 0:
                raise FaultError(f"fault {self.spec.name}: tc refused tbf on {dev}: {r.stderr.strip()[:200]}")

    @staticmethod
    def _sent(ns, dev) -> int:
        return N.link_counters(ns, dev)["tx_bytes"]

    def revert(self, ctx: FaultContext) -> None:
        if self.reverted or not getattr(self, "devs", None):
            self.reverted = True
            return
        self.reverted = True
        try:
            self.evidence = {"sent_bytes": {dev: self._sent(ns, dev) - self.before.get(dev, 0)
                                            for ns, dev in self.devs}}
        except (N.HostsError, AttributeError):
            self.evidence = None
        for ns, dev in self.devs:
            cmd = ["tc", "qdisc", "del", "dev", dev, "root"]
            N.sh(N.in_ns(ns, cmd) if ns else cmd, check=False)

    def evidence_text(self) -> str | None:
        if not self.evidence:
            return None
        sent = self.evidence["sent_bytes"]
        return "on the wire while shaped: " + ", ".join(f"{dev} sent {b / 1000:,.0f} KB" for dev, b in sent.items())

    def describe(self) -> str:
        return f"host {self.spec.params.host}'s link shaped to {self.spec.params.rate:,} KB/s each way at " \
               f"{self.spec.at:g}s{self.lasting()}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        done = []
        for ns, dev in plan.get("qdiscs") or []:
            if ns and ns not in N.namespaces():
                continue
            cmd = ["tc", "qdisc", "del", "dev", dev, "root"]
            if N.sh(N.in_ns(ns, cmd) if ns else cmd, check=False).returncode == 0:
                done.append(f"removed tbf on {dev}")
        return "; ".join(done) or "nothing was left"


@dataclass(slots=True, frozen=True, kw_only=True)
class NetemParams(Params):
    host: str = setting(HOST)
    delay: float | None = setting(DURATION, None)
    jitter: float | None = setting(DURATION, None)
    reorder: float | None = setting(PERCENT, None)
    duplicate: float | None = setting(PERCENT, None)
    corrupt: float | None = setting(PERCENT, None)
    duration: float | None = setting(POSITIVE, None)


class Netem(LinkRate):
    type = "netem"
    summary = ("delay, jitter, reorder, duplicate or corrupt a host's packets (tc netem), where the kernel has "
               "netem")
    Params = NetemParams
    schema = NetemParams.schema(summary)

    @classmethod
    def preflight(cls, spec) -> None:
        why = N.why_not() or N.has_netem()
        if why:
            raise FaultError(f"fault {spec.name}: {why}: use the latency toxic for delay and jitter, packet_loss "
                             f"for loss")

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        p = self.spec.params
        args = []
        if p.delay is not None:
            args += ["delay", f"{p.delay * 1000:g}ms"] + ([f"{p.jitter * 1000:g}ms"] if p.jitter else [])
        for key in ("reorder", "duplicate", "corrupt"):
            if getattr(p, key) is not None:
                args += [key, f"{getattr(p, key) * 100:g}%"]
        self.before = {}
        for ns, dev in self.devs:
            cmd = ["tc", "qdisc", "replace", "dev", dev, "root", "netem", *args]
            r = N.sh(N.in_ns(ns, cmd) if ns else cmd, check=False)
            if r.returncode != 0:
                raise FaultError(f"fault {self.spec.name}: tc refused netem on {dev}: {r.stderr.strip()[:200]}")

    def revert(self, ctx: FaultContext) -> None:
        self.reverted = True
        for ns, dev in getattr(self, "devs", []):
            cmd = ["tc", "qdisc", "del", "dev", dev, "root"]
            N.sh(N.in_ns(ns, cmd) if ns else cmd, check=False)

    def evidence_text(self) -> str | None:
        return None

    def describe(self) -> str:
        p = self.spec.params
        what = ", ".join(f"{k} {getattr(p, k):g}" for k in ("delay", "jitter", "reorder", "duplicate", "corrupt")
                         if getattr(p, k) is not None)
        return f"netem ({what}) on host {p.host}'s link at {self.spec.at:g}s{self.lasting()}"


KERNEL_FAULTS: list[type[Fault]] = [PacketLoss, Partition, TcpReset, LinkRate, Netem]
