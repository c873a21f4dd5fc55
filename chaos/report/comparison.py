"""`chaos report --compare A B`: run B against run A (the baseline), figure by figure.

Figures, for the whole load and for each phase both runs have (the steady state, a fault's window by its name,
after recovery): the E2E and TTFT distributions (Mann-Whitney U) and their P50/P95/P99 (bootstrap intervals of
the difference and the ratio), the error rate (two-proportion test) and ok throughput (two Poisson rates). All
verdicts of one comparison are corrected together (Holm), so comparing thirty figures does not flag one by chance
(chaos/verify/compare.py). The recovery figures are shown side by side: one value a run has no noise of its own to
test against (the gate of a later issue repeats runs for that).
"""

from __future__ import annotations

import json
import os

import numpy as np

from ..errors import InputError
from ..host import DEFAULT_BOUND, HostSummary, differs, host_report, load_summary, phase_summary
from ..records import read_records
from ..rundir.files import REPORT_JSON, REQUESTS
from ..verify import compare as C
from ..verify.phases import ended_in
from ..verify.samples import BLOCK_S, METRICS, errors, is_open_loop, latency, windowed
from ..verify.stats import proportion, rate
from .sections import duration_text, estimate


# The calibration on this machine (bench/compare_calibration.py, BENCHMARKS.md): with ~1,000 requests a run, pure
# statistics flags a run-to-run drift of a few percent every time, and requests in flight together are not
# independent draws. A change must exceed TOLERANCE (relative, for latency and throughput; the error rate is an
# absolute change, tested without one) and latency is resampled by BLOCK_S windows of start time.
TOLERANCE = 0.10
MIN_GROUPS = 20


class CompareError(InputError):
    pass


def _load(run_dir: str) -> tuple[dict, list]:
    req = os.path.join(run_dir, REQUESTS)
    if not os.path.exists(req):
        raise CompareError(f"{run_dir}: no requests.jsonl: give two run directories of `chaos run` or `chaos load`")
    report = {}
    path = os.path.join(run_dir, REPORT_JSON)
    if os.path.exists(path):
        try:
            with open(path) as f:
                report = json.load(f)
        except ValueError:
            report = {}
    return report, read_records(req)


def _span(records) -> float:
    if not records:
        return 0.0
    return max(r.t_end or r.t_start for r in records) - min(r.t_sched for r in records)


def run_figures(ra: list, rb: list, label: str, confidence: float, span_a: float, span_b: float,
                tolerance: float, open_loop: tuple[bool, bool] = (False, False)) -> list[dict]:
    """open_loop: whether each run's load was open loop (its latencies then count from when a request was due)."""
    out = []
    for metric in METRICS:
        (va, ga, _) = windowed([(0, ra)], latency(metric, open_loop[0]))
        (vb, gb, _) = windowed([(0, rb)], latency(metric, open_loop[1]))
        # requests in flight together share the host's hiccups: resample whole windows, when there are enough
        grouped = min(len(np.unique(ga)), len(np.unique(gb))) >= MIN_GROUPS
        res = C.compare_latency(va, vb, confidence, tolerance=tolerance, name=f"{label} {metric}",
                                groups=(ga, gb) if grouped else None)
        out += C.latency_figures(res)
    (fa, na), (fb, nb) = errors(ra), errors(rb)
    out.append(C.compare_proportions(fa, na, fb, nb, confidence, name=f"{label} error rate"))
    if span_a > 0 and span_b > 0:
        out.append(C.compare_rates(na - fa, span_a, nb - fb, span_b, confidence, tolerance=tolerance,
                                   name=f"{label} ok throughput"))
    return [{**f, "phase": label} for f in out]


def _by_phase(records, phase: dict) -> list:
    return ended_in(records, phase["start"], phase["end"])


def summary(f: dict) -> str:
    unit = "%" if f.get("kind") == "proportion" else "" if f.get("kind") == "rate" else "s"
    if f["verdict"] == C.NOT_JUDGED and not f.get("host"):
        return f"not judged: {f.get('why', '')}"
    if f.get("host"):
        return f"{summary({**f, 'verdict': f['verdict_host'], 'host': False})}; not judged: {f['why']}"
    if f.get("kind") == "distribution":
        return f"P(B > A) = {f.get('effect', 0):.2f}, p = {f['p_value']:.3g}"
    parts = [f"A {estimate(f.get('a'), unit)} -> B {estimate(f.get('b'), unit)}"]
    ratio = f.get("ratio") or {}
    if ratio.get("value") is not None and ratio.get("low") is not None:
        parts.append(f"ratio {ratio['value']:.3f} [{ratio['low']:.3f}-{ratio['high']:.3f}]")
    parts.append(f"p = {f['p_value']:.3g}" + (f" (Holm {f['p_holm']:.3g})" if f.get("p_holm") is not None else ""))
    return ", ".join(parts)


