"""The gate's outputs: gate.md (short enough for a pull-request comment: the verdict, each regressed figure with
its interval, then the rest folded away) and junit.xml (one test case a figure; a regression fails, a figure with
too few samples is skipped with what it needs)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..report.junit import xml_text
from ..host import DEFAULT_BOUND, HostSummary
from ..report.sections import duration_text
from ..verify import compare as C

ICON = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️", "setup error": "⛔", "interrupted": "⏹"}


def _est(e: dict | None, kind: str) -> str:
    """A side's estimate in its unit; where too few runs give no interval, it says how many it has."""
    if not e or e.get("value") is None:
        return "-"
    if kind == "proportion":
        f = lambda v: f"{v * 100:.2f}%"  # noqa: E731
    elif kind in ("rate", "count") and e.get("method") == "poisson":
        f = lambda v: f"{v:.2f}"  # noqa: E731
    elif kind == "count":
        return f"{e['value']} of {e.get('n')}"
    elif kind in ("rate", "spread"):
        f = lambda v: f"{v:.2f}"  # noqa: E731
    else:
        f = duration_text
    if e.get("low") is None:
        few = e.get("n") is not None and e.get("n", 0) < 3 and kind in ("latency", "value")
        return f(e["value"]) + (f" ({e['n']} run(s): no interval)" if few else "")
    return f"{f(e['value'])} [{f(e['low'])}, {f(e['high'])}]"


def _change(f: dict) -> str | None:
    """The change b against a: a ratio for latency, a difference (in the figure's unit) for the rest."""
    ratio = f.get("ratio") or {}
    if ratio.get("value") is not None:
        if ratio.get("low") is not None:
            return f"×{ratio['value']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]"
        return f"×{ratio['value']:.2f}"
    diff = f.get("difference") or {}
    if not f.get("paired") or diff.get("value") is None:
        return None
    kind = f.get("kind")
    fmt = ((lambda v: f"{v * 100:+.2f} pt") if kind == "proportion" else
           (lambda v: f"{v:+.2f}") if kind == "count" else
           (lambda v: ("+" if v >= 0 else "-") + duration_text(abs(v))))
    if diff.get("low") is None:
        return f"{fmt(diff['value'])} a pair"
    return f"{fmt(diff['value'])} [{fmt(diff['low'])}, {fmt(diff['high'])}] a pair"


def figure_line(f: dict) -> str:
    """baseline -> candidate, each with its interval, the change and the test's p (Holm-corrected)."""
    kind = f.get("kind")
    parts = [f"{_est(f.get('a'), kind)} → {_est(f.get('b'), kind)}"]
    change = _change(f)
    if change:
        parts.append(change)
    if f.get("paired") and f.get("p_value") is not None:
        parts.append(f"p = {f['p_value']:.2g} ({len(f.get('judged_on') or f.get('pairs') or [])} pairs)")
    elif f.get("p_holm") is not None:
        parts.append(f"p = {f['p_holm']:.2g} (Holm)")
    left = _left_out(f)
    if left:
        parts.append(left)
    if f.get("censored") and any(f["censored"].values()) and f.get("metric") != "time to detect":
        parts.append(f"never recovered in {f['censored']['a']} / {f['censored']['b']} runs (counted to the end)")
    if f["verdict"] == C.NOT_JUDGED:
        parts.append(f"not judged: {f.get('why', '')}")
    if f.get("within"):
        parts.append(f"within the tolerance at {f['decided_at']} pairs (p = {f['p_within']:.2g})")
    elif f.get("decided") is False and f["verdict"] != C.NOT_JUDGED:
        parts.append("still open: neither worse nor shown within the tolerance")
    return ", ".join(parts)


def _left_out(f: dict) -> str | None:
    ex = f.get("excluded") or {}
    out = []
    left = [n for n in ex.get("host") or {} if n not in (f.get("judged_on") or [])]
    if left and f["verdict"] != C.NOT_JUDGED:
        out.append(f"pair(s) {', '.join(map(str, sorted(left, key=int)))} left out: the host differed")
    if f.get("host_note"):
        out.append(f["host_note"])
    if ex.get("set_aside"):
        n = sum(ex["set_aside"].values())
        out.append(f"{n} timeout(s) of pairs whose host differed set aside")
    return "; ".join(out) or None


