"""The gate's outputs: gate.md (short enough for a pull-request comment: the verdict, each regressed figure with
its interval, then the rest folded away) and junit.xml (one test case a figure; a regression fails, a figure with
too few samples is skipped with what it needs)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from ..report.junit import _text
from ..report.sections import duration_text
from ..verify import compare as C

ICON = {"pass": "✅", "regression": "❌", "inconclusive": "⚠️", "setup error": "⛔", "interrupted": "⏹"}


def _est(e: dict | None, kind: str) -> str:
    if not e or e.get("value") is None:
        return "-"
    if kind == "proportion":
        f = lambda v: f"{v * 100:.2f}%"  # noqa: E731
    elif kind == "rate":
        f = lambda v: f"{v:.2f}"  # noqa: E731
    elif kind == "count":
        return f"{e['value']} of {e.get('n')}"
    else:
        f = duration_text
    if e.get("low") is None:
        return f(e["value"])
    return f"{f(e['value'])} [{f(e['low'])}, {f(e['high'])}]"


def figure_line(f: dict) -> str:
    """baseline -> candidate, each with its interval, the change and the test's p (Holm-corrected)."""
    kind = f.get("kind")
    parts = [f"{_est(f.get('a'), kind)} → {_est(f.get('b'), kind)}"]
    ratio = f.get("ratio") or {}
    if ratio.get("value") is not None and ratio.get("low") is not None:
        parts.append(f"×{ratio['value']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]")
    if f.get("p_holm") is not None:
        parts.append(f"p = {f['p_holm']:.2g} (Holm)")
    if f.get("censored") and any(f["censored"].values()) and f.get("metric") != "time to detect":
        parts.append(f"never recovered in {f['censored']['a']} / {f['censored']['b']} runs (counted to the end)")
    if f["verdict"] == C.NOT_JUDGED:
        parts.append(f"not judged: {f.get('why', '')}")
    return ", ".join(parts)


def markdown(doc: dict) -> str:
    verdict = doc.get("verdict", "?")
    figs = doc.get("figures") or []
    worse = [f for f in figs if f["verdict"] == C.WORSE]
    better = [f for f in figs if f["verdict"] == C.BETTER]
    s = doc.get("settings") or {}
    base = doc["baseline"] if isinstance(doc.get("baseline"), str) else "recorded runs"
    lines = [f"## {ICON.get(verdict, '')} chaos gate: {verdict.upper()} — {doc.get('suite')}", "",
             f"{doc.get('reason', '')}.", "",
             f"Candidate `{doc.get('candidate')}` against baseline `{base}`"
             + (", interleaved" if doc.get("interleaved") else "")
             + f", {doc.get('repeat')} run(s) a side; score {doc.get('score', '-')} "
               f"(% of judged figures not worse)."]
    if worse:
        lines += ["", "| regressed figure | baseline → candidate |", "|---|---|"]
        lines += [f"| **{f['figure']}** | {figure_line(f)} |" for f in worse]
    for note in doc.get("not_compared") or []:
        lines += ["", f"Not compared: {note}"]
    if better:
        lines += ["", "Better: " + "; ".join(f"{f['figure']} ({figure_line(f)})" for f in better)]
    if figs:
        lines += ["", f"<details><summary>All {len(figs)} figures ({doc.get('judged', 0)} judged)</summary>", "",
                  "| figure | verdict | baseline → candidate |", "|---|---|---|"]
        lines += [f"| {f['figure']} | {f['verdict']} | {figure_line(f)} |" for f in figs]
        lines += ["", "</details>"]
    lines += ["", f"A figure regresses when it got worse by more than the tolerance ({s.get('tolerance', 0):.0%} "
                  f"relative; latency at least {duration_text(s.get('floor_s'))}, recovery times at least "
                  f"{duration_text(s.get('recovery_floor_s'))}; error rate {s.get('error_tolerance', 0) * 100:g} points) at "
                  f"{s.get('confidence', 0.95):.0%} confidence, all figures corrected together (Holm). "
                  "docs/gate.md defines each test.", ""]
    runs = doc.get("runs") or []
    if runs:
        lines += ["<details><summary>Runs</summary>", "", "| experiment | side | status | run |", "|---|---|---|---|"]
        lines += [f"| {r['name']} | {'baseline' if r['side'] == 'a' else 'candidate'} | {r['status']} | "
                  f"`{r['run_dir']}` |" for r in runs]
        lines += ["", "</details>", ""]
    return "\n".join(lines)


def junit(doc: dict) -> str:
    figs = doc.get("figures") or []
    root = ET.Element("testsuites")
    suite = ET.SubElement(root, "testsuite", name=_text(f"chaos gate: {doc.get('suite')}"), tests=str(len(figs) or 1),
                          failures=str(sum(f["verdict"] == C.WORSE for f in figs)),
                          skipped=str(sum(f["verdict"] == C.NOT_JUDGED for f in figs)))
    if not figs:
        case = ET.SubElement(suite, "testcase", classname="gate", name="gate", time="0")
        if doc.get("exit_code"):
            ET.SubElement(case, "failure", message=_text(doc.get("reason")))
    for f in figs:
        case = ET.SubElement(suite, "testcase", classname=_text(f"gate.{f.get('experiment', '')}"),
                             name=_text(f["figure"]), time="0")
        if f["verdict"] == C.WORSE:
            ET.SubElement(case, "failure", message=_text(f"regressed: {figure_line(f)}"))
        elif f["verdict"] == C.NOT_JUDGED:
            need = f" (needs {f['needs_runs']} runs a side)" if f.get("needs_runs") else ""
            ET.SubElement(case, "skipped", message=_text(f.get("why", "not judged") + need))
    out = ET.SubElement(suite, "system-out")
    out.text = _text(f"{doc.get('verdict')}: {doc.get('reason')}")
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