def host_comparison(rep_a: dict, rep_b: dict, bound: float = DEFAULT_BOUND) -> dict:
    """The two runs' hosts side by side, over the load and per phase, with where they differ beyond the bound
    (chaos.host.differs). "measured": False when either run has no host figures (recorded before they were)."""
    la, lb = load_summary(rep_a), load_summary(rep_b)
    out = {"bound": bound, "measured": la is not None and lb is not None,
           "a": la.to_dict() if la else None, "b": lb.to_dict() if lb else None,
           "differs": {"whole load": differs(la, lb, bound)} if la and lb else {}, "phases": {}}
    for ph in rep_a.get("phases") or []:
        ha, hb = phase_summary(rep_a, ph["name"]), phase_summary(rep_b, ph["name"])
        if ha is not None and hb is not None:
            out["phases"][ph["name"]] = {"a": ha.to_dict(), "b": hb.to_dict()}
            out["differs"][ph["name"]] = differs(ha, hb, bound)
    out["differs"] = {k: v for k, v in out["differs"].items() if v}
    return out


def _guard(f: dict, host: dict) -> dict:
    """A latency change called where the two runs' hosts differed is not called: the host may explain it."""
    if f["verdict"] not in (C.WORSE, C.BETTER) or f.get("kind") not in ("latency", "distribution"):
        return f
    why = host["differs"].get(f.get("phase"))
    if not why:
        return f
    return {**f, "verdict": C.NOT_JUDGED, "verdict_host": f["verdict"], "host": True,
            "why": f"{f['verdict']} at p = {f['p_value']:.2g}, but the host differed ({why}): not called"}


def compare_runs(a_dir: str, b_dir: str, out_dir: str, confidence: float = 0.95,
                 tolerance: float = TOLERANCE, host_bound: float = DEFAULT_BOUND) -> dict:
    (rep_a, ra), (rep_b, rb) = _load(a_dir), _load(b_dir)
    for rep, d in ((rep_a, a_dir), (rep_b, b_dir)):
        if not rep.get("host"):  # `chaos load` writes no report.json, only host.jsonl
            rep["host"] = host_report(d, rep)
    loops = (is_open_loop(rep_a), is_open_loop(rep_b))
    figs = run_figures(ra, rb, "whole load", confidence, _span(ra), _span(rb), tolerance, loops)
    phases_b = {p["name"]: p for p in rep_b.get("phases") or []}
    for pa in rep_a.get("phases") or []:
        pb = phases_b.get(pa["name"])
        if pb is None or pa.get("kind") == "run":
            continue
        figs += run_figures(_by_phase(ra, pa), _by_phase(rb, pb), pa["name"], confidence,
                            pa["end"] - pa["start"], pb["end"] - pb["start"], tolerance, loops)
    figs = C.compare_figures(figs, confidence)
    host = host_comparison(rep_a, rep_b, host_bound)
    figs = [_guard(f, host) for f in figs]
    for f in figs:
        f["summary"] = summary(f)
    comp = {"a": _side(a_dir, rep_a, ra), "b": _side(b_dir, rep_b, rb), "confidence": confidence,
            "tolerance": tolerance, "block_s": BLOCK_S, "host": host,
            "figures": figs, "recovery": _recovery_pairs(rep_a, rep_b),
            "latency": {"a": _ecdf(ra), "b": _ecdf(rb)}}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "comparison.json"), "w") as f:
        json.dump(comp, f, indent=2, default=float)
    with open(os.path.join(out_dir, "comparison.md"), "w") as f:
        f.write(markdown(comp))
    try:
        from .html import comparison_html
    except ImportError:  # plotting unavailable: the Markdown and JSON say everything
        comparison_html = None
    if comparison_html is not None:
        with open(os.path.join(out_dir, "comparison.html"), "w") as f:
            f.write(comparison_html(comp))
    return comp


def _side(run_dir: str, report: dict, records) -> dict:
    failed, judged = errors(records)
    return {"dir": os.path.abspath(run_dir), "name": (report.get("experiment") or {}).get("name") or
            os.path.basename(os.path.normpath(run_dir)), "verdict": report.get("verdict"), "requests": len(records),
            "error_rate": proportion(failed, judged).to_dict(),
            "throughput": rate(judged - failed, max(_span(records), 1e-9)).to_dict()}


def _ecdf(records, cap: int = 2000) -> dict:
    """Sorted E2E and TTFT samples, thinned to at most cap points each, for the distribution plot."""
    out = {}
    for name, get in (("e2e", lambda r: r.t_end - r.t_start if r.t_end else None),
                      ("ttft", lambda r: r.t_first - r.t_start if r.t_first else None)):
        v = np.sort(np.fromiter((x for r in records if r.outcome == "ok" and (x := get(r)) is not None), float))
        if v.size > cap:
            v = v[np.linspace(0, v.size - 1, cap).astype(int)]
        out[name] = [round(float(x), 6) for x in v]
    return out


