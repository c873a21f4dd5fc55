"""What every step of loading shares: a document with the position of each value, the problems a step finds
(each one line, file:line:col), and the file a document names.

No step of the pipeline (read, substitute, validate, check, build) calls another's file: each reaches what they
have in common here, so the path of a load runs in one direction (issue 43).
"""

from __future__ import annotations

import os

from ..errors import InputError


class ExperimentError(InputError):
    """Invalid input: each problem is one line 'file:line:col: key: message'."""

    def __init__(self, problems: list[str]):
        super().__init__("\n".join(problems))
        self.problems = problems

    def lines(self) -> list[str]:
        return self.problems  # one 'error: ' line a problem, even one whose text holds a newline


Path = tuple  # keys and indices from the document root


class Located:
    """A parsed document and where each value (and each mapping key) sits in its file."""

    def __init__(self, file: str, data, values: dict, keys: dict):
        self.file, self.data, self.values, self.keys = file, data, values, keys

    def where(self, path: Path, key: bool = False) -> str:
        table = self.keys if key else self.values
        p = tuple(path)
        while p not in table and p:
            p = p[:-1]
        line, col = table.get(p, (1, 1))
        return f"{self.file}:{line}:{col}"

    def problem(self, path: Path, message: str, key: bool = False) -> str:
        return f"{self.where(path, key)}: {dotted(path) or '(top)'}: {message}"


def dotted(path: Path) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def preview(secret: str) -> str:
    """At most the first 4 characters of something that may be a key, and its length."""
    return f"{secret[:4]!r}... ({len(secret)} characters)" if len(secret) > 4 else f"({len(secret)} characters)"


def locate_target(ref: str, experiment_file: str) -> str | None:
    """The file a document names (a target, a replay log, a suite's experiment): beside the document, one
    folder up, then in the current directory."""
    for candidate in (os.path.join(os.path.dirname(os.path.abspath(experiment_file)), ref),
                      os.path.join(os.path.dirname(os.path.abspath(experiment_file)), "..", ref), ref):
        if os.path.isfile(candidate):
            return os.path.normpath(candidate)
    return None
