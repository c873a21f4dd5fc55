"""The figures of report.html, as Plotly figures built from binned columns (chaos.report.series).

Every builder returns a go.Figure that draws a bounded number of points whatever the run's size: per-bin lines
(at most series.MAX_BINS points a trace) and capped samples of single requests.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import series as binned

POINTS_CAP = 4000  # single requests drawn per panel (a sample beyond this): SVG, not WebGL, which a
# headless or locked-down browser may lack
FAILED_CAP = 2000
EVENTS_CAP = 150
QUANTILE_COLORS = {0.50: "#1f77b4", 0.95: "#ff7f0e", 0.99: "#d62728"}
OUTCOME_COLORS = {"ok": "#2ca02c", "http_error": "#d62728", "timeout": "#ff7f0e", "connect_error": "#9467bd",
                  "reset": "#8c564b", "stream_error": "#e377c2", "bad_output": "#bcbd22", "cancelled": "#7f7f7f"}
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
FAULT_FILL = "rgba(214, 39, 40, 0.10)"
X_TITLE = "seconds since the load started"


@dataclass(slots=True)
class Window:
    """A fault's window on the x axis (seconds since the load started)."""

    name: str
    x0: float
    x1: float
    open_ended: bool = False  # never reverted: shaded to the end


@dataclass(slots=True)
class Event:
    """A journal event on the x axis, with its hover text."""

    x: float
    name: str
    detail: str


def style(fig: go.Figure, height: int, title: str) -> go.Figure:
    """The page's look, without Plotly's default template (6 KB of JSON a figure, and not this page's style)."""
    fig.update_layout(
        template="none", height=height, title={"text": title, "x": 0.01, "font": {"size": 15}},
        font={"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12, "color": "#222"},
        margin={"l": 70, "r": 20, "t": 70, "b": 50}, paper_bgcolor="white", plot_bgcolor="white",
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 1, "xanchor": "right"},
        hoverlabel={"namelength": -1})
    fig.update_xaxes(showgrid=True, gridcolor="#eee", zeroline=False, linecolor="#999", showline=True)
    fig.update_yaxes(showgrid=True, gridcolor="#eee", zeroline=False, linecolor="#999", showline=True)
    return fig


def _subplot_refs(fig: go.Figure) -> list[tuple[str, str]]:
    """(xref, yref) of each cell of a make_subplots figure that has a trace, row by row: ("x", "y"), ("x2", "y2"),
    ...; an empty cell gets no shape, as with add_vrect's default (exclude_empty_subplots)."""
    used = {(t.xaxis or "x", t.yaxis or "y") for t in fig.data}
    cells = [(xa.plotly_name.replace("axis", ""), xa.anchor) for xa in fig.select_xaxes()]
    return [c for c in cells if c in used]


def _add_shapes(fig: go.Figure, shapes: list[dict]) -> None:
    """All at once: add_vrect(row="all") and add_vline(row=N) resolve the grid again on every call, ~50 ms each
    on a figure of many panels, which made the page the slowest part of writing a run's reports."""
    if shapes:
        fig.layout.shapes = fig.layout.shapes + tuple(shapes)


def _window_shapes(fig: go.Figure, windows: list[Window]) -> list[dict]:
    refs = _subplot_refs(fig)
    return [{"type": "rect", "xref": x, "yref": f"{y} domain", "x0": w.x0, "x1": w.x1, "y0": 0, "y1": 1,
             "fillcolor": FAULT_FILL, "line": {"width": 0}, "layer": "below"}
            for w in windows for x, y in refs]


def _shade(fig: go.Figure, windows: list[Window], label_yref: str | None = "y domain") -> None:
    """Each fault window shaded across every subplot; its name written once, inside the top of the subplot whose
    y axis is label_yref's (a subplot title sits above the plot area, where a label would overwrite it)."""
    _add_shapes(fig, _window_shapes(fig, windows))
    for w in windows:
        if label_yref is not None:
            fig.add_annotation(x=(w.x0 + w.x1) / 2, xref="x", y=1, yref=label_yref, yanchor="top", showarrow=False,
                               text=escape(w.name) + (" (not reverted)" if w.open_ended else ""),
                               font={"size": 10, "color": "#b22"}, bgcolor="rgba(255,255,255,0.6)")


