"""Does the load outlast what the faults start? Warnings for `chaos validate`, `--dry-run` and the run itself.

Each fault class says what of its own timing may leave checks unjudged (Fault.warnings): today a kill whose
restart the load may not outlast (chaos.faults.instance).
"""

from __future__ import annotations

from ..faults import FAULT_TYPES


def restart_warnings(exp) -> list[str]:
    return [w for f in exp.faults for w in FAULT_TYPES[f.type].warnings(f, exp)]