def host_table(doc: dict) -> list[str]:
    """Each run's host over its load, side by side by pair (or by side for recorded baselines)."""
    runs = doc.get("runs") or []
    if not any(r.get("host") for r in runs):
        return []

    def cell(r):
        h = HostSummary.from_dict(r.get("host")) if r else None
        return h.text() if h else "not measured"

    lines = ["", "### The host, run by run", "",
             f"Others: CPU used by processes outside the run (cores, mean over its load; the guard's figure, bound "
             f"{(doc.get('settings') or {}).get('host_bound', DEFAULT_BOUND):g} cores); run: the run's own; load "
             f"average; CPU pressure: share of time some task waited for a CPU (/proc/pressure).", ""]
    if doc.get("interleaved"):
        lines += ["| experiment | pair | order | baseline | candidate |", "|---|---|---|---|---|"]
        for (name, pair), rows in _by_pair(runs).items():
            lines.append(f"| {name} | {pair} | {' '.join((rows.get('order') or '').upper())} | {cell(rows.get('a'))} | "
                         f"{cell(rows.get('b'))} |")
    else:
        lines += ["| experiment | run | host |", "|---|---|---|"]
        lines += [f"| {r['name']} | candidate {r.get('pair', '')} | {cell(r)} |" for r in runs]
    return lines


def _by_pair(runs: list[dict]) -> dict:
    out: dict = {}
    for r in runs:
        d = out.setdefault((r["name"], r.get("pair")), {"order": r.get("order")})
        d[r["side"]] = r
    return out


def aa_section(doc: dict) -> list[str]:
    """An A/A control: what this environment's noise lets the gate see, figure by figure."""
    figs = [f for f in doc.get("figures") or [] if f.get("kind") == "latency" and (f.get("ratio") or {}).get("low")]
    if not doc.get("aa"):
        return []
    verdict = ("**false alarm**: this environment called a regression of a build against itself: give the gate "
               "more pairs, a wider tolerance, or a quieter runner" if doc.get("exit_code") == 1 else
               "no false alarm in this A/A gate" if doc.get("exit_code") == 0 else
               "not decided (see above): the host or too few pairs")
    lines = ["", "### A/A control", "", f"The baseline against itself: {verdict}. Run it a few times per runner type: "
             "k false alarms of N gates estimates this runner's rate (aim: none).", ""]
    if figs:
        widest = sorted(figs, key=lambda f: -max(f["ratio"]["high"] - 1, 1 - f["ratio"]["low"]))[:8]
        lines += ["The noisiest latency figures: the A/A ratio's 95 % interval, so a change must exceed about "
                  "this to be seen here.", "", "| figure | A/A ratio | smallest change visible |", "|---|---|---|"]
        lines += [f"| {f['figure']} | ×{f['ratio']['value']:.2f} [{f['ratio']['low']:.2f}, {f['ratio']['high']:.2f}] "
                  f"| {max(f['ratio']['high'] - 1, 1 - f['ratio']['low'], f.get('tolerance') or 0):.0%} |"
                  for f in widest]
    return lines


