"""An experiment's faults as Chaos Mesh objects: each fault becomes one PodChaos, NetworkChaos or HTTPChaos (an
Injection, a step of the workflow), or is left out with the reason (a Left) when Chaos Mesh has nothing that does
what it does.

Every fault type of chaos.faults.FAULT_TYPES is in MAPPERS or in LEFT_OUT; a mapped type may still be left out
for a setting Chaos Mesh cannot express (a share of connections or requests, a count of requests). What differs
between the run's fault and the object that stands for it goes into the Injection's notes, which the export's
README repeats: netem shapes a pod's packets where Toxiproxy shapes one direction of one connection, and a
PodChaos acts on pods that a controller restarts at once.

A kernel fault acts on a host of the target's `hosts:` (a network namespace the run makes); in a cluster a host
is the pods of the instances on it, each instance's pods found as any instance's are (--instance, else the
replicas' --selector), and a fault's `peer` the peer host's pods, as the NetworkChaos's target.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field

from ..common import error_type_for, openai_error, retry_after_headers
from ..errors import InputError
from .config import ExportConfig
from .kube import COMPONENT_LABEL, EXPERIMENT_LABEL, go_duration, object_name


@dataclass(slots=True)
class Injection:
    """A fault as a Chaos Mesh object: spec is what a workflow step embeds (no duration: its deadline is lasts)."""

    fault: str  # its name in the experiment
    type: str
    kind: str  # PodChaos | NetworkChaos | HTTPChaos
    spec: dict
    at: float  # seconds after the load starts
    lasts: float
    notes: list[str] = field(default_factory=list)
    step: str = ""  # its template's name in the workflow, set once every fault is mapped (names are unique)


@dataclass(slots=True)
class Left:
    """A fault with no Chaos Mesh counterpart; beside: it can run from outside the cluster (chaos.export.beside)."""

    fault: str
    type: str
    at: float
    why: str
    beside: bool = True
    index: int = -1  # its place in the experiment's faults, set once every fault is mapped


STREAM = "acts on the tokens of a streamed answer (server-sent events); HTTPChaos sees an HTTP message, not its events"
TEXT = "changes the answer's text inside its JSON or its stream; HTTPChaos can only replace or patch a whole body"
LEFT_OUT: dict[str, tuple[str, bool]] = {  # fault type -> (why, whether it can run beside)
    "server_hook": ("the bundled reference server's own hooks (slow engine steps, a KV-cache cap, failing a share "
                    "of requests, wedging on a class of input); a service in a cluster has none, and no Chaos Mesh "
                    "object reaches inside an engine", False),
    "abnormal_inputs": ("a batch of abnormal requests, each judged on its answer: traffic and its verdicts, not an "
                        "injection", True),
    "slow_close": ("delays the close (FIN) of a connection; netem shapes packets, not a connection's end", True),
    "slicer": ("slices a connection's bytes into small pieces; no Chaos Mesh action re-segments a TCP stream", True),
    "limit_data": ("closes a connection after a number of bytes; no Chaos Mesh action counts a connection's bytes",
                   True),
    "rate_limit_storm": ("a run of errors, then requests that pass, counted over requests; HTTPChaos answers every "
                         "request it matches alike", True),
    "bad_body": ("an empty, truncated or invalid-JSON 200 in the answer's own shape (JSON or a stream); HTTPChaos "
                 "replaces a body without knowing its shape", True),
    **{t: (STREAM, True) for t in ("token_delay", "stream_stall", "stream_cut", "stream_reset", "corrupt_chunk",
                                   "stream_error_event", "drop_usage", "drop_done", "duplicate_chunk",
                                   "reorder_chunks")},
    **{t: (TEXT, True) for t in ("replace_text", "garble_text", "enlarge_text", "break_json")},
    "slow_upload": ("paces a request's body to the upstream; no Chaos Mesh action throttles one direction of one "
                    "port", True),
    # a kernel fault acts on a host the run makes: it runs where the run makes hosts, not through a port-forward
    "tcp_reset": ("answers a host's TCP packets with resets (nftables reject with tcp reset); no NetworkChaos "
                  "action resets TCP (its partition drops packets, never rejects them), and HTTPChaos's abort, which "
                  "reset_peer becomes, acts on requests to one HTTP port, not on every TCP packet of a host", False),
}

NETEM = ("Chaos Mesh (netem, tbf, iptables) acts on every packet the pods send (direction and target narrow it), "
         "where the run's Toxiproxy toxic acts on one direction of each connection of the link")
HTTPCHAOS = ("HTTPChaos proxies the pods' port in plain HTTP and touches only connections opened after it starts: "
             "the exported load opens a connection per request for that")
LOAD_WORKERS = {COMPONENT_LABEL: "locust-worker"}  # with EXPERIMENT_LABEL: the load's worker pods


class Mapper:
    """Maps the faults of one experiment, for one cluster (an ExportConfig)."""

    def __init__(self, exp, cfg: ExportConfig):
        self.exp, self.cfg = exp, cfg
        t = exp.target
        self.hosts = dict((t.settings or {}).get("hosts") or {})  # host name -> the instance ids on it
        prefix = {"reference": "r", "process": "p", "docker": "d", "stack": "r"}.get(t.kind, "r")
        self.primaries = [f"{prefix}{i}" for i in range(t.replicas)]
        self.workers = {"mode": "all", "selector": {"namespaces": [cfg.namespace], "labelSelectors": {
            **LOAD_WORKERS, EXPERIMENT_LABEL: object_name(exp.name)}}}

    def map(self, spec) -> Injection | Left:
        if spec.type in LEFT_OUT:
            why, beside = LEFT_OUT[spec.type]
            return Left(spec.name, spec.type, spec.at, why, beside)
        mapper = MAPPERS.get(spec.type)
        if mapper is None:  # a plugin's fault type: nothing here knows it
            return Left(spec.name, spec.type, spec.at, "a fault type this export does not know", False)
        return mapper(self, spec)

    # -- which pods ---------------------------------------------------------------------------------------------
    def rest(self, spec) -> float:
        """How long a fault without a duration lasts: the run reverts it when the load ends."""
        return max(1.0, self.exp.load_duration - spec.at)

    def pods(self, spec, instance, count: int = 1) -> tuple[dict, list[str]]:
        """Chaos Mesh's selector and mode for `count` instances from `instance` (an index, random, or an id)."""
        cfg = self.cfg
        if isinstance(instance, int):
            instance = self.primaries[instance % len(self.primaries)]
        if count > 1:
            return ({"selector": cfg.replicas(), "mode": "fixed", "value": str(count)},
                    [f"{count} pods of the replicas (--selector), chosen by Chaos Mesh, for {count} instances "
                     f"from {instance}"])
        if instance in cfg.instances:
            return {"selector": cfg.instances[instance].selector(cfg.namespace), "mode": "all"}, []
        if instance == "random" or instance in self.primaries:
            what = "instance random" if instance == "random" else f"{instance} (not pinned with --instance)"
            return {"selector": cfg.replicas(), "mode": "one"}, [f"{what}: any one pod of the replicas"]
        raise InputError(f"{self.exp.path}: fault {spec.name} names {instance}, which is not one of the replicas "
                         f"({', '.join(self.primaries)}): say which pods it is with --instance {instance}=POD or "
                         f"--instance {instance}=KEY=VALUE")

    def host(self, spec, name: str) -> tuple[dict, list[str]]:
        """The pods of a host: those of the instances on it, each found as pods() finds an instance. Several
        instances are joined where one selector can say it: pods by name, one label for all, or N of the replicas."""
        ids = list(self.hosts.get(name) or ())
        if not ids:
            raise InputError(f"{self.exp.path}: fault {spec.name} names host {name}, which the target's hosts: "
                             f"do not have")
        got = [self.pods(spec, i) for i in ids]
        if len(got) == 1:
            pods, notes = got[0]
            return pods, [f"host {name}: {n}" for n in notes]
        sels, ns = [p for p, _ in got], self.cfg.namespace
        if all(s["mode"] == "all" and "pods" in s["selector"] for s in sels):
            return {"selector": {"pods": {ns: [n for s in sels for n in s["selector"]["pods"][ns]]}},
                    "mode": "all"}, []
        if all(s == sels[0] for s in sels):
            if sels[0]["mode"] == "all":  # one label pins every instance of the host
                return sels[0], []
            return ({"selector": self.cfg.replicas(), "mode": "fixed", "value": str(len(ids))},
                    [f"host {name} ({', '.join(ids)}, not pinned with --instance): {len(ids)} pods of the "
                     f"replicas, chosen by Chaos Mesh"])
        raise InputError(f"{self.exp.path}: fault {spec.name} acts on host {name}, whose instances "
                         f"({', '.join(ids)}) are pinned in ways one Chaos Mesh selector cannot join: pin each "
                         f"with --instance ID=POD, or all of them with one --instance ID=KEY=VALUE label")

    def link(self, spec, link: str) -> tuple[dict, dict | None, list[str]]:
        """The pods a link's fault goes on, and the pods at its other end (None: not known)."""
        if link == "client":  # in front of the whole target: the front (the gateway, else the replicas)
            front = self.cfg.instances.get("gw")
            sel = front.selector(self.cfg.namespace) if front else self.cfg.replicas()
            return {"selector": sel, "mode": "all"}, self.workers, []
        pods, notes = self.pods(spec, link)
        gw = self.cfg.instances.get("gw")
        peer = {"selector": gw.selector(self.cfg.namespace), "mode": "all"} if gw else None
        if peer is None:
            notes = notes + [f"link {link}: every packet its pods send, not only to the gateway (pin the gateway "
                             f"with --instance gw=... to narrow it)"]
        return pods, peer, notes


