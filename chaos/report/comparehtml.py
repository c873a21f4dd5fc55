"""comparison.html: two runs compared (`chaos report --compare A B`, chaos/report/comparison.py builds the dict),
in report.html's page shell: who the runs are, a verdict per figure with its estimates, the recovery figures side
by side, and the two runs' E2E and TTFT distributions overlaid as ECDFs.
"""

from __future__ import annotations

from ..host import HostSummary
from . import plots
from .page import Page, badge, cell, esc
from .tables import estimate_text, fmt_s

# a figure's "kind" (chaos/verify/compare.py) -> the unit its estimates are in
KIND_UNITS = {"latency": "s", "proportion": "ratio", "rate": "rate"}
VERDICT_CLASSES = {"better": "pass", "worse": "fail", "not judged": "skip"}


def _unit(f: dict) -> str:
    if f.get("kind") in KIND_UNITS:
        return KIND_UNITS[f["kind"]]
    name = str(f.get("figure") or "")  # a dict from before "kind": guessed from the name
    return "ratio" if "error" in name else "rate" if "throughput" in name else "x" if "jitter" in name else "s"


def _p(f: dict) -> str:
    p = f.get("p_value")
    if p is None:
        return "-"
    return f"{p:.3g}" + (f" (Holm\u00a0{f['p_holm']:.3g})" if f.get("p_holm") is not None else "")


def _figure_row(f: dict) -> list[str]:
    unit, verdict = _unit(f), f.get("verdict") or ""
    if f.get("kind") == "distribution":  # a test of the whole distribution: no estimates, its effect size
        middle = [cell(""), cell(""), cell(f"P(B > A) = {f['effect']:.2f}" if f.get("effect") is not None else "-",
                                            "num"), cell("")]
    else:
        middle = [cell(estimate_text(f.get(k), unit), "num") for k in ("a", "b", "difference")] + [
            cell(estimate_text(f.get("ratio"), "x"), "num")]
    cls = " ".join(c for c in (VERDICT_CLASSES.get(verdict), "nowrap") if c)
    return [cell(f.get("figure"), "name")] + middle + [cell(_p(f), "num"),
                                                       cell(verdict, cls, f.get("why") or f.get("summary"))]


def _side(page: Page, side: str, d: dict) -> None:
    extra = []
    if d.get("requests") is not None:
        extra.append(f"{d['requests']} requests")
    if d.get("error_rate"):
        extra.append(f"errors {estimate_text(d['error_rate'], 'ratio')}")
    if d.get("throughput"):
        extra.append(f"ok throughput {estimate_text(d['throughput'], 'rate')}")
    page.add(f'<p class="meta">{side.upper()}: <b>{esc(d.get("name"))}</b> {badge(d.get("verdict"))} '
             f'<code>{esc(d.get("dir"))}</code>' + (f" &middot; {esc('; '.join(extra))}" if extra else "") + "</p>")


def _host(page: Page, host: dict) -> None:
    """Both runs' hosts side by side, and the warning where they differed."""
    if not host:
        return
    if host.get("differs"):
        page.add('<p class="meta"><b>Warning: the host differed between the runs</b> (others\' CPU apart by more '
                 f'than {esc(host.get("bound"))} cores): '
                 + esc("; ".join(f"{k}: {v}" for k, v in host["differs"].items()))
                 + ". A latency change there may be the host's: it is not called.</p>")
    if not host.get("measured"):
        page.note("The host was not measured in one of the runs (recorded before llm-chaos measured it).")
        return

    def text(d):
        h = HostSummary.from_dict(d)
        return h.text() if h else "not measured"

    rows = [["whole load", text(host.get("a")), text(host.get("b"))]]
    rows += [[name, text(d.get("a")), text(d.get("b"))] for name, d in (host.get("phases") or {}).items()]
    page.h2("The host, side by side", "host")
    page.note("Others: CPU used by processes outside the run, in cores (the guard's figure); run: the run's own; "
              "load average; CPU pressure: share of time some task waited for a CPU.")
    page.table(["span", "A", "B"], rows)


def _recovery(page: Page, pairs: list[dict]) -> None:
    page.h2("Recovery, side by side", "recovery")
    page.note("One value a run: no test (repeat runs to judge these).")
    s = lambda v: "never" if v is None else fmt_s(v)  # noqa: E731
    rows = [[p.get("fault")] + [f"{s((p.get(k) or {}).get('a'))} / {s((p.get(k) or {}).get('b'))}"
                                for k in ("time_to_detect", "time_to_failover", "time_to_restore")]
            + [f"{(p.get('failed_requests') or {}).get('a')} / {(p.get('failed_requests') or {}).get('b')}"]
            for p in pairs]
    page.table(["fault", "detect A / B", "failover A / B", "restore A / B", "failed requests A / B"], rows)


def comparison_html(comp: dict, mask=None) -> str:
    """The page for two runs compared. comp: {"a"/"b": {"dir", "name", "verdict", ...}, "confidence",
    "figures": [{"figure", "kind", "a", "b", "difference", "ratio", "p_value", "verdict", ...}],
    "recovery": [...], "latency": {"a": {"e2e": sample|histogram, "ttft": ...}, "b": ...}}; any part may be
    missing."""
    a, b = comp.get("a") or {}, comp.get("b") or {}
    page = Page(f"{b.get('name', 'B')} (B) against {a.get('name', 'A')} (A) - llm-chaos comparison")
    figures = comp.get("figures") or []
    worse = sum(f.get("verdict") == "worse" for f in figures)
    page.add(f"<h1>{esc(b.get('name', 'B'))} (B) against {esc(a.get('name', 'A'))} (A) "
             f"{badge('worse', f'{worse} worse') if worse else badge('passed', 'no figure worse')}</h1>")
    for side, d in (("a", a), ("b", b)):
        _side(page, side, d)
    _host(page, comp.get("host") or {})
    if comp.get("confidence") is not None:
        page.add(f'<p class="meta">{len(figures)} figures at <b>{float(comp["confidence"]):.0%}</b> confidence; '
                 f"difference is B - A, ratio B / A; {worse} worse, "
                 f"{sum(f.get('verdict') == 'better' for f in figures)} better</p>")
    page.h2("Figures compared", "figures")
    if figures:
        page.table(["figure", "A", "B", "difference", "ratio", "p", "verdict"], [_figure_row(f) for f in figures],
                   raw=True)
    else:
        page.note("No figures to compare.")
    if comp.get("recovery"):
        _recovery(page, comp["recovery"])
    latency = comp.get("latency") or {}
    page.h2("Latency distributions", "latency")
    if any((latency.get(s) or {}).get(k) for s in ("a", "b") for k in ("e2e", "ttft")):
        page.figure(plots.ecdf(latency, {"a": a.get("name", "A"), "b": b.get("name", "B")}))
    else:
        page.note("No latency samples to compare.")
    return page.render(mask)