def _recovery_pairs(a: dict, b: dict) -> list[dict]:
    fa = {f["fault"]: f for f in (a.get("recovery") or {}).get("faults") or []}
    out = []
    for f in (b.get("recovery") or {}).get("faults") or []:
        if f["fault"] in fa:
            out.append({"fault": f["fault"], **{k: {"a": (fa[f["fault"]].get(k) or {}).get("value"),
                                                    "b": (f.get(k) or {}).get("value")}
                                                for k in ("time_to_detect", "time_to_failover", "time_to_restore")},
                        "failed_requests": {"a": (fa[f["fault"]].get("error_budget") or {}).get("failed_requests"),
                                            "b": (f.get("error_budget") or {}).get("failed_requests")}})
    return out


def host_markdown(host: dict) -> list[str]:
    """The warning where the hosts differed, and both runs' hosts side by side."""
    if not host:
        return []
    if not host.get("measured"):
        return ["The host was not measured in one of the runs (recorded before llm-chaos measured it): latency "
                "changes could be the host's, and nothing says.", ""]
    lines = []
    if host.get("differs"):
        lines += [f"**Warning: the host differed between the runs** (others' CPU apart by more than "
                  f"{host['bound']:g} cores) in: " + "; ".join(f"{k}: {v}" for k, v in host["differs"].items())
                  + ". A latency change there may be the host's, not the build's: it is not called (not judged). "
                    "Rerun both on a quiet host, or compare with `chaos gate` (pairs in random order).", ""]
    lines += ["| host | A | B |", "|---|---|---|"]
    lines.append(f"| whole load | {_host_text(host.get('a'))} | {_host_text(host.get('b'))} |")
    for name, d in (host.get("phases") or {}).items():
        lines.append(f"| {name} | {_host_text(d.get('a'))} | {_host_text(d.get('b'))} |")
    return lines + [""]


def _host_text(d: dict | None) -> str:
    h = HostSummary.from_dict(d)
    return h.text() if h else "not measured"


def markdown(comp: dict) -> str:
    a, b = comp["a"], comp["b"]
    worse = [f for f in comp["figures"] if f["verdict"] == C.WORSE]
    better = [f for f in comp["figures"] if f["verdict"] == C.BETTER]
    lines = [f"# {b['name']} (B) against {a['name']} (A): "
             + (f"{len(worse)} figures WORSE" if worse else "no figure worse"), "",
             f"- A: `{a['dir']}` ({a['requests']} requests, verdict {a.get('verdict') or '-'})",
             f"- B: `{b['dir']}` ({b['requests']} requests, verdict {b.get('verdict') or '-'})",
             f"- {len(comp['figures'])} figures at {comp['confidence']:.0%} confidence, corrected together (Holm): "
             f"{len(worse)} worse, {len(better)} better, the rest no detectable change or not judged.",
             f"- a change counts beyond {comp['tolerance']:.0%} (latency, throughput); latency resampled by "
             f"{comp['block_s']:g} s windows of start time (requests in flight together are not independent).", ""]
    lines += host_markdown(comp.get("host") or {})
    lines += ["| figure | verdict | A → B |", "|---|---|---|"]
    for f in comp["figures"]:
        verdict = f"**{f['verdict'].upper()}**" if f["verdict"] in (C.WORSE, C.BETTER) else f["verdict"]
        lines.append(f"| {f['figure']} | {verdict} | {f['summary']} |")
    if comp.get("recovery"):
        lines += ["", "## Recovery, side by side", "", "One value a run: no test (repeat runs to judge these).", "",
                  "| fault | detect A / B | failover A / B | restore A / B | failed requests A / B |",
                  "|---|---|---|---|---|"]
        s = lambda v: duration_text(v, none="never")  # noqa: E731
        for r in comp["recovery"]:
            lines.append(f"| {r['fault']} | {s(r['time_to_detect']['a'])} / {s(r['time_to_detect']['b'])} | "
                         f"{s(r['time_to_failover']['a'])} / {s(r['time_to_failover']['b'])} | "
                         f"{s(r['time_to_restore']['a'])} / {s(r['time_to_restore']['b'])} | "
                         f"{r['failed_requests']['a']} / {r['failed_requests']['b']} |")
    lines += ["", "Latency: Mann-Whitney U on the distribution, bootstrap intervals of the P50/P95/P99 difference "
                  "and ratio (B/A); error rate: two-proportion test (Fisher's exact when counts are small); "
                  "throughput: two Poisson rates. docs/statistics.md defines each test and verdict.", ""]
    return "\n".join(lines)
