"""Fault families. Each is one module with a Fault subclass: apply, revert (idempotent), describe.

Adding one is like adding a Locust user: subclass Fault, give it a `type`, and register it
in FAULT_TYPES; its class declares its settings (`schema`), and the experiment schema takes them from there.
"""

from .base import Fault, FaultContext, FaultError
from .inputs import AbnormalInputs
from .instance import KillInstance, PauseInstance
from .llm import LLM_FAULT_TYPES
from .network import NETWORK_FAULTS
from .server_hook import ServerHook

FAULT_TYPES: dict[str, type[Fault]] = {cls.type: cls for cls in (KillInstance, PauseInstance, ServerHook,
                                                                 AbnormalInputs, *NETWORK_FAULTS, *LLM_FAULT_TYPES)}


def make_fault(spec, target) -> Fault:
    return FAULT_TYPES[spec.type](spec, target)


def wanted_links(exp) -> dict[str, set[str]]:
    """link name -> the fault families on it ({"network", "llm"}), from the faults and the target's `links:`."""
    from ..targets.links import L4, L7

    out: dict[str, set[str]] = {}
    for name in exp.target.settings.get("links") or []:
        out.setdefault(name, set()).add(L4)
    for f in exp.faults:
        family = getattr(FAULT_TYPES.get(f.type), "family", None)
        if family in (L4, L7):
            out.setdefault(f.params.get("link", "client"), set()).add(family)
    return out


__all__ = ["FAULT_TYPES", "Fault", "FaultContext", "FaultError", "make_fault", "wanted_links"]
