"""A game day's combined report: gameday.md, gameday.html (the trend of the key figures across game days, each with
its interval, a figure that moved beyond its noise flagged) and junit.xml (one test case an experiment)."""

from __future__ import annotations

import os
import time
import xml.etree.ElementTree as ET

from ..report.junit import xml_text
from ..report.sections import duration_text
from ..host import HostSummary
from .history import Move, Point, Rule, median_host, moved

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


def flags(series: dict, gameday_id: int | None, hosts: dict | None = None,
          rule: Rule | None = None) -> list[tuple[str, str, Move, HostSummary | None, HostSummary | None]]:
    """This game day's figures judged against the earlier game days' spread: (experiment, figure, the Move, this
    game day's host, the previous game day's host) for each that moved or was held for the host. The family of
    the Bonferroni correction is every figure of this game day with enough history."""
    hosts = hosts or {}
    rule = rule or Rule()
    mine = {key: pts for key, pts in sorted(series.items()) if pts and pts[-1].gameday_id == gameday_id}
    family = sum(sum(p.value is not None for p in pts[:-1][-rule.window:]) >= rule.min_history
                 for pts in mine.values())
    out = []
    for (exp, fig), pts in mine.items():
        earlier = [hosts.get((p.gameday_id, exp)) for p in pts[:-1][-rule.window:]]
        m = moved(pts, family, rule, hosts.get((gameday_id, exp)), median_host(earlier))
        if m.direction or m.held_for_host:
            prev = hosts.get((pts[-2].gameday_id, exp)) if len(pts) > 1 else None
            out.append((exp, fig, m, hosts.get((gameday_id, exp)), prev))
    return out


def history_needed(series: dict, gameday_id: int | None, rule: Rule | None = None) -> str | None:
    """'3 figure(s) have fewer than 5 earlier game days: nothing is called for them yet', or None."""
    rule = rule or Rule()
    short = [pts for pts in series.values() if pts and pts[-1].gameday_id == gameday_id
             and sum(p.value is not None for p in pts[:-1]) < rule.min_history]
    if not short:
        return None
    have = min(sum(p.value is not None for p in pts[:-1]) for pts in short)
    return (f"{len(short)} figure(s) have fewer than {rule.min_history} earlier game days (the fewest: {have}): "
            f"nothing is called for them until there are {rule.min_history}")


def _host(h: HostSummary | None) -> str:
    return h.text() if h else "not measured"


def moved_lines(series: dict, doc: dict, hosts: dict) -> list[str]:
    found = flags(series, doc.get("history_id"), hosts)
    lines = [f"- **{e}: {f}** {m.text}; host this game day: {_host(h)}; the previous: {_host(p)}"
             for e, f, m, h, p in found if m.direction]
    lines += [f"- {e}: {f}, {m.text}" for e, f, m, _, _ in found if m.held_for_host]
    need = history_needed(series, doc.get("history_id"))
    return (lines or ["None."]) + (["", f"Not judged yet: {need}."] if need else [])


def _rel(day: str, path: str) -> str:
    return os.path.relpath(path, day) if os.path.isabs(path) else path


def markdown(doc: dict, day: str, series: dict, hosts: dict | None = None) -> str:
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
    lines += ["", "## Moved beyond the spread of earlier game days", "",
              "A figure moved when it left what the run-to-run spread of the earlier game days allows (a prediction "
              "interval, corrected over this game day's figures) and beyond 10 % and a floor; a time is not called "
              "where this game day's host differed from theirs. docs/gameday.md.", ""]
    lines += moved_lines(series, doc, hosts or {})
    lines += ["", "## Key figures across game days", "",
              "| experiment | figure | game days | latest | previous |", "|---|---|---|---|---|"]
    for (exp, fig), pts in sorted(series.items()):
        lines.append(f"| {exp} | {fig} | {len(pts)} | {_point(pts[-1])} | "
                     f"{_point(pts[-2]) if len(pts) > 1 else '-'} |")
    lines.append("")
    return "\n".join(lines)


def trend_figure(exp: str, fig_name: str, pts: list[Point]):
    import plotly.graph_objects as go

    scale = 100 if pts[-1].unit == "fraction" else 1
    xs = [time.strftime("%Y-%m-%d %H:%M", time.gmtime(p.started)) for p in pts]
    ys = [None if p.value is None else p.value * scale for p in pts]
    err_hi = [None if p.high is None or p.value is None else (p.high - p.value) * scale for p in pts]
    err_lo = [None if p.low is None or p.value is None else (p.value - p.low) * scale for p in pts]
    fig = go.Figure(go.Scatter(x=xs, y=ys, mode="lines+markers", name=fig_name,
                               error_y={"type": "data", "symmetric": False, "array": err_hi, "arrayminus": err_lo}))
    unit = "%" if pts[-1].unit == "fraction" else "s"
    fig.update_layout(title=f"{exp}: {fig_name}", height=260, margin={"l": 50, "r": 20, "t": 40, "b": 40},
                      yaxis_title=unit, xaxis_type="category")
    return fig


def html_page(doc: dict, day: str, series: dict, gamedays: list[dict], hosts: dict | None = None) -> str:
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
    page.h2("Moved beyond the spread of earlier game days")
    page.add("<ul>" + "".join(f"<li>{esc(x.removeprefix('- ').replace('**', ''))}</li>"
                              for x in moved_lines(series, doc, hosts or {}) if x) + "</ul>")
    page.h2("Resilience score across game days")
    page.figure(go.Figure(go.Scatter(x=[time.strftime("%Y-%m-%d %H:%M", time.gmtime(g["started"])) for g in gamedays],
                                     y=[g["score"] for g in gamedays], mode="lines+markers"))
                .update_layout(height=240, margin={"l": 50, "r": 20, "t": 20, "b": 40}, xaxis_type="category",
                               yaxis={"range": [0, 105], "title": "score"}))
    page.h2("Key figures across game days")
    page.note("Each point with its 95 % interval where the figure has one (percentiles: order statistics; goodput "
              "and error budget: Wilson). Recovery times are one value a run.")
    for (exp, fig_name), pts in sorted(series.items()):
        page.figure(trend_figure(exp, fig_name, pts))
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
    with open(os.path.join(day, "gameday.md"), "w") as f:
        f.write(markdown(doc, day, series, hosts))
    with open(os.path.join(day, "junit.xml"), "w") as f:
        f.write(junit(doc))
    try:
        page = html_page(doc, day, series, gamedays, hosts)
    except ImportError:  # plotting unavailable: the Markdown says everything
        return
    with open(os.path.join(day, "gameday.html"), "w") as f:
        f.write(page)
