"""A game day's combined report: gameday.md, gameday.html (the trend of the key figures across game days, each with
its interval, and the change points in each figure's history marked) and junit.xml (one test case an experiment)."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET

from ..report.junit import xml_text
from ..report.sections import duration_text
from ..host import HostSummary
from .changes import Change, all_changes, too_short
from .history import Point

STATUS_BADGE = {"passed": "passed", "failed": "failed", "inconclusive": "inconclusive", "aborted": "aborted",
                "interrupted": "interrupted", "setup error": "error"}


def _val(v, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "fraction":
        return f"{v * 100:.2f}%"
    return duration_text(v)


def _point(p: Point) -> str:
    s = _val(p.value, p.unit)
    return s + (f" [{_val(p.low, p.unit)}, {_val(p.high, p.unit)}]" if p.low is not None else "")


def _host(h: HostSummary | None) -> str:
    return h.text() if h else "not measured"


def change_lines(changes: list[Change], series: dict, doc: dict) -> list[str]:
    """Each change point, those this game day brought to light first; a time's between different hosts apart."""
    order = sorted(changes, key=lambda c: (not c.new, -c.at.started, c.experiment, c.figure))
    lines = [f"- {'**new** ' if c.new else ''}**{c.experiment}: {c.figure}** {c.text()}" for c in order if not c.held]
    lines += [f"- {c.experiment}: {c.figure}, {c.text()}; not called: the hosts either side differed ({c.held})"
              for c in order if c.held]
    need = too_short(series, doc.get("history_id"))
    return (lines or ["None."]) + (["", f"Not judged yet: {need}."] if need else [])


def _rel(day: str, path: str) -> str:
    return os.path.relpath(path, day) if os.path.isabs(path) else path


def markdown(doc: dict, day: str, series: dict, changes: list[Change]) -> str:
    lines = [f"# Game day {doc['suite']}: {doc['status']}, resilience score {doc.get('score')}", "",
             f"- started {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(doc['started']))}, "
             f"{doc['passed']} of {doc['experiments']} experiments passed",
             "- score: the mean over the experiments of 100 x checks passed / checks judged (0 for one that did not "
             "run to a report); docs/gameday.md"]
    if doc.get("stopped"):
        lines.append(f"- stopped early: {doc['stopped']}")
    if doc.get("not_run"):
        lines.append(f"- **not run ({doc['status']}):** {', '.join(doc['not_run'])}")
    lines += ["", "| experiment | verdict | score | time | host over its load | report |", "|---|---|---|---|---|---|"]
    for r in doc["runs"]:
        lines.append(f"| {r['name']} | {r.get('verdict') or r['status']} | {r['score']:.0f} | {r['seconds']:.0f} s | "
                     f"{_host(HostSummary.from_dict(r.get('host')))} | "
                     f"[{_rel(day, r['run_dir'])}/report.md]({_rel(day, r['run_dir'])}/report.md) |")
    for name in doc.get("not_run") or []:
        lines.append(f"| {name} | not run | 0 | - | - | - |")
    lines += ["", "## Change points in the key figures' history", "",
              "Where each figure's series stepped to a new level: E-divisive means with a t-test over its game days "
              "(p < 0.001) and beyond 10 % and a floor; a time is not called where the hosts either side differed. "
              "docs/gameday.md.", ""]
    lines += change_lines(changes, series, doc)
    lines += ["", "## Key figures across game days", "",
              "| experiment | figure | game days | latest | previous |", "|---|---|---|---|---|"]
    for (exp, fig), pts in sorted(series.items()):
        lines.append(f"| {exp} | {fig} | {len(pts)} | {_point(pts[-1])} | "
                     f"{_point(pts[-2]) if len(pts) > 1 else '-'} |")
    lines.append("")
    return "\n".join(lines)


def trend_figure(exp: str, fig_name: str, pts: list[Point], changes: list[Change] = ()):
    """A figure across game days, each point with its interval; each change point a dashed line at the first game
    day of the new level, labelled, and the level of each stretch between change points drawn under the points."""
    import plotly.graph_objects as go

    scale = 100 if pts[-1].unit == "fraction" else 1
    xs = [_x(p) for p in pts]
    ys = [None if p.value is None else p.value * scale for p in pts]
    err_hi = [None if p.high is None or p.value is None else (p.high - p.value) * scale for p in pts]
    err_lo = [None if p.low is None or p.value is None else (p.value - p.low) * scale for p in pts]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", name=fig_name,
                               error_y={"type": "data", "symmetric": False, "array": err_hi, "arrayminus": err_lo}))
    if changes:
        fig.add_trace(go.Scatter(x=xs, y=_levels(pts, changes, scale), mode="lines", name="level",
                                 line={"shape": "hv", "dash": "dot", "color": "grey"}))
    for c in changes:
        fig.add_vline(x=_x(c.at), line={"dash": "dash", "color": "grey" if c.held else "crimson"})
        fig.add_annotation(x=_x(c.at), y=1, yref="paper", showarrow=False, xanchor="left", yanchor="top",
                           text=f"{c.direction} {c.text().split(': ', 1)[1].split(';')[0]}"
                                + (" (hosts differed)" if c.held else ""), font={"size": 10})
    unit = "%" if pts[-1].unit == "fraction" else "s"
    fig.update_layout(title=f"{exp}: {fig_name}", height=260, margin={"l": 50, "r": 20, "t": 40, "b": 40},
                      yaxis_title=unit, xaxis_type="category", showlegend=False)
    return fig


