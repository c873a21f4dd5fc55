"""The plan commands' figures (Plotly, drawn into chaos.report.page's self-contained offline page): latency
against load with interval bars, the capacity search's SLO figure with its limit and knee, and targets side by
side."""

from __future__ import annotations

from html import escape

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..report.plots import PALETTE, QUANTILE_COLORS, style

Q = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


def _ms(v):
    return None if v is None else round(v * 1000, 2)


def _bars(estimates: list[dict]) -> tuple[list, list, list]:
    """Values and the distances to their interval's ends, in ms (no bar where there is no interval)."""
    ys, up, down = [], [], []
    for e in estimates:
        v = (e or {}).get("value")
        ys.append(_ms(v))
        has = v is not None and e.get("low") is not None and e.get("high") is not None
        up.append(_ms(e["high"] - v) if has else None)
        down.append(_ms(v - e["low"]) if has else None)
    return ys, up, down


def latency_vs_level(rows: list[dict], x_title: str) -> go.Figure:
    """TTFT and E2E P50/P95/P99 per level, each with its order-statistic interval as an error bar."""
    xs = [r["level"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("TTFT", "E2E"), horizontal_spacing=0.1)
    for col, key in ((1, "ttft"), (2, "e2e")):
        for name, q in Q.items():
            ys, up, down = _bars([r[key].get(name) for r in rows])
            fig.add_trace(go.Scatter(
                x=xs, y=ys, mode="lines+markers", name=name.upper(), legendgroup=name, showlegend=col == 1,
                line={"color": QUANTILE_COLORS[q]}, error_y={"type": "data", "symmetric": False, "array": up,
                                                              "arrayminus": down, "thickness": 1.2, "width": 4},
                customdata=[r[key][name].get("n") for r in rows],
                hovertemplate=f"{key.upper()} {name.upper()} %{{y:.0f}} ms at %{{x}}<br>n=%{{customdata}}"
                              f"<extra></extra>"), row=1, col=col)
        fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=col)
        fig.update_xaxes(title_text=x_title, type="log" if _wide(xs) else "linear", row=1, col=col)
    return style(fig, 420, "Latency against load: P50 / P95 / P99 with their 95% intervals")


def _wide(xs) -> bool:
    xs = [x for x in xs if x]
    return len(xs) > 1 and max(xs) / min(xs) >= 20


def capacity_figure(levels: list[dict], clause: dict, knee: dict, x_title: str) -> go.Figure:
    """One SLO clause's figure with its interval at each probed level (pooled probes), the limit, and the knee
    shaded from the highest sure pass to the lowest sure fail."""
    percent = clause["key"] == "errors"
    scale = 100.0 if percent else 1000.0
    unit = "%" if percent else "ms"
    colours = {"meets": "#1a7f37", "breaks": "#cf222e", "unclear": "#9a6700"}
    fig = go.Figure()
    for verdict, colour in colours.items():
        pts = [lv for lv in levels if lv["clauses"][clause["key"]]["verdict"] == verdict]
        if not pts:
            continue
        ys, up, down, text = [], [], [], []
        for lv in pts:
            e = lv["clauses"][clause["key"]]["estimate"]
            v = e.get("value")
            # a figure made of failed requests has no latency: draw it at the top of the axis
            v = v if v is not None else (clause["limit"] * 2 if e.get("value_failed") else None)
            ys.append(None if v is None else v * scale)
            hi = e.get("high") if e.get("high") is not None else (v if e.get("high_failed") else None)
            lo = e.get("low") if e.get("low") is not None else None
            up.append(None if v is None or hi is None else (hi - v) * scale)
            down.append(None if v is None or lo is None else (v - lo) * scale)
            text.append(f"{lv['probes']} probe(s), n={e.get('n')}")
        fig.add_trace(go.Scatter(
            x=[lv["level"] for lv in pts], y=ys, mode="markers", name=verdict, text=text,
            marker={"color": colour, "size": 9}, error_y={"type": "data", "symmetric": False, "array": up,
                                                          "arrayminus": down, "thickness": 1.5, "width": 5},
            hovertemplate=f"%{{x}}: %{{y:.3g}} {unit}<br>%{{text}}<extra>{verdict}</extra>"))
    fig.add_hline(y=clause["limit"] * scale, line={"color": "#cf222e", "dash": "dash"},
                  annotation_text=escape(f"limit {clause['clause']}"), annotation_position="top left")
    lo = knee.get("low") if knee.get("low") is not None else 0
    if knee.get("high") is not None:
        fig.add_vrect(x0=lo, x1=knee["high"], fillcolor="rgba(154,103,0,0.15)", line_width=0, layer="below",
                      annotation_text="knee", annotation_position="top left")
    fig.update_xaxes(title_text=x_title, type="log" if _wide([lv["level"] for lv in levels]) else "linear")
    fig.update_yaxes(title_text=f"{escape(clause['clause'].split('<')[0])} ({unit})", rangemode="tozero")
    return style(fig, 420, f"{escape(clause['clause'])}: the figure with its 95% interval at each load")


def targets_side_by_side(rows: list[dict], at: str) -> go.Figure:
    """P50/P95/P99 E2E of each target at one step, grouped, with intervals."""
    fig = go.Figure()
    names = [r["name"] for r in rows]
    for i, (name, q) in enumerate(Q.items()):
        ys, up, down = _bars([(r.get("at") or {}).get("e2e", {}).get(name) for r in rows])
        fig.add_trace(go.Bar(x=[escape(n) for n in names], y=ys, name=name.upper(),
                             marker_color=QUANTILE_COLORS.get(q, PALETTE[i]),
                             error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down}))
    fig.update_layout(barmode="group")
    fig.update_yaxes(title_text="E2E ms", rangemode="tozero")
    return style(fig, 400, f"E2E P50 / P95 / P99 at {escape(at)}, with 95% intervals")
