"""The seed's cost sum: how many instances a target needs to hold the SLO at a given load, and what 1,000
requests cost at the SLO. Pure arithmetic on the capacity search's result."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(slots=True)
class CostInputs:
    safe_level: float | None  # the knee's safe value: the highest load that surely met the SLO (whole target)
    replicas: int = 1  # instances the target ran during the search
    for_level: float | None = None  # the load to size for (--for-concurrency / --for-rate)
    price_per_hour: float | None = None  # per instance
    price_per_1k_tokens: float | None = None
    rps_at_safe: float | None = None  # ok requests/s measured at the safe level
    tokens_per_request: float | None = None  # input + output tokens of an ok request at the safe level

    def __post_init__(self):
        if self.replicas < 1:
            raise ValueError(f"replicas must be >= 1, got {self.replicas}")
        for name in ("for_level", "price_per_hour", "price_per_1k_tokens"):
            v = getattr(self, name)
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name.replace('_', '-')} must be a number above 0, got {v!r}")


def cost_sum(c: CostInputs) -> dict:
    """per_instance = safe / replicas; instances = ceil(for / per_instance); cost per 1,000 requests at the SLO
    from the hourly price (the instances' cost over the requests they serve at the safe level) or from the token
    price (the tokens 1,000 such requests carry). Each figure is None, with a reason, when its inputs are missing."""
    out: dict = {"inputs": asdict(c), "per_instance": None, "instances": None, "cost_per_1k_requests": {},
                 "why_not": []}
    if not c.safe_level or c.safe_level <= 0:
        out["why_not"].append("no load level surely met the SLO: there is no safe capacity to divide")
        return out
    per = c.safe_level / c.replicas
    out["per_instance"] = per
    if c.for_level is not None:
        # a hair of float noise must not buy one more instance (100 / (300/3) = 1.0000000000000002)
        out["instances"] = max(1, math.ceil(round(c.for_level / per, 9)))
    if c.price_per_hour is not None:
        if c.rps_at_safe:
            out["cost_per_1k_requests"]["by_hour"] = c.price_per_hour * c.replicas / (c.rps_at_safe * 3600) * 1000
            if out["instances"] is not None:
                out["cost_per_hour_for_level"] = out["instances"] * c.price_per_hour
        else:
            out["why_not"].append("no throughput was measured at the safe level")
    if c.price_per_1k_tokens is not None:
        if c.tokens_per_request:
            out["cost_per_1k_requests"]["by_tokens"] = c.tokens_per_request * c.price_per_1k_tokens
        else:
            out["why_not"].append("no tokens were counted at the safe level")
    return out