# -- instance faults --------------------------------------------------------------------------------------------
def kill_instance(m: Mapper, spec) -> Injection:
    p = spec.params
    pods, notes = m.pods(spec, p.instance, p.count)
    sigkill = p.signal == "SIGKILL"
    body = {**pods, "action": "pod-kill", "gracePeriod": 0 if sigkill else 30}
    if not sigkill:
        notes.append(f"{p.signal}: the pod is deleted with a 30 s grace period (SIGTERM, then SIGKILL)")
    notes.append("the pod's controller starts a replacement at once" + (
        f"; restart_after ({p.restart_after:g}s) has no counterpart" if p.restart_after is not None else ""))
    lasts = p.restart_after if p.restart_after is not None else m.rest(spec)
    return Injection(spec.name, spec.type, "PodChaos", body, spec.at, lasts, notes)


def pause_instance(m: Mapper, spec) -> Injection:
    p = spec.params
    pods, notes = m.pods(spec, p.instance, p.count)
    if m.cfg.pause_as == "pod-failure":
        notes.append("pod-failure swaps the pod's containers for a pause image: its connections end and it leaves "
                     "the Service at once, where a frozen (SIGSTOP) process keeps them open and answers nothing")
        return Injection(spec.name, spec.type, "PodChaos", {**pods, "action": "pod-failure"}, spec.at, p.duration,
                         notes)
    notes.append("a frozen process as its clients see it: every packet the pods send is dropped, so connections "
                 "stay open and nothing is answered; unlike SIGSTOP, new connections are not accepted either, and "
                 "the kubelet's probes fail the same way (--pause-as pod-failure for a pod that is down instead)")
    body = {**pods, "action": "loss", "loss": {"loss": "100", "correlation": "0"}, "direction": "to"}
    return Injection(spec.name, spec.type, "NetworkChaos", body, spec.at, p.duration, notes)


