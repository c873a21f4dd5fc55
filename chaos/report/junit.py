"""junit.xml: a run's checks as test cases, for CI systems that show JUnit results (GitHub Actions reporters,
GitLab's test report, Jenkins' junit step).

One <testsuite> named after the experiment, inside a <testsuites> root (the form all three read); one <testcase>
per check: a failed check carries <failure message="measured ...; required ...">detail</failure>, one the run
could not judge <skipped message="why"/>. The verdict's reason and the notes go in the suite's <system-out>. A
run with no checks (it failed before judging) gets one test case, "run", failed with the reason, so that CI
never shows green for a run that judged nothing; so does a run that ended badly (aborted, interrupted, error)
though no check failed.
"""

from __future__ import annotations

import os
import re
import time
import xml.etree.ElementTree as ET

from ..rundir.files import JUNIT

# Characters XML 1.0 cannot hold at all (escaping does not help): control bytes from a server's error text
_INVALID = re.compile("[^\x09\x0a\x0d\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_OK_VERDICTS = ("passed", "failed", "inconclusive")  # a run that ended badly otherwise gets a failed "run" case


def xml_text(value) -> str:
    return _INVALID.sub("?", "" if value is None else str(value))


def _status(check: dict) -> str:
    status = check.get("status")
    if status in ("passed", "failed", "not_judged"):
        return status
    return {True: "passed", False: "failed"}.get(check.get("passed"), "not_judged")


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    return ET.SubElement(suite, "testcase", classname=classname, name=xml_text(name), time="0")


def junit_xml(report: dict) -> str:
    """The JUnit XML document for a report dict (report.json's shape; any part may be missing)."""
    r = report or {}
    name = xml_text((r.get("experiment") or {}).get("name") or "experiment")
    classname = f"llm-chaos.{name}"
    checks = r.get("checks") or []
    verdict = r.get("verdict") or "unknown"
    statuses = [_status(c) for c in checks]
    run_case = not checks or (verdict not in _OK_VERDICTS and "failed" not in statuses)
    failures = statuses.count("failed") + (run_case and verdict != "passed")
    tests, skipped = len(checks) + run_case, statuses.count("not_judged")
    duration = f"{float(r.get('duration_s') or 0):.3f}"
    root = ET.Element("testsuites", name="llm-chaos", tests=str(tests), failures=str(failures), errors="0",
                      skipped=str(skipped), time=duration)
    suite = ET.SubElement(root, "testsuite", name=name, tests=str(tests), failures=str(failures), errors="0",
                          skipped=str(skipped), time=duration)
    if r.get("started"):
        suite.set("timestamp", time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(r["started"])))
    props = ET.SubElement(suite, "properties")
    for key in ("verdict", "exit_code", "reason"):
        if r.get(key) is not None:
            ET.SubElement(props, "property", name=key, value=xml_text(r[key]))
    for c, status in zip(checks, statuses):
        case = _case(suite, classname, c.get("name") or "check")
        detail = xml_text(c.get("detail"))
        if status == "failed":
            f = ET.SubElement(case, "failure", type="check failed",
                              message=xml_text(f"measured {c.get('measured')}; required {c.get('threshold')}"))
            f.text = detail
        elif status == "not_judged":
            ET.SubElement(case, "skipped", message=detail.removeprefix("not judged: ") or "not judged")
    if run_case:
        case = _case(suite, classname, "run")
        if verdict != "passed":
            why = r.get("reason") or f"the run ended {verdict} and judged no check"
            f = ET.SubElement(case, "failure", type=f"run {verdict}", message=xml_text(why))
            f.text = xml_text(f"verdict {verdict}, exit code {r.get('exit_code')}: {why}")
    out = [f"verdict: {verdict} (exit code {r.get('exit_code')})"]
    if r.get("reason"):
        out.append(f"reason: {r['reason']}")
    out += [f"note: {n}" for n in r.get("notes") or []]
    ET.SubElement(suite, "system-out").text = xml_text("\n".join(out))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(run_dir: str, report: dict, mask=None) -> str:
    """RUN_DIR/junit.xml; returns its path. mask scrubs the document's text (the report is already masked)."""
    path = os.path.join(run_dir, JUNIT)
    text = junit_xml(report)
    if mask is not None:
        text = mask(text)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path