def _levels(xs: list[float], near: float, levels: int = 3) -> list[int]:
    """A height for each event's label: events closer than near to the one before step up a level, so their
    labels do not print over each other."""
    out, prev = [], None
    for x in xs:
        out.append((out[-1] + 1) % levels if prev is not None and x - prev < near else 0)
        prev = x
    return out


def _mark(fig: go.Figure, events: list[Event], rows: int, lo: float, hi: float, strip_row: int = 1) -> None:
    """Journal events: a dotted line through every subplot, and a marker on the event strip (strip_row) whose
    hover says what happened. Labels read to the right of their marker, to the left near the axis' end."""
    events = sorted(events, key=lambda e: e.x)[:EVENTS_CAP]
    if not events:
        return
    below = [(f"x{row}", f"y{row}") for row in range(2, rows + 1)]  # one column: row N's axes are xN, yN
    refs = [c for c in _subplot_refs(fig) if c in below]
    _add_shapes(fig, [{"type": "line", "xref": x, "yref": f"{y} domain", "x0": e.x, "x1": e.x, "y0": 0, "y1": 1,
                       "line": {"color": "#555", "width": 1, "dash": "dot"}}
                      for e in events for x, y in refs])
    fig.add_trace(go.Scatter(
        x=[e.x for e in events], y=_levels([e.x for e in events], (hi - lo) * 0.08), mode="markers+text",
        name="journal events", text=[escape(e.name) for e in events],
        textposition=["middle left" if e.x > lo + 0.85 * (hi - lo) else "middle right" for e in events],
        textfont={"size": 9, "color": "#444"}, marker={"symbol": "triangle-down", "size": 9, "color": "#444"},
        hovertext=[f"{e.x:+.2f}s {escape(e.name)}<br>{e.detail}" if e.detail else f"{e.x:+.2f}s {escape(e.name)}"
                   for e in events], hoverinfo="text", showlegend=False, cliponaxis=False), row=strip_row, col=1)
    fig.update_yaxes(visible=False, range=[-0.6, 2.6], fixedrange=True, showgrid=False, row=strip_row, col=1)


def _ms(a: np.ndarray) -> np.ndarray:
    return np.round(a * 1000, 2)


def _log_wanted(*arrays) -> bool:
    """Log scale when the values drawn span more than 50x: a timeout's 30 s beside 50 ms TTFTs flattens the rest."""
    vals = np.concatenate([a[~np.isnan(a)] for a in arrays]) if arrays else np.empty(0)
    vals = vals[vals > 0]
    return len(vals) > 1 and vals.max() / vals.min() > 50


