"""Network faults: Toxiproxy toxics on a link (latency and jitter, bandwidth, timeouts, resets, slicing, a data cap)
and a link taken down, through the Toxiproxy API: a real toxiproxy-server's or the bundled one's.

Each fault type is one toxic; its settings are written in the experiment's units (durations, KB/s, bytes) and
given to Toxiproxy in its own (ms, µs). Toxicity is decided by Toxiproxy per connection, once, when the connection
opens: on a client that keeps its connections alive it hits all of a connection's requests or none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..schemabits import PERCENT
from .base import Fault, FaultContext, FaultError, LinkFault, LinkParams, link_setting
from .params import params_from_table, setting

# fault type -> {setting: (Toxiproxy attribute, kind)}; kind: ms | us (a duration given in those), int.
# The schema of each type is built from this table (NETWORK_FAULTS, below).
TOXICS: dict[str, dict[str, tuple[str, str]]] = {
    "latency": {"latency": ("latency", "ms"), "jitter": ("jitter", "ms")},
    "bandwidth": {"rate": ("rate", "int")},
    "slow_close": {"delay": ("delay", "ms")},
    "timeout": {"timeout": ("timeout", "ms")},
    "reset_peer": {"timeout": ("timeout", "ms")},
    "slicer": {"average_size": ("average_size", "int"), "size_variation": ("size_variation", "int"),
               "delay": ("delay", "us")},
    "limit_data": {"bytes": ("bytes", "int")},
}
REQUIRED = {"latency": ["latency"], "bandwidth": ["rate"], "slow_close": ["delay"], "timeout": ["timeout"],
            "slicer": ["average_size"], "limit_data": ["bytes"]}
SUMMARIES = {
    "latency": "delay every chunk on a link by latency ± jitter (Toxiproxy latency toxic)",
    "bandwidth": "cap a link's throughput at rate KB/s (KB = 1,000 bytes)",
    "slow_close": "delay the close of a link's connections by delay",
    "timeout": "swallow a link's data and close after timeout (0: hold the connections forever)",
    "reset_peer": "reset (RST) a link's connections timeout after their first data",
    "slicer": "slice a link's data into pieces of average_size ± size_variation bytes, delay apart",
    "limit_data": "close a link's connections after bytes in one direction",
}


def _unit(attr: str, kind: str) -> str:
    return {"ms": " ms", "us": " µs"}.get(kind) or (" KB/s" if attr == "rate" else " B")


class _LinkFault(LinkFault):
    family = "network"

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        problems = super().check(fault, target)
        if not problems and target.kind == "openai" and not target.base_url.startswith("http://"):
            return [(("type",), f"{cls.type} is a network fault (plain TCP, through Toxiproxy) and "
                                f"{target.base_url} is https; use an LLM fault (the L7 proxy speaks TLS "
                                f"upstream), or an http:// base_url")]
        return problems

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.proxies: list[str] = []
        self.hit: list[str] = []  # the proxies the fault really took on
        # The client puts names into URL paths unquoted: a name such as latency#0 would end at the '#'.
        self.toxic_name = re.sub(r"[^A-Za-z0-9_.-]", "_", spec.name)

    @property
    def _api(self):
        links = self.target.links
        if links is None or links.api is None:
            raise FaultError(f"fault {self.spec.name}: the link {self.link!r} has no Toxiproxy proxy")
        return links.api

    def plan(self, ctx: FaultContext) -> dict:
        self.proxies = [h.l4_name for h in self.link_hops() if h.l4_name]
        return {"link": self.link, "toxiproxy": self._api.url, "external": self.target.links.external,
                "proxies": self.proxies, "toxic": self.toxic_name}

    def _revert_each(self, fn) -> None:
        self.reverted = True
        for proxy in self.proxies:  # all of them: one may have taken the fault after all
            try:
                fn(proxy)
            except Exception as e:  # noqa: BLE001 - said in revert_error; the others are still reverted
                self.revert_error = f"{proxy}: {e}"

    @staticmethod
    def _undo_each(plan: dict, what: str, fn) -> str:
        """For recover: only on a server of the user's (the bundled one is a process of the run, stopped)."""
        if not plan.get("external"):
            return "the bundled proxy is stopped by recover"
        from ..targets.toxiproxy_api import ToxiproxyAPI

        api, done = ToxiproxyAPI(plan["toxiproxy"]), []
        for proxy in plan.get("proxies") or []:
            try:
                if fn(api, proxy):
                    done.append(f"{what} {proxy}")
            except Exception as e:  # noqa: BLE001 - one line each: recover goes on with the rest
                done.append(f"could not {what} {proxy}: {e}")
        return "; ".join(done) or "nothing was left"

    def _each(self, what: str, fn) -> None:
        errors = []
        for proxy in self.proxies:
            try:
                fn(proxy)
                self.hit.append(proxy)
            except Exception as e:  # noqa: BLE001 - named in apply_error; the others still get the fault
                errors.append(f"{proxy}: {e}")
        if errors:
            self.apply_error = f"{what} failed on " + "; ".join(errors)
        if self.proxies and not self.hit:
            self.applied = False
            raise FaultError(f"fault {self.spec.name}: {what} failed on every proxy of link {self.link} "
                             f"({self.apply_error})")


