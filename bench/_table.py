"""Fixed-width tables for the benchmark scripts (no torch import, so every script can use it)."""

from __future__ import annotations


def fmt(c) -> str:
    if c is None:
        return "-"
    if isinstance(c, float):
        if c == 0:
            return "0"
        if abs(c) >= 100:
            return f"{c:,.0f}"
        if abs(c) >= 10:
            return f"{c:.1f}"
        return f"{c:.2f}"
    return str(c)


def print_table(headers: list[str], rows: list[list], align: str | None = None) -> None:
    """Plain fixed-width table; align is a string of 'l'/'r' per column (default: first l, rest r)."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    align = align or ("l" + "r" * (len(headers) - 1))

    def line(row):
        return "  ".join(c.ljust(w) if a == "l" else c.rjust(w) for c, w, a in zip(row, widths, align)).rstrip()

    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