def latency_timeline(cols: binned.Columns, bins: binned.Bins, windows: list[Window], events: list[Event]) -> go.Figure:
    """E2E and TTFT P50/P95/P99 per time bin (gaps where a bin has too few requests), over a sample of the
    single requests, with the failed ones marked at how long they took to fail."""
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, row_heights=[0.1, 0.5, 0.4], vertical_spacing=0.04,
                        subplot_titles=("", "E2E latency (ok requests, by send time)", "TTFT (ok requests)"))
    centers = bins.centers
    for row, (what, values) in ((2, ("E2E", cols.e2e)), (3, ("TTFT", cols.ttft))):
        has = np.flatnonzero(~np.isnan(values))
        pick = has[binned.sample(len(has), POINTS_CAP, seed=row)]
        fig.add_trace(go.Scatter(
            x=np.round(cols.sent[pick], 3), y=_ms(values[pick]), mode="markers", name="single requests"
            + (" (sampled)" if len(pick) < len(has) else ""), legendgroup="points", showlegend=row == 2,
            marker={"size": 3, "color": "rgba(120,120,120,0.35)"},
            hovertemplate=f"{what} %{{y:.0f}} ms<br>sent at %{{x:.2f}}s<extra></extra>"), row=row, col=1)
        qs, widths, counts = binned.rolling_quantiles(bins, cols.sent, values)
        if row == 2:
            said = widths  # the legend's and the title's: E2E's (TTFT's count only the requests with a token)
        for q, vals in qs.items():
            fig.add_trace(go.Scatter(
                x=centers, y=_ms(vals), mode="lines+markers", name=f"P{round(q * 100)} ({widths[q]:g} s window)",
                legendgroup=str(q), showlegend=row == 2, line={"color": QUANTILE_COLORS[q], "width": 2},
                marker={"size": 4}, customdata=counts, connectgaps=False,
                hovertemplate=f"{what} P{round(q * 100)} %{{y:.0f}} ms<br>over the {widths[q]:g} s around "
                              f"%{{x:.1f}}s (%{{customdata}} requests in its bin)<extra></extra>"), row=row, col=1)
        log = _log_wanted(values)
        fig.update_yaxes(title_text=f"{what} ms", type="log" if log else "linear", row=row, col=1)
    failed = np.flatnonzero(cols.error & ~np.isnan(cols.spent))
    if len(failed):
        pick = failed[binned.sample(len(failed), FAILED_CAP, seed=7)]
        names = np.asarray(cols.classes, dtype=object)[cols.outcome[pick]]
        fig.add_trace(go.Scatter(
            x=np.round(cols.sent[pick], 3), y=_ms(cols.spent[pick]), mode="markers", name="failed (time to fail)",
            marker={"symbol": "x", "size": 6, "color": "#d62728"}, text=names,
            hovertemplate="%{text} after %{y:.0f} ms<br>sent at %{x:.2f}s<extra></extra>"), row=2, col=1)
    _shade(fig, windows, "y2 domain")
    _mark(fig, events, 3, float(bins.edges[0]), float(bins.edges[-1]))
    fig.update_xaxes(title_text=f"{X_TITLE} (bins of {bins.width:g} s)", row=3, col=1)
    windows_s = " / ".join(f"{w:g}" for w in said.values())
    return style(fig, 640, f"Latency over time: P50 / P95 / P99 over rolling windows of {windows_s} s (each "
                            f"wide enough for {binned.min_count(0.95)} requests for a P95, {binned.min_count(0.99)} for a "
                            f"P99 at the run's rate; fewer is a gap)")