# -- network faults -------------------------------------------------------------------------------------------
def _netem(m: Mapper, spec, action: dict, what: str) -> Injection | Left:
    p = spec.params
    toxicity, stream = getattr(p, "toxicity", 1), getattr(p, "stream", "downstream")  # link_down has neither
    if toxicity != 1:
        return Left(spec.name, spec.type, spec.at, f"toxicity {toxicity:g}: Toxiproxy takes a share of "
                                                   f"connections; Chaos Mesh shapes every packet of its pods")
    pods, peer, notes = m.link(spec, p.link)
    body = {**pods, **action}
    partition = action["action"] == "partition"
    if peer is not None:
        body["target"] = peer
        # downstream: what the link's server side sends (replies); upstream: what its clients send to it
        body["direction"] = "both" if partition else "to" if stream == "downstream" else "from"
    else:
        body["direction"] = "to"  # from and both need a target (Chaos Mesh's webhook refuses them without one)
        if stream == "upstream" and not partition:
            notes.append("upstream (the requests) taken as the replies: without the sending pods as a target, "
                         "Chaos Mesh shapes only what the selected pods send")
    notes.insert(0, what)
    return Injection(spec.name, spec.type, "NetworkChaos", body, spec.at,
                     p.duration if p.duration is not None else m.rest(spec), notes + [NETEM])


