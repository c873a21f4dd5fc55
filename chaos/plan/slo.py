"""An SLO as the capacity search judges it: "p95<3s,errors<0.1%", each clause one figure against one limit, and
the rule that turns a figure with its interval into meets / breaks / unclear.

A figure is only called when its interval says so: it meets the limit when the interval's upper bound is within
it, breaks it when the lower bound is beyond it, and is unclear otherwise (too few requests, or the truth sits on
the limit): the search then repeats the probe rather than guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..common import parse_duration, parse_percent
from ..errors import InputError

MEETS, BREAKS, UNCLEAR = "meets", "breaks", "unclear"

# name as written -> (metric, percentile); metric "errors" has no percentile
FIGURES = {
    "p50": ("e2e", 50), "p95": ("e2e", 95), "p99": ("e2e", 99),
    "e2e_p50": ("e2e", 50), "e2e_p95": ("e2e", 95), "e2e_p99": ("e2e", 99),
    "ttft_p50": ("ttft", 50), "ttft_p95": ("ttft", 95), "ttft_p99": ("ttft", 99),
    "errors": ("errors", None), "error_rate": ("errors", None),
}
_CLAUSE = re.compile(r"^\s*([A-Za-z0-9_]+)\s*(<=|<)\s*(\S.*?)\s*$")
EXAMPLE = 'write e.g. "p95<3s,errors<0.1%" (figures: p50 p95 p99, ttft_p50 ttft_p95 ttft_p99, errors)'


class SLOError(InputError, ValueError):
    """An SLO text that cannot be read; the message names the clause and shows the form."""


@dataclass(slots=True, frozen=True)
class Clause:
    name: str  # as written, e.g. "p95"
    metric: str  # e2e | ttft | errors
    q: float | None  # the percentile, for latency
    limit: float  # seconds, or a fraction for errors
    inclusive: bool = False  # "<=" rather than "<"

    def __post_init__(self):
        if self.metric not in ("e2e", "ttft", "errors"):
            raise SLOError(f"unknown metric {self.metric!r}")
        if self.metric == "errors" and not 0 <= self.limit < 1:
            raise SLOError(f"{self.name}: an error-rate limit is from 0% up to (not including) 100%")
        if self.metric != "errors" and not self.limit > 0:
            raise SLOError(f"{self.name}: a latency limit must be more than 0 s")

    @property
    def key(self) -> str:
        return "errors" if self.metric == "errors" else f"{self.metric}_p{self.q:g}"

    def text(self) -> str:
        op = "<=" if self.inclusive else "<"
        lim = f"{self.limit * 100:g}%" if self.metric == "errors" else f"{self.limit:g}s"
        return f"{self.name}{op}{lim}"

    def judge(self, low: float | None, high: float | None) -> str:
        """meets when the upper bound is within the limit, breaks when the lower bound is beyond it, else unclear.
        A missing bound (too few samples for it) cannot decide its side."""
        if high is not None and (high <= self.limit if self.inclusive else high < self.limit):
            return MEETS
        if low is not None and (low > self.limit if self.inclusive else low >= self.limit):
            return BREAKS
        return UNCLEAR


@dataclass(slots=True, frozen=True)
class SLO:
    clauses: tuple[Clause, ...]

    def __post_init__(self):
        if not self.clauses:
            raise SLOError(f"an SLO needs at least one clause; {EXAMPLE}")

    def text(self) -> str:
        return ",".join(c.text() for c in self.clauses)


def parse_slo(text: str) -> SLO:
    """'p95<3s,errors<0.1%' -> SLO. Strict: every clause must parse, no figure twice, nothing left over."""
    if not isinstance(text, str) or not text.strip():
        raise SLOError(f"empty SLO; {EXAMPLE}")
    clauses, seen = [], set()
    for part in text.split(","):
        m = _CLAUSE.match(part)
        if not m:
            raise SLOError(f"cannot read SLO clause {part.strip()!r}: a clause is FIGURE<LIMIT; {EXAMPLE}")
        name, op, value = m.group(1).lower(), m.group(2), m.group(3)
        if name not in FIGURES:
            raise SLOError(f"unknown SLO figure {name!r} in {part.strip()!r}; {EXAMPLE}")
        metric, q = FIGURES[name]
        try:
            if metric == "errors":
                if not value.endswith("%"):
                    raise ValueError("an error-rate limit is a percentage")
                limit = parse_percent(value)
            else:
                if not re.search(r"(ms|s|m|h)$", value):
                    raise ValueError("a latency limit needs its unit")
                limit = parse_duration(value)
        except ValueError as e:
            unit = "a percentage such as 0.1%" if metric == "errors" else "a duration such as 3s or 800ms"
            raise SLOError(f"bad limit {value!r} in SLO clause {part.strip()!r}: write {unit} ({e})") from None
        clause = Clause(name, metric, q, limit, op == "<=")
        if clause.key in seen:
            raise SLOError(f"SLO figure {name!r} given twice; give each figure once")
        seen.add(clause.key)
        clauses.append(clause)
    return SLO(tuple(clauses))


def combine(verdicts: list[str]) -> str:
    """The SLO's verdict from its clauses': breaks if any clause surely breaks, meets if every clause surely
    meets, else unclear."""
    if BREAKS in verdicts:
        return BREAKS
    if verdicts and all(v == MEETS for v in verdicts):
        return MEETS
    return UNCLEAR