@dataclass(slots=True, frozen=True, kw_only=True)
class ToxicParams(LinkParams):
    """Every toxic's settings; each toxic adds its own from TOXICS."""

    stream: str = setting({"enum": ["downstream", "upstream"]}, "downstream")
    toxicity: float = setting(PERCENT, 1.0)  # the share of connections it takes


class ToxicFault(_LinkFault):
    toxic = "latency"

    def __init__(self, spec, target):
        super().__init__(spec, target)
        p = spec.params
        self.stream, self.toxicity = p.stream, p.toxicity
        self.attributes = {}
        for key, (attr, kind) in TOXICS[self.toxic].items():
            if (v := getattr(p, key)) is not None:
                self.attributes[attr] = (round(v * 1000) if kind == "ms" else round(v * 1_000_000) if kind == "us"
                                         else int(v))

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        self._each(f"adding the {self.toxic} toxic", lambda proxy: self._api.add_toxic(
            proxy, self.toxic_name, self.toxic, self.stream, self.toxicity, self.attributes))

    def revert(self, ctx: FaultContext) -> None:
        self._revert_each(lambda proxy: self._api.remove_toxic(proxy, self.toxic_name))

    def describe(self) -> str:
        attrs = ", ".join(f"{attr} {v:g}{_unit(attr, kind)}" for attr, kind in TOXICS[self.toxic].values()
                          if (v := self.attributes.get(attr)) is not None)
        tox = f", toxicity {self.toxicity:g}" if self.toxicity != 1 else ""
        dur = "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"
        return f"{self.toxic} ({attrs}; {self.stream}{tox}) on link {self.link} at {self.spec.at:g}s{dur}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        return _LinkFault._undo_each(plan, f"remove toxic {plan.get('toxic')} from",
                                     lambda api, proxy: api.remove_toxic(proxy, plan["toxic"]))


class LinkDown(_LinkFault):
    type = "link_down"
    summary = "take a link down (its Toxiproxy proxy disabled: no new connections, open ones closed)"
    schema = LinkParams.schema(summary)

    def apply(self, ctx: FaultContext) -> None:
        self.applied = True
        self._each("disabling", lambda proxy: self._api.set_enabled(proxy, False))

    def revert(self, ctx: FaultContext) -> None:
        self._revert_each(lambda proxy: self._api.set_enabled(proxy, True))

    def describe(self) -> str:
        dur = "" if self.revert_at is None else f" for {self.revert_at - self.spec.at:g}s"
        return f"link {self.link} down at {self.spec.at:g}s{dur}"

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        return _LinkFault._undo_each(plan, "re-enable", lambda api, proxy: api.set_enabled(proxy, True) or True)


def _toxic(name: str) -> type[Fault]:
    params = params_from_table(f"{name.title().replace('_', '')}Params", ToxicParams,
                               {k: link_setting(kind) for k, (_, kind) in TOXICS[name].items()}, REQUIRED.get(name, []))
    return type(f"{name.title().replace('_', '')}Fault", (ToxicFault,),
                {"type": name, "toxic": name, "summary": SUMMARIES[name], "Params": params,
                 "schema": params.schema(SUMMARIES[name])})


# link_down last: the published schema has listed the toxics first
NETWORK_FAULTS: list[type[Fault]] = [_toxic(name) for name in TOXICS] + [LinkDown]
