"""The one error of the verify: section's typed values (spec.py, stabilityspec.py): each problem with its path below
verify:, which the loader turns into file:line:col."""

from __future__ import annotations

from ..errors import InputError


class SpecError(InputError, ValueError):
    """Problems in a verify: section, each (path below verify:, message)."""

    def __init__(self, problems: list[tuple[tuple, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{'.'.join(map(str, p)) or 'verify'}: {m}" for p, m in problems))

    @classmethod
    def at(cls, key: str, message: str) -> "SpecError":
        return cls([((key,), message)])

    def under(self, key: str) -> "SpecError":
        return SpecError([((key, *p), m) for p, m in self.problems])
