"""The plan commands' tables: one row a level (or a target), each figure with its interval and n, for the
terminal (plain text) and Markdown; the HTML page reuses the Markdown rows' cells."""

from __future__ import annotations

import json
import os

from ..report.sections import estimate

LEVEL_HEADERS = ["level", "reqs", "TTFT P50", "TTFT P95", "TTFT P99", "E2E P50", "E2E P95", "E2E P99",
                 "errors", "P99/P50", "req/s", "tok/s"]


def _ratio(e: dict | None) -> str:
    if not e or e.get("value") is None:
        return "-"
    if e.get("low") is None:
        return f"{e['value']:.2f} (n={e.get('n', 0)})"
    return f"{e['value']:.2f} [{e['low']:.2f}-{e['high']:.2f}]"


def _errors(f: dict) -> str:
    text = estimate(f["error_rate"], "%")
    if f.get("errors_by_class"):
        text += " (" + ", ".join(f"{k} {v}" for k, v in f["errors_by_class"].items()) + ")"
    return text


def level_cells(label: str, f: dict) -> list[str]:
    """The cells of one level's row: the seed's figures, each with its interval and n."""
    rps = f["rps"]
    return [label, str(f["requests"]),
            *(estimate(f["ttft"][k]) for k in ("p50", "p95", "p99")),
            *(estimate(f["e2e"][k]) for k in ("p50", "p95", "p99")),
            _errors(f), _ratio(f["jitter"]),
            "-" if rps.get("value") is None else f"{rps['value']:.1f} [{rps['low']:.1f}-{rps['high']:.1f}]",
            f"{f['output_tps']:.0f}"]


def markdown_table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in rows]
    return out


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell (the terminal's table)."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), "-" * (sum(widths) + 2 * (len(widths) - 1))] + [line(r) for r in rows])


def write_outputs(report: dict, out: str, stem: str, markdown, html, default=None) -> None:
    """A plan command's report in out: STEM.json (json.dump's default for what it cannot write), STEM.md, STEM.html."""
    with open(os.path.join(out, f"{stem}.json"), "w") as f:
        json.dump(report, f, indent=2, default=default)
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write(markdown(report))
    with open(os.path.join(out, f"{stem}.html"), "w") as f:
        f.write(html(report))