def throughput_timeline(cols: binned.Columns, bins: binned.Bins, windows: list[Window]) -> go.Figure:
    """Requests ending per second by outcome (stacked), the error rate, and (when any) requests per second by
    the fault proxy's label."""
    labels, by_label = binned.label_counts(bins, cols)
    rows = 3 if labels else 2
    titles = ("requests ending per second, by outcome", "error rate (errors / requests ended, cancelled not "
              "counted)") + (("requests per second that met each fault (rule; effect)",) if labels else ())
    fig = make_subplots(rows=rows, cols=1, shared_xaxes=True, vertical_spacing=0.08, subplot_titles=titles,
                        row_heights=[0.45, 0.25, 0.3][:rows] if labels else [0.6, 0.4])
    x, w = bins.centers, bins.width
    by_class = binned.binned_counts(bins, cols.done, cols.outcome, len(cols.classes))
    for i, name in enumerate(cols.classes):
        if not by_class[:, i].any():
            continue
        fig.add_trace(go.Bar(x=x, y=by_class[:, i] / w, width=w, name=name, marker_line_width=0,
                             marker_color=OUTCOME_COLORS.get(name, "#17becf"), customdata=by_class[:, i],
                             hovertemplate=f"{name}: %{{y:.1f}}/s (%{{customdata}} requests)<br>"
                                           f"bin at %{{x:.1f}}s<extra></extra>"), row=1, col=1)
    rate = binned.error_rate(bins, cols)
    fig.add_trace(go.Scatter(x=x, y=np.round(rate * 100, 3), mode="lines+markers", name="error rate",
                             line={"color": "#d62728"}, marker={"size": 4}, connectgaps=False, showlegend=False,
                             hovertemplate="%{y:.2f}% errors<br>bin at %{x:.1f}s<extra></extra>"), row=2, col=1)
    for i, name in enumerate(map(escape, labels)):
        fig.add_trace(go.Scatter(x=x, y=by_label[:, i] / w, mode="lines", name=name, line_shape="hvh",
                                 line={"color": PALETTE[i % len(PALETTE)]}, legendgroup="labels",
                                 hovertemplate=f"{name}: %{{y:.1f}}/s<br>bin at %{{x:.1f}}s<extra></extra>"),
                      row=3, col=1)
    fig.update_layout(barmode="stack", bargap=0)
    fig.update_yaxes(title_text="req/s", row=1, col=1)
    fig.update_yaxes(title_text="%", rangemode="tozero", row=2, col=1)
    if labels:
        fig.update_yaxes(title_text="req/s", row=3, col=1)
    fig.update_xaxes(title_text=X_TITLE, row=rows, col=1)
    _shade(fig, windows)
    style(fig, 560 if labels else 460, "Throughput and errors over time (by end time)")
    # many entries: a column at the right, where a wrapped row would run into the mode bar
    fig.update_layout(legend={"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1, "yanchor": "top"})
    return fig


def ttft_histogram(cols: binned.Columns) -> go.Figure:
    """The TTFT distribution of ok requests, log-x when it spans more than 20x, with the run's P50/P95/P99."""
    edges, counts, log = binned.histogram(cols.ttft)
    ms = edges * 1000
    fig = go.Figure(go.Scatter(
        x=ms, y=np.append(counts, counts[-1]), mode="lines", line_shape="hv", fill="tozeroy", name="requests",
        line={"color": "#1f77b4"}, fillcolor="rgba(31,119,180,0.3)", customdata=np.append(ms[1:], ms[-1]),
        hovertemplate="%{x:.0f}-%{customdata:.0f} ms: %{y} requests<extra></extra>"))
    v = cols.ttft[~np.isnan(cols.ttft)]
    for q in binned.QUANTILES:
        value = float(np.percentile(v, q * 100)) * 1000
        # on a log axis plotly.js places a shape at the value itself, an annotation at the value's log10
        fig.add_shape(type="line", x0=value, x1=value, y0=0, y1=1, yref="paper",
                      line={"color": QUANTILE_COLORS[q], "dash": "dash", "width": 1.5})
        fig.add_annotation(x=float(np.log10(value)) if log and value > 0 else value, y=1, yref="paper",
                           yanchor="bottom", showarrow=False, text=f"P{round(q * 100)} {value:.0f} ms",
                           font={"size": 10, "color": QUANTILE_COLORS[q]})
    fig.update_xaxes(type="log" if log else "linear", title_text="TTFT ms" + (" (log scale)" if log else ""))
    fig.update_yaxes(title_text="requests per bin", rangemode="tozero")
    return style(fig, 360, f"TTFT distribution ({len(v)} ok requests)")


def step_percentiles(steps: list[dict], xs: list, x_title: str, categorical: bool) -> go.Figure:
    """Per-step TTFT and E2E P50/P95/P99 against the step's concurrency (or rate, or its order)."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "E2E"), horizontal_spacing=0.1)
    for col, key in ((1, "ttft"), (2, "e2e")):
        for q in binned.QUANTILES:
            name = f"p{round(q * 100)}"
            ys = [None if (s.get(key) or {}).get(name) is None else round(s[key][name] * 1000, 2) for s in steps]
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=name.upper(), legendgroup=name, showlegend=col == 1,
                line={"color": QUANTILE_COLORS[q]}, text=[s.get("step") for s in steps],
                hovertemplate=f"{key.upper()} {name.upper()} %{{y:.0f}} ms<br>%{{text}}<extra></extra>"),
                row=1, col=col)
        fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=col)
        fig.update_xaxes(title_text=x_title, type="category" if categorical else "linear", row=1, col=col)
    return style(fig, 380, "Latency per step")


def server_metrics(series: dict, t0: float, windows: list[Window], max_points: int = 1500,
                   max_keys: int = 24, title: str = "Server metrics over time") -> go.Figure:
    """Small multiples: one panel per metric key, one line per instance (a colour per instance, the same in
    every panel)."""
    keys = list(series)[:max_keys]  # in the caller's order: the most telling first
    instances = sorted({i for k in keys for i in series[k]})
    color = {inst: PALETTE[i % len(PALETTE)] for i, inst in enumerate(instances)}
    cols = 2 if len(keys) > 1 else 1
    rows = -(-len(keys) // cols)
    height = 130 + 180 * rows
    fig = make_subplots(rows=rows, cols=cols, shared_xaxes=True, subplot_titles=[escape(k) for k in keys],
                        vertical_spacing=55 / height, horizontal_spacing=0.08)
    shown = set()
    for n, key in enumerate(keys):
        row, col = n // cols + 1, n % cols + 1
        for inst, points in sorted(series[key].items()):
            a = np.asarray(points, dtype=float).reshape(-1, 2) if len(points) else np.empty((0, 2))
            a = a[binned.sample(len(a), max_points)] if len(a) > max_points else a
            a = _gaps(a)
            fig.add_trace(go.Scatter(
                x=np.round(a[:, 0] - t0, 3), y=a[:, 1], mode="lines", name=escape(inst), legendgroup=inst,
                showlegend=inst not in shown, line={"color": color[inst], "width": 1.5},
                hovertemplate=f"{escape(inst)} {escape(key)} %{{y:.4g}}<br>%{{x:.1f}}s<extra></extra>"),
                row=row, col=col)
            shown.add(inst)
    _add_shapes(fig, _window_shapes(fig, windows))
    for col in range(1, cols + 1):
        fig.update_xaxes(title_text=X_TITLE, row=rows, col=col)
    fig.update_annotations(font_size=11)
    style(fig, height, title)
    fig.update_layout(legend={"orientation": "v", "x": 1.01, "xanchor": "left", "y": 1, "yanchor": "top"})
    return fig


def _gaps(a: np.ndarray) -> np.ndarray:
    """(t, value) points with a NaN row wherever scrapes stopped for over 2.5x their usual spacing (an instance
    down, or its /metrics failing), so the line breaks there instead of bridging the outage."""
    if len(a) < 3:
        return a
    dt = np.diff(a[:, 0])
    cut = np.flatnonzero(dt > 2.5 * np.median(dt)) + 1
    return np.insert(a, cut, [np.nan, np.nan], axis=0) if len(cut) else a


def ecdf(latency: dict, names: dict) -> go.Figure:
    """Two runs' E2E and TTFT distributions overlaid as ECDFs (latency: {"a": {"e2e": sample|histogram,
    "ttft": ...}, "b": ...})."""
    kinds = [k for k in ("e2e", "ttft") if any(k in (latency.get(s) or {}) for s in ("a", "b"))]
    fig = make_subplots(rows=1, cols=max(1, len(kinds)), subplot_titles=[k.upper() for k in kinds],
                        horizontal_spacing=0.1)
    for col, kind in enumerate(kinds, start=1):
        for side, colour in (("a", "#1f77b4"), ("b", "#d62728")):
            values = (latency.get(side) or {}).get(kind)
            x, f = binned.ecdf(values)
            if not len(x):
                continue
            fig.add_trace(go.Scatter(  # a sample's ECDF is a staircase; a histogram's is known only at its edges
                x=_ms(x), y=np.round(f, 5), mode="lines", line_shape="linear" if isinstance(values, dict) else "hv",
                name=f"{side.upper()}: {escape(str(names.get(side, side)))}",
                legendgroup=side, showlegend=col == 1, line={"color": colour},
                hovertemplate=f"{side.upper()}: %{{y:.1%}} of requests at or under %{{x:.0f}} ms<extra></extra>"),
                row=1, col=col)
        fig.update_xaxes(title_text=f"{kind.upper()} ms", row=1, col=col)
        fig.update_yaxes(title_text="fraction of requests", range=[0, 1.02], tickformat=".0%", row=1, col=col)
    style(fig, 430, "Latency distributions (ECDF)")
    fig.update_layout(legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": -0.22, "yanchor": "top"},
                      margin={"b": 90})  # under the axes: run names are long, and the panels have titles
    return fig