def latency(m: Mapper, spec):
    p = spec.params
    delay = {"latency": go_duration(p.latency), "correlation": "0"}
    if p.jitter:
        delay["jitter"] = go_duration(p.jitter)
    return _netem(m, spec, {"action": "delay", "delay": delay}, "netem delay: latency ± jitter per packet")


def _tbf(rate: int) -> tuple[dict, str]:
    """A bandwidth action for `rate` KB/s (a KB being 1,000 bytes), and what it is in words."""
    bytes_s = rate * 1000
    buffer = max(10_000, bytes_s // 100)  # above the MTU, and a tick's worth at 100 Hz: tbf's own minimum
    limit = max(2 * buffer, bytes_s)  # a second queued: the link slows down before it drops, as the proxy's does
    return ({"action": "bandwidth", "bandwidth": {"rate": f"{rate * 8}kbit", "limit": limit, "buffer": buffer}},
            f"tbf at {rate * 8} kbit/s ({rate} KB/s), {buffer} bytes of burst, {limit} queued")


def bandwidth(m: Mapper, spec):
    rate = spec.params.rate  # KB/s, a KB being 1,000 bytes
    if rate == 0:
        return Left(spec.name, spec.type, spec.at, "rate 0 stops the link, which a token bucket cannot express "
                                                   "(link_down is the fault for that)")
    return _netem(m, spec, *_tbf(rate))


def timeout(m: Mapper, spec):
    t = spec.params.timeout
    what = "loss of every packet: the connections hang, as the toxic's swallowed data does"
    if t:
        what += f"; the toxic also closes them after {t:g}s, which loss never does (the client's timeout ends them)"
    return _netem(m, spec, {"action": "loss", "loss": {"loss": "100", "correlation": "0"}}, what)


def link_down(m: Mapper, spec):
    return _netem(m, spec, {"action": "partition"},
                  "a partition drops the link's packets: open connections hang and new ones time out, where a "
                  "disabled Toxiproxy proxy refuses new connections and closes open ones")


# -- HTTP faults --------------------------------------------------------------------------------------------
def _http(m: Mapper, spec, target: str, action: dict, what: str) -> Injection | Left:
    p = spec.params
    if getattr(p, "probability", None) not in (None, 1):
        why = f"probability {p.probability:g}: HTTPChaos acts on every request it matches, never on a share"
        return Left(spec.name, spec.type, spec.at, why)
    if getattr(p, "count", None) is not None or getattr(p, "occurrences", None) is not None:
        return Left(spec.name, spec.type, spec.at, "count / occurrences pick requests by number; HTTPChaos "
                                                   "matches by path, method and headers only")
    match = getattr(p, "match", None) or {}
    if set(match) - {"path", "method"}:
        return Left(spec.name, spec.type, spec.at, "match on the model or on streaming reads the request's "
                                                   "body; HTTPChaos matches by path, method and headers only")
    pods, _peer, notes = m.link(spec, p.link)
    # Only the API's own requests: a probe of /health answered with the fault would take the pod out of the Service
    body = {**pods, "target": target, "port": m.cfg.port, "path": match.get("path", f"{m.cfg.base_path}/*"),
            "method": match.get("method", "POST"), **action}
    return Injection(spec.name, spec.type, "HTTPChaos", body, spec.at,
                     p.duration if p.duration is not None else m.rest(spec), [what, *notes, HTTPCHAOS])


def http_error(m: Mapper, spec):
    from ..proxy.llm.effects import VENDOR_ERRORS  # the LLM proxy's own answers: a client sees the same error

    p = spec.params
    message, code, param = VENDOR_ERRORS[p.status]
    # masked: base64 would hide a secret variable's value from the check of every file written
    error = m.exp.mask(openai_error(p.message or message, error_type_for(p.status), p.code or code, param))
    headers = {"Content-Type": "application/json"}
    if p.retry_after is not None and p.status in (429, 503):
        headers.update({k.title(): v for k, v in retry_after_headers(p.retry_after).items()})
    replace = {"code": p.status, "headers": headers,
               "body": base64.b64encode(json.dumps(error).encode()).decode()}  # the CRD's []byte: base64
    return _http(m, spec, "Response", {"replace": replace},
                 f"the answer replaced by {p.status} with an OpenAI-shaped error; unlike the LLM proxy, the request "
                 f"still reaches the engine, which does the work")


def drop_connection(m: Mapper, spec):
    return _http(m, spec, "Request", {"abort": True}, "HTTPChaos abort: the connection is closed, nothing answered")


def reset_peer(m: Mapper, spec):
    t = spec.params.timeout
    if t:
        return Left(spec.name, spec.type, spec.at, f"a reset {t:g}s after the first data; HTTPChaos aborts at once "
                                                   f"and aborts before any delay")
    if spec.params.toxicity != 1:
        return Left(spec.name, spec.type, spec.at, f"toxicity {spec.params.toxicity:g}: a share of connections")
    return _http(m, spec, "Request", {"abort": True},
                 "HTTPChaos abort on the pods' HTTP port, for the toxic's reset of every connection")


def delay_request(m: Mapper, spec):
    return _http(m, spec, "Request", {"delay": go_duration(spec.params.delay)},
                 "HTTPChaos holds each request before the engine sees it")


def hang(m: Mapper, spec):
    p = spec.params
    hold = p.max if p.max is not None else (p.duration if p.duration is not None else m.rest(spec))
    return _http(m, spec, "Request", {"delay": go_duration(hold)},
                 f"each request held {hold:g}s: the client gives up first, as against the proxy's hang; one that "
                 f"waits longer is answered")


def first_token_delay(m: Mapper, spec):
    p = spec.params
    if (p.where or "after_headers") != "before_headers":
        return Left(spec.name, spec.type, spec.at, "a delay after the headers and before the first token is "
                                                   "inside the stream; HTTPChaos sees an HTTP message, not its "
                                                   "events (where: before_headers maps)")
    return _http(m, spec, "Response", {"delay": go_duration(p.delay)},
                 "HTTPChaos delays the response, its headers and first token with it")


# -- kernel faults: a host's link ------------------------------------------------------------------------------
HOSTS = ("a host is the pods of the instances on it: Chaos Mesh acts on each pod's own interface, where the run "
         "acts on the host's link (every process on the host, and its kernel's TCP)")


def _percent(share: float) -> str:
    """A share (0.05) as Chaos Mesh's percent string ("5"): a FloatStr from 0 to 100, no exponent."""
    return f"{share * 100:.4f}".rstrip("0").rstrip(".")


def _host_link(m: Mapper, spec, action: dict, what: str, one_way: str | None = None,
               more: tuple[str, ...] = ()) -> Injection:
    """A NetworkChaos on the host's pods: with a peer, both ways between them and the peer's pods (its target);
    without one, a partition drops every packet in and out, anything else shapes what the pods send (one_way says
    how that differs: Chaos Mesh's `from` and `both` need a target outside a partition)."""
    p = spec.params
    pods, notes = m.host(spec, p.host)
    notes = [*more, *notes]
    body = {**pods, **action}
    peer = getattr(p, "peer", None)
    if peer is not None:
        target, peer_notes = m.host(spec, peer)
        body["target"], body["direction"] = target, "both"
        notes += peer_notes
        if pods["mode"] != "all" and target["mode"] != "all" and pods["selector"] == target["selector"]:
            notes.append(f"host {p.host} and peer {peer} are both taken from the replicas, each on its own: Chaos "
                         f"Mesh may pick the same pod for both (pin them with --instance)")
    elif action["action"] == "partition":
        body["direction"] = "both"  # no target: every packet into and out of the pods
    else:
        body["direction"] = "to"
        if one_way:
            notes.append(one_way)
    return Injection(spec.name, spec.type, "NetworkChaos", body, spec.at,
                     p.duration if p.duration is not None else m.rest(spec), [what, *notes, HOSTS])


def packet_loss(m: Mapper, spec):
    rate, peer = spec.params.rate, spec.params.peer
    which = f"between the host's pods and peer {peer}'s, both ways" if peer else "the host's pods send"
    return _host_link(m, spec, {"action": "loss", "loss": {"loss": _percent(rate), "correlation": "0"}},
                      f"netem loss of {_percent(rate)} % of the packets {which}, for the run's nftables random drop",
                      "without a peer, only what the host's pods send loses packets, where the run drops the host's "
                      "packets both ways: a round trip loses about half as many here")


def partition(m: Mapper, spec):
    if spec.params.peer is not None:
        what = (f"iptables drops every packet between the host's pods and peer {spec.params.peer}'s, both ways; "
                f"open connections hang and new ones time out")
    else:
        what = ("without a peer, every packet into and out of the host's pods is dropped (Chaos Mesh's partition "
                "without a target: an iptables DROP on their interface with no address set), from other pods, the "
                "node and outside the cluster alike, as the run cuts the host off from every host and the runner; "
                "the kubelet's probes fail too, so the pods leave the Service and a liveness probe may restart them")
    return _host_link(m, spec, {"action": "partition"}, what)


def link_rate(m: Mapper, spec):
    action, what = _tbf(spec.params.rate)
    return _host_link(m, spec, action, what, "tbf shapes only what the host's pods send (Chaos Mesh shapes no "
                                             "ingress), where the run shapes the host's link each way (tbf on both "
                                             "ends of its veth): what the pods receive is not slowed")


def netem(m: Mapper, spec):
    p = spec.params
    delay = p.delay
    if p.reorder and not delay:
        return Left(spec.name, spec.type, spec.at, "reorder without a delay: netem reorders by letting packets "
                                                   "skip its delay queue, so tc refuses it without one (as the "
                                                   "run's apply does), and Chaos Mesh's reorder is a field of "
                                                   "delay", False)
    tc, notes = {}, []
    if delay is not None:
        tc["delay"] = {"latency": go_duration(delay), "correlation": "0"}
        if p.jitter:
            tc["delay"]["jitter"] = go_duration(p.jitter)
        if p.reorder:  # gap 1, tc's own when none is given (the run's): any packet may go ahead at reorder's odds
            tc["delay"]["reorder"] = {"reorder": _percent(p.reorder), "correlation": "0", "gap": 1}
    elif p.jitter:
        notes.append("jitter without a delay does nothing, as in the run (netem takes jitter with a delay)")
    for key in ("duplicate", "corrupt"):
        if getattr(p, key):
            tc[key] = {key: _percent(getattr(p, key)), "correlation": "0"}
    if not tc:
        return Left(spec.name, spec.type, spec.at, "no delay, and no duplicate or corrupt above 0: nothing "
                                                   "to inject (Chaos Mesh's netem needs one of them)", False)
    action = next(iter(tc)) if len(tc) == 1 else "netem"  # netem: several of them in one qdisc, as the run's
    said = [f"delay {go_duration(delay)}" + (f" ± {go_duration(p.jitter)}" if p.jitter else "") +
            (f", reorder {_percent(p.reorder)} % (gap 1)" if p.reorder else "")] if delay is not None else []
    said += [f"{k} {tc[k][k]} %" for k in ("duplicate", "corrupt") if k in tc]
    return _host_link(m, spec, {"action": action, **tc}, f"netem {', '.join(said)} on what the host's pods send",
                      "netem shapes only what the host's pods send (Chaos Mesh's netem is on a pod's egress), "
                      "where the run puts it on both ends of the host's veth: the way in is not shaped, so a round "
                      "trip meets it once here and twice in the run", tuple(notes))


MAPPERS = {"kill_instance": kill_instance, "pause_instance": pause_instance, "latency": latency,
           "bandwidth": bandwidth, "timeout": timeout, "link_down": link_down, "reset_peer": reset_peer,
           "http_error": http_error, "drop_connection": drop_connection, "delay_request": delay_request,
           "hang": hang, "first_token_delay": first_token_delay, "packet_loss": packet_loss,
           "partition": partition, "link_rate": link_rate, "netem": netem}


def map_faults(exp, cfg: ExportConfig) -> tuple[list[Injection], list[Left]]:
    """Every fault of the experiment, mapped or left out; each injection named uniquely for its workflow step."""
    m, done, left = Mapper(exp, cfg), [], []
    taken = {object_name(exp.name, 51)}  # the workflow's entry
    for spec in exp.faults:
        out = m.map(spec)
        if isinstance(out, Left):
            out.index = spec.index
            left.append(out)
            continue
        step = object_name(spec.name, 45)
        if {step, f"{step}-wait", f"{step}-at"} & taken:  # a step also names its wait and its branch
            step = object_name(f"{step[:40]}-{spec.index}", 45)
        taken.update({step, f"{step}-wait", f"{step}-at"})
        out.step = step
        done.append(out)
    return done, left