def markdown(doc: dict) -> str:
    verdict = doc.get("verdict", "?")
    figs = doc.get("figures") or []
    worse = [f for f in figs if f["verdict"] == C.WORSE]
    better = [f for f in figs if f["verdict"] == C.BETTER]
    s = doc.get("settings") or {}
    base = doc["baseline"] if isinstance(doc.get("baseline"), str) else "recorded runs"
    title = "chaos gate (A/A control)" if doc.get("aa") else "chaos gate"
    design = (f", {doc.get('pairs')} pairs in random order (seed {doc.get('seed')})" if doc.get("interleaved")
              else f", {doc.get('pairs')} candidate run(s) against recorded runs")
    seq = doc.get("sequential")
    if seq and seq.get("pairs_run") is not None:
        ran = ", ".join(f"{name} {n}" for name, n in seq["pairs_run"].items())
        design = (f", sequential: pairs in random order (seed {doc.get('seed')}) until every figure was decided, "
                  f"at most {doc.get('pairs')}, looks at {', '.join(map(str, seq['looks']))} pairs, each at alpha "
                  f"{seq['alpha_per_look']:.3g} and beta {seq['beta_per_look']:.3g}; pairs run: {ran} "
                  f"({seq['runs']} runs)")
    lines = [f"## {ICON.get(verdict, '')} {title}: {verdict.upper()} — {doc.get('suite')}", "",
             f"{doc.get('reason', '')}.", "",
             f"Candidate `{doc.get('candidate')}` against baseline `{base}`{design}; score {doc.get('score', '-')} "
             f"(% of judged figures not worse)."]
    if worse:
        lines += ["", "| regressed figure | baseline → candidate |", "|---|---|"]
        lines += [f"| **{f['figure']}** | {figure_line(f)} |" for f in worse]
    for note in doc.get("not_compared") or []:
        lines += ["", f"Not compared: {note}"]
    for note in doc.get("notes") or []:
        lines += ["", f"Note: {note}"]
    lines += aa_section(doc)
    if better:
        lines += ["", "Better: " + "; ".join(f"{f['figure']} ({figure_line(f)})" for f in better)]
    if figs:
        lines += ["", f"<details><summary>All {len(figs)} figures ({doc.get('judged', 0)} judged)</summary>", "",
                  "| figure | verdict | baseline → candidate |", "|---|---|---|"]
        lines += [f"| {f['figure']} | {f['verdict']} | {figure_line(f)} |" for f in figs]
        lines += ["", "</details>"]
    how = ("each figure judged on its pairs' changes: changed at all (paired t, all figures corrected together by "
           "Holm) and by more than the tolerance (a sign-flip randomization test); a pair whose runs saw a "
           "different host is left out of latency and recovery-time figures" if doc.get("interleaved")
           else "all figures corrected together (Holm)")
    lines += ["", f"A figure regresses when it got worse by more than the tolerance ({s.get('tolerance', 0):.0%} "
                  f"relative; latency at least {duration_text(s.get('floor_s'))}, recovery times at least "
                  f"{duration_text(s.get('recovery_floor_s'))}; error rate {s.get('error_tolerance', 0) * 100:g} "
                  f"point(s)) at {s.get('confidence', 0.95):.0%} confidence, {how}. docs/gate.md defines each test."]
    lines += host_table(doc) + [""]
    runs = doc.get("runs") or []
    if runs:
        lines += ["<details><summary>Runs</summary>", "", "| experiment | pair | side | status | run |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {r.get('pair', '')} | {'baseline' if r['side'] == 'a' else 'candidate'} | "
                  f"{r['status']} | `{r['run_dir']}` |" for r in runs]
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def junit(doc: dict) -> str:
    figs = doc.get("figures") or []
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=xml_text(f"chaos gate: {doc.get('suite')}"), tests=str(len(figs) or 1),
                          failures=str(sum(f["verdict"] == C.WORSE for f in figs)),
                          skipped=str(sum(f["verdict"] == C.NOT_JUDGED for f in figs)))
    if not figs:
        case = ET.SubElement(suite, "testcase", classname="gate", name="gate", time="0")
        if doc.get("exit_code"):
            ET.SubElement(case, "failure", message=xml_text(doc.get("reason")))
    for f in figs:
        case = ET.SubElement(suite, "testcase", classname=xml_text(f"gate.{f.get('experiment', '')}"),
                             name=xml_text(f["figure"]), time="0")
        if f["verdict"] == C.WORSE:
            ET.SubElement(case, "failure", message=xml_text(f"regressed: {figure_line(f)}"))
        elif f["verdict"] == C.NOT_JUDGED:
            need = (f" (needs {f['needs_runs']} runs a side)" if f.get("needs_runs") else
                    f" (needs {f['needs_pairs']} pairs)" if f.get("needs_pairs") else "")
            ET.SubElement(case, "skipped", message=xml_text(f.get("why", "not judged") + need))
    out = ET.SubElement(suite, "system-out")
    out.text = xml_text(f"{doc.get('verdict')}: {doc.get('reason')}")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
