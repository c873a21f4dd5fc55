"""The fault interface the runner drives."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..errors import SetupError
from ..schemabits import BOOL, DURATION, INSTANCE, LINK, POSITIVE, integer, number
from .params import Params, setting


class FaultError(SetupError, RuntimeError):
    """A fault could not be injected at all (e.g. every replica refused a hook): the run stops, exit 2, rather
    than judge the target on a fault that never happened."""


@dataclass
class FaultContext:
    """What a fault may use while a run is live."""

    rng: random.Random = field(default_factory=lambda: random.Random(0))
    should_stop: object = lambda: False  # callable: True once the run is being interrupted
    log: object = print  # callable(str)


@dataclass(slots=True, frozen=True, kw_only=True)
class Picks(Params):
    """Which of the target's instances a fault takes: instance names the first, count takes N of the M from it."""

    instance: int | str = setting(INSTANCE, 0)
    count: int = setting(integer(1, 16), 1)


@dataclass(slots=True, frozen=True, kw_only=True)
class LinkParams(Params):
    """The settings of every fault on a link: which link, and for how long (None: until the end of the run)."""

    link: str = setting(LINK, "client")
    duration: float | None = setting(POSITIVE, None)


class Fault:
    type = "base"
    summary = ""  # one line for `chaos list faults`
    # Its settings, typed (chaos.faults.params): the loader builds spec.params from the fault's mapping.
    Params: type[Params] = Params
    # The JSON Schema of its own settings, an object, most often Params.schema(): the experiment schema
    # (chaos.experiment.schema) adds the keys every fault takes (type, at, name) and validates a fault of this
    # type against the two.
    schema: dict = Params.schema()
    needs_started_target = False  # it acts on processes or containers the run starts: not on an openai target
    counts_instances = False  # its `count` is how many of the target's instances it takes (N of M)
    slow_revert = False  # True: revert may take seconds (a restart); the runner does it in the background

    def __init__(self, spec, target):
        self.spec = spec
        self.target = target
        self.applied = False
        self.reverted = False
        self.reverting = False  # a slow revert is under way in the runner's background
        self.revert_error: str | None = None  # why a slow revert (a restart) failed
        self.apply_error: str | None = None  # what of apply did not take (e.g. replicas that refused a hook)
        self.revert_at: float | None = None  # seconds after load start; None: at teardown
        self.victims: list = []  # the instances plan() picked

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        """What the schema cannot say about a fault of this type (its mapping, valid against the schema) against
        this target (a TargetSpec): each problem as (its path under the fault, message); `chaos validate` adds
        the file, line and column. chaos.experiment.checks has the checks every fault gets."""
        return []

    @classmethod
    def warnings(cls, spec, exp) -> list[str]:
        """Advice, not errors, about a valid fault (a FaultSpec) in this experiment, e.g. timing that may leave
        checks unjudged: `chaos validate`, --dry-run and the run print them."""
        return []

    @classmethod
    def preflight(cls, spec) -> None:
        """What this machine must have for the fault (a FaultSpec), asked when a run starts, before anything does:
        raise FaultError saying what is missing. Not a check of the file (`chaos validate` and `chaos export`
        read files meant for other machines too)."""

    def plan(self, ctx: FaultContext) -> dict:
        """Decide what apply will touch and return it for the journal, which is written BEFORE apply,
        so `chaos recover` can undo it from the journal alone. By default: the instances it names."""
        self.victims = self._pick(ctx)
        return {"instances": [i.journal() for i in self.victims]}

    def leaves_down(self) -> bool:
        """Does it take its instances down for good (not meant to come back during the run)?"""
        return False

    def touches(self, inst) -> bool:
        """Did this fault act on inst (for checks that judge each instance after its own fault)?"""
        return any(v is inst for v in self.victims)

    def victim_ids(self) -> str:
        return ", ".join(i.id for i in self.victims) or f"instance {getattr(self.spec.params, 'instance', 0)}"

    def apply(self, ctx: FaultContext) -> None:
        raise NotImplementedError

    def revert(self, ctx: FaultContext) -> None:
        """Undo apply. Safe to call twice, and after a failed or partial apply."""
        raise NotImplementedError

    def describe(self) -> str:
        return f"{self.type} at {self.spec.at:g}s"

    def halt(self) -> None:
        """Stop any work the fault does in the background; the runner calls it before the rollback."""

    def evidence_text(self) -> str | None:
        """What the fault measured on the wire while it held (read at revert), for the run's notes; None: nothing
        (its `evidence`, a dict, goes in the journal)."""
        return None

    @staticmethod
    def undo_from_journal(plan: dict) -> str:
        """Undo using only what plan() journaled (the run's process is gone). Returns what was done."""
        return "nothing to undo"

    def _pick(self, ctx: FaultContext, default_count: int = 1) -> list:
        inst = getattr(self.spec.params, "instance", 0)
        count = getattr(self.spec.params, "count", default_count)
        pool = self.target.instances
        if inst == "random":
            return ctx.rng.sample(pool, min(count, len(pool)))
        if isinstance(inst, str):  # a replica id: a primary (count goes on from it), a backup, the gateway
            ids = [i.id for i in pool]
            if inst in ids:
                start = ids.index(inst)
            else:
                match = [i for i in self.target.all_instances() if i.id == inst]
                if not match:
                    raise ValueError(f"no instance {inst!r} (have "
                                     f"{', '.join(i.id for i in self.target.all_instances())})")
                return match
        else:
            start = int(inst)
        return [pool[(start + k) % len(pool)] for k in range(min(count, len(pool)))]


def link_setting(kind) -> dict:
    """The schema of one setting in a link fault family's table (network.TOXICS, llm.LLM_FAULTS), by its kind:
    s, ms, us (a duration, given to the proxy in that unit), int, num, str, bool, or a tuple of the values."""
    if isinstance(kind, tuple):
        return {"enum": list(kind)}
    return {"s": DURATION, "ms": DURATION, "us": DURATION, "int": integer(0, 1_000_000_000),
            "num": number(0, 1000, exclusive=True), "str": {"type": "string", "maxLength": 100_000},
            "bool": BOOL}[kind]


class LinkFault(Fault):
    """A fault on a link of the target (chaos.targets.links): network faults (Toxiproxy toxics) and LLM faults
    (proxy rules). Reverted after `duration`, or at teardown; its victims are the instances the link fronts."""

    family = "link"
    Params = LinkParams

    @classmethod
    def check(cls, fault: dict, target) -> list[tuple[tuple, str]]:
        from ..targets.links import link_names

        link, names = fault.get("link", "client"), link_names(target.settings, target.kind, target.replicas)
        if link not in names:
            return [(("link",), f"no link {link!r}; this target has {', '.join(names)}")]
        if link != "client" and (target.settings or {}).get("hosts"):
            return [(("link",), f"link {link} runs between hosts, where a proxy on this machine's loopback cannot "
                                f"sit: fault that hop on its host's link instead (packet_loss, partition, tcp_reset, "
                                f"link_rate), or fault the client link")]
        return []

    def __init__(self, spec, target):
        super().__init__(spec, target)
        self.link = spec.params.link
        d = spec.params.duration
        self.revert_at = None if d is None else spec.at + d

    def link_hops(self) -> list:
        """The link's hops; sets victims to the instances they front."""
        hops = self.target.links.hops_of(self.link) if self.target.links else []
        self.victims = [i for i in self.target.all_instances() if any(h.instance == i.id for h in hops)]
        return hops

    def victim_ids(self) -> str:
        return f"link {self.link}"
