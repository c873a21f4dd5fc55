"""Fault families. Each is one module with Fault subclasses; a fault type is one class, which carries all of it.

Adding a fault is one file and one line: in its module, a Fault subclass with a `type`, a `summary` (for `chaos
list faults`), its settings as a typed `Params` dataclass (chaos.faults.params: each field made by setting() with
its JSON Schema from chaos.schemabits) and its `schema`, derived (`Params.schema()`), what the schema cannot say
about it against a target (`check`, plus the flags the generic checks read: `needs_started_target`,
`counts_instances`), its advice (`warnings`), and plan / apply / revert / describe / undo_from_journal; then the
class in FAULT_TYPES below (and its import). The experiment schema, `chaos validate`, `chaos list faults` and
the reference pages (`python -m chaos.docgen` writes them) take it from there. tests/faults/test_toy_fault.py
shows it with a toy.
"""

from .base import Fault, FaultContext, FaultError
from .params import Params, ParamsError, setting
from .inputs import AbnormalInputs
from .instance import KillInstance, PauseInstance
from .kernel import KERNEL_FAULTS
from .llm import LLM_FAULT_TYPES
from .network import NETWORK_FAULTS
from .server_hook import ServerHook

# The one list of fault types: type -> class. A plugin or a test may add to it after the import.
FAULT_TYPES: dict[str, type[Fault]] = {cls.type: cls for cls in (KillInstance, PauseInstance, ServerHook,
                                                                 AbnormalInputs, *NETWORK_FAULTS, *LLM_FAULT_TYPES,
                                                                 *KERNEL_FAULTS)}


def make_fault(spec, target) -> Fault:
    return FAULT_TYPES[spec.type](spec, target)


def wanted_links(exp) -> dict[str, set[str]]:
    """link name -> the fault families on it ({"network", "llm"}), from the faults and the target's `links:`."""
    from ..targets.links import L4, L7

    out: dict[str, set[str]] = {}
    for name in exp.target.links:
        out.setdefault(name, set()).add(L4)
    for f in exp.faults:
        family = getattr(FAULT_TYPES.get(f.type), "family", None)
        if family in (L4, L7):
            out.setdefault(f.params.link, set()).add(family)
    return out


__all__ = ["FAULT_TYPES", "Fault", "FaultContext", "FaultError", "Params", "ParamsError", "make_fault", "setting",
           "wanted_links"]
