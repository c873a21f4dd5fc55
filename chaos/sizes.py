"""Token sizes as files and command lines write them: one size, a range LO-HI, or a list of sizes.

Its own module because the load (which draws request sizes from it) and the checks (latency_growth judges
per size) both read load.input_tokens, and neither may import the other. Standard library only.
"""

from __future__ import annotations


def token_range(v, name: str) -> tuple[int, ...]:
    """(lo, hi) for a size or a range; for a list of sizes, the sizes sorted, at least three entries.

    A pair is always a range: the load driver hands each Locust process list(spec.input_tokens), so [lo, hi]
    must read back as the range it came from. Two sizes are therefore kept as (a, b, b), which reads back as
    the same two sizes (sizes() drops the repeat); a pair written by hand is a range, which is why the schema
    takes a list of sizes only from three up (two sizes: the text form "1000,16000")."""
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    try:
        if isinstance(v, str) and "," in v:
            return _sizes([int(x) for x in v.split(",") if x.strip()], name)
        if isinstance(v, str) and "-" in v:
            lo, hi = v.split("-", 1)
            lo, hi = int(lo), int(hi)
            if 0 < lo <= hi:
                return lo, hi
        elif isinstance(v, str):
            return int(v), int(v)
        if isinstance(v, (list, tuple)) and len(v) == 2:
            return int(v[0]), int(v[1])
        if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return _sizes(list(v), name)
    except ValueError:
        pass
    raise ValueError(f"{name} must be an integer, a range like 200-500, or a list of sizes like "
                     f"1000,2000,4000 (each at least 1), got {v!r}")


def _sizes(values: list[int], name: str) -> tuple[int, ...]:
    got = sorted(set(values))
    if not got or got[0] < 1:
        raise ValueError(f"{name}: every size must be at least 1, got {values!r}")
    if len(got) == 1:
        return got[0], got[0]
    return tuple(got) if len(got) > 2 else (got[0], got[1], got[1])


def sizes(r: tuple[int, ...]) -> tuple[int, ...] | None:
    """The distinct sizes of a list of sizes made by token_range; None for a range (lo, hi)."""
    return tuple(sorted(set(r))) if len(r) > 2 else None


def size_list(v, name: str = "input_tokens") -> list[int] | None:
    """The sizes v lists when it is a list of sizes; None for one size, a range, or nothing readable."""
    try:
        return list(sizes(token_range(v, name)) or []) or None
    except ValueError:
        return None