def _x(p: Point) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(p.started))


def _levels(pts: list[Point], changes: list[Change], scale: float) -> list[float | None]:
    """Each game day's level: the mean of its stretch between change points, as the change points give them."""
    cuts = sorted(changes, key=lambda c: c.at.started)
    out, i = [], 0
    level = cuts[0].before if cuts else None
    for p in pts:
        while i < len(cuts) and p.gameday_id == cuts[i].at.gameday_id:
            level = cuts[i].after
            i += 1
        out.append(None if p.value is None or level is None else level * scale)
    return out


def html_page(doc: dict, day: str, series: dict, gamedays: list[dict], changes: list[Change]) -> str:
    import plotly.graph_objects as go

    from ..report.page import Page, badge, cell, esc

    page = Page(f"Game day {doc['suite']}")
    page.add(f"<h1>Game day {esc(doc['suite'])} {badge('passed' if doc['passed'] == doc['experiments'] else 'failed', doc['status'])}"
             f" resilience score {esc(doc.get('score'))}</h1>")
    page.note("Score: the mean over the experiments of 100 × checks passed / checks judged (0 for one that did not "
              "run to a report). docs/gameday.md.")
    rows = []
    for r in doc["runs"]:
        link = f'<td><a href="{esc(_rel(day, r["run_dir"]))}/report.html">{esc(r["name"])}</a></td>'
        rows.append([link, f"<td>{badge(STATUS_BADGE.get(r.get('verdict') or r['status'], 'error'), r.get('verdict') or r['status'])}</td>",
                     cell(f"{r['score']:.0f}"), cell(f"{r['seconds']:.0f} s")])
    rows += [[cell(n), f"<td>{badge('interrupted', 'not run')}</td>", cell("0"), cell("-")]
             for n in doc.get("not_run") or []]
    page.table(["experiment", "verdict", "score", "time"], rows, raw=True)
    page.h2("Change points in the key figures' history")
    page.add("<ul>" + "".join(f"<li>{esc(x.removeprefix('- ').replace('**', ''))}</li>"
                              for x in change_lines(changes, series, doc) if x) + "</ul>")
    page.h2("Resilience score across game days")
    page.figure(go.Figure(go.Scatter(x=[time.strftime("%Y-%m-%d %H:%M", time.gmtime(g["started"])) for g in gamedays],
                                     y=[g["score"] for g in gamedays], mode="lines+markers"))
                .update_layout(height=240, margin={"l": 50, "r": 20, "t": 20, "b": 40}, xaxis_type="category",
                               yaxis={"range": [0, 105], "title": "score"}))
    page.h2("Key figures across game days")
    page.note("Each point with its 95 % interval where the figure has one (percentiles: order statistics; goodput "
              "and error budget: Wilson). Recovery times are one value a run. A dashed line marks a change point: "
              "the first game day of a new level (grey: the hosts either side differed); the dotted line is each "
              "level.")
    for (exp, fig_name), pts in sorted(series.items()):
        page.figure(trend_figure(exp, fig_name, pts, [c for c in changes if (c.experiment, c.figure) == (exp, fig_name)]))
    return page.render()


def junit(doc: dict) -> str:
    root = ET.Element("testsuites")
    runs = doc["runs"]
    suite = ET.SubElement(root, "testsuite", name=xml_text(f"game day: {doc['suite']}"),
                          tests=str(len(runs) + len(doc.get("not_run") or [])),
                          failures=str(sum(r["exit_code"] not in (0, 4) for r in runs) + len(doc.get("not_run") or [])),
                          skipped=str(sum(r["exit_code"] == 4 for r in runs)))
    for r in runs:
        case = ET.SubElement(suite, "testcase", classname="gameday", name=xml_text(r["name"]), time=f"{r['seconds']:.1f}")
        if r["exit_code"] == 4:
            ET.SubElement(case, "skipped", message="inconclusive: a check could not be judged (see its report)")
        elif r["exit_code"] != 0:
            ET.SubElement(case, "failure", message=xml_text(f"{r.get('verdict') or r['status']}: {r['run_dir']}/report.md"
                                                         + (f" ({r['error']})" if r.get("error") else "")))
    for name in doc.get("not_run") or []:
        case = ET.SubElement(suite, "testcase", classname="gameday", name=xml_text(name), time="0")
        ET.SubElement(case, "failure", message=xml_text(f"not run: the game day was {doc['status']}"))
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_reports(doc: dict, day: str, series: dict, gamedays: list[dict], hosts: dict | None = None) -> None:
    changes = all_changes(series, doc.get("history_id"), hosts)
    with open(os.path.join(day, "gameday.md"), "w") as f:
        f.write(markdown(doc, day, series, changes))
    with open(os.path.join(day, "junit.xml"), "w") as f:
        f.write(junit(doc))
    try:
        page = html_page(doc, day, series, gamedays, changes)
    except ImportError:  # plotting unavailable: the Markdown says everything
        return
    with open(os.path.join(day, "gameday.html"), "w") as f:
        f.write(page)
