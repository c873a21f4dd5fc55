"""The page shell of report.html and the comparison page: one self-contained HTML file that opens offline.

plotly.js is inlined once in the head; nothing is fetched, ever: a Content-Security-Policy forbids every request
(no connect, no remote script, font or image), so a figure option that would reach out (topojson, MathJax, the
cloud export link) fails closed instead of leaking that someone opened the report.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field

import plotly.io as pio
from plotly.offline import get_plotlyjs

# Every external hook of plotly.js off: no logo link, no "edit in chart studio", no cloud export, no MathJax, no
# topojson fetch. The PNG download of the mode bar stays: it renders locally.
PLOT_CONFIG = {"displaylogo": False, "showLink": False, "showEditInChartStudio": False, "showSendToCloud": False,
               "plotlyServerURL": "", "topojsonURL": "", "typesetMath": False, "responsive": True,
               "toImageButtonOptions": {"format": "png", "scale": 2}}
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
       "font-src data:; connect-src 'none'; base-uri 'none'; form-action 'none'")
VERDICT_COLORS = {"passed": "#1a7f37", "failed": "#cf222e", "inconclusive": "#9a6700", "aborted": "#bc4c00",
                  "interrupted": "#6e7781", "error": "#8250df", "better": "#1a7f37", "worse": "#cf222e"}

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 24px 32px 64px; color: var(--fg); background: #fff; font: 14px/1.45 system-ui,
  -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1280px; margin: 0 auto; }
h1 { font-size: 24px; margin: 0 0 6px; display: flex; align-items: center; gap: 12px; flex-wrap: wrap; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 18px 0 8px; }
.badge { color: #fff; border-radius: 6px; padding: 2px 10px; font-size: 15px; font-weight: 600;
  text-transform: uppercase; letter-spacing: .03em; }
.meta { color: var(--muted); margin: 4px 0; }
.meta b { color: var(--fg); font-weight: 600; }
.reason { margin: 10px 0; padding: 8px 12px; border-left: 4px solid; background: var(--bg); font-weight: 600; }
.desc { margin: 8px 0; white-space: pre-line; }
.note { color: var(--muted); font-style: italic; margin: 8px 0; }
table { border-collapse: collapse; width: 100%; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.ev { color: var(--muted); font-size: 12px; }
td.name { min-width: 13em; }
.wide { overflow-x: auto; }
.nowrap { white-space: nowrap; }
.pass { color: #1a7f37; font-weight: 600; }
.fail { color: #cf222e; font-weight: 700; }
.skip { color: #9a6700; font-weight: 600; }
.small { color: var(--muted); font-size: 12px; }
.chaos-figure { width: 100%; margin: 8px 0 16px; border: 1px solid var(--line); border-radius: 6px; }
ul { margin: 6px 0; padding-left: 22px; }
code { background: var(--bg); padding: 0 4px; border-radius: 4px; font-size: 12px; }
footer { margin-top: 40px; color: var(--muted); font-size: 12px; }
"""


def esc(value) -> str:
    """Any value as escaped HTML text ("" for None)."""
    return "" if value is None else html.escape(str(value), quote=True)


@dataclass(slots=True)
class Page:
    """A page under construction: HTML parts in order, with figures placed among them."""

    title: str
    parts: list[str] = field(default_factory=list)
    figures: int = 0

    def add(self, raw_html: str) -> None:
        self.parts.append(raw_html)

    def h2(self, text: str, anchor: str | None = None) -> None:
        self.parts.append(f'<h2 id="{esc(anchor)}">{esc(text)}</h2>' if anchor else f"<h2>{esc(text)}</h2>")

    def note(self, text: str) -> None:
        self.parts.append(f'<p class="note">{esc(text)}</p>')

    def table(self, headers: list[str], rows: list[list[str]], raw: bool = False) -> None:
        """rows of cells: escaped text, or (raw) HTML already escaped by the caller, e.g. from cell()."""
        head = "".join(f"<th>{esc(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(c if raw else f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
        self.parts.append(f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
                          "</div>")

    def figure(self, fig) -> None:
        """A Plotly figure: a div and the script that draws it (its JSON escapes '<', so no text in it can
        close the script)."""
        self.figures += 1
        div = f"fig-{self.figures}"
        spec = pio.to_json(fig, validate=False)
        self.parts.append(f'<div class="chaos-figure" id="{div}"></div>\n<script>(function () {{ var f = {spec};'
                          f' Plotly.newPlot("{div}", f.data, f.layout, CHAOS_PLOT_CONFIG); }})();</script>')

    def render(self, mask=None) -> str:
        """The whole page. mask scrubs the page's own text (not plotly.js, which holds nothing of the run)."""
        body = "\n".join(self.parts)
        title = esc(self.title)
        if mask is not None:
            body, title = mask(body), mask(title)
        return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
                f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
                f'<meta name="viewport" content="width=device-width, initial-scale=1">\n'
                f'<meta name="chaos-figures" content="{self.figures}">\n'
                f"<title>{title}</title>\n<style>{CSS}</style>\n"
                f"<script>window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>\n"
                f"<script>{get_plotlyjs()}</script>\n"
                f"<script>var CHAOS_PLOT_CONFIG = {json.dumps(PLOT_CONFIG)};</script>\n"
                f"</head>\n<body>\n<main>\n{body}\n"
                f"<footer>llm-chaos report: one self-contained file (plotly.js inlined), opened offline. Drag to "
                f"zoom, double-click to reset, hover for values.</footer>\n</main>\n</body>\n</html>\n")


def cell(text, cls: str | None = None, title: str | None = None) -> str:
    """One escaped <td>, with an optional class and tooltip."""
    attrs = (f' class="{cls}"' if cls else "") + (f' title="{esc(title)}"' if title else "")
    return f"<td{attrs}>{esc(text)}</td>"


def badge(verdict: str | None, text: str | None = None) -> str:
    """A verdict in its colour (text: other words in the same colour)."""
    v = (verdict or "unknown").lower()
    return f'<span class="badge" style="background:{VERDICT_COLORS.get(v, "#6e7781")}">{esc(text or v)}</span>'
