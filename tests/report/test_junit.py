"""junit.xml: a run's checks as JUnit test cases, parsed back as a CI system would read them."""

import xml.etree.ElementTree as ET

from chaos.report.junit import junit_xml, write_junit

CHECKS = [
    {"name": "error rate during the fault", "passed": False, "status": "failed", "measured": "19.5%",
     "threshold": "<= 10%", "detail": "200 requests in the window"},
    {"name": "status codes", "passed": True, "status": "passed", "measured": "200x900", "threshold": "[200]",
     "detail": ""},
    {"name": "recovery time", "passed": None, "status": "not_judged", "measured": "-", "threshold": "<= 10 s",
     "detail": "not judged: the box was too busy"},
]


def report(**kw) -> dict:
    r = {"experiment": {"name": "kill-instance"}, "verdict": "failed", "exit_code": 1, "started": 1_800_000_000.0,
         "duration_s": 61.25, "reason": "error rate during the fault: 19.5% > 10%", "checks": CHECKS,
         "notes": ["r1 restarted 25.1s into the load", "a <note> & more"]}
    r.update(kw)
    return r


def valid(root: ET.Element) -> ET.Element:
    """The structure JUnit consumers rely on; returns the one suite."""
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    assert int(suite.get("tests")) == len(cases) == int(root.get("tests"))
    assert int(suite.get("failures")) == sum(c.find("failure") is not None for c in cases)
    assert int(suite.get("skipped")) == sum(c.find("skipped") is not None for c in cases)
    assert suite.get("errors") == "0" and float(suite.get("time")) >= 0
    for c in cases:
        assert c.get("classname") and c.get("name") and c.get("time") is not None
        assert len([x for x in c if x.tag in ("failure", "skipped", "error")]) <= 1
    assert suite.find("system-out") is not None
    return suite


def test_checks_become_cases_with_failure_and_skip():
    suite = valid(ET.fromstring(junit_xml(report()).encode()))
    assert suite.get("name") == "kill-instance"
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    assert suite.get("time") == "61.250" and suite.get("timestamp") == "2027-01-15T08:00:00"
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert {c.get("classname") for c in cases.values()} == {"llm-chaos.kill-instance"}
    failure = cases["error rate during the fault"].find("failure")
    assert failure.get("message") == "measured 19.5%; required <= 10%"
    assert failure.text == "200 requests in the window"
    assert cases["recovery time"].find("skipped").get("message") == "the box was too busy"
    assert len(cases["status codes"]) == 0  # passed: no child
    out = suite.find("system-out").text
    assert "error rate during the fault: 19.5% > 10%" in out and "a <note> & more" in out
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "failed" and props["exit_code"] == "1"


def test_status_from_passed_when_a_check_has_no_status():
    checks = [{k: v for k, v in c.items() if k != "status"} for c in CHECKS]
    suite = valid(ET.fromstring(junit_xml(report(checks=checks))))
    assert (suite.get("failures"), suite.get("skipped")) == ("1", "1")


def test_a_run_without_checks_is_one_failed_case():
    suite = valid(ET.fromstring(junit_xml(report(checks=[], verdict="error", exit_code=2,
                                                 reason="target did not start: port 8000 in use"))))
    (case,) = suite.findall("testcase")
    assert case.get("name") == "run" and case.get("classname") == "llm-chaos.kill-instance"
    assert case.find("failure").get("message") == "target did not start: port 8000 in use"
    assert suite.get("failures") == "1"


def test_a_run_that_ended_badly_fails_even_when_its_checks_passed():
    passed = [c for c in CHECKS if c["status"] == "passed"]
    suite = valid(ET.fromstring(junit_xml(report(checks=passed, verdict="aborted", exit_code=3,
                                                 reason="abort: error rate over 50%"))))
    assert [c.get("name") for c in suite.findall("testcase")] == ["status codes", "run"]
    assert suite.get("failures") == "1"
    # a passed run with checks gets no extra case
    suite = valid(ET.fromstring(junit_xml(report(checks=passed, verdict="passed", exit_code=0, reason=None))))
    assert [c.get("name") for c in suite.findall("testcase")] == ["status codes"]
    assert suite.get("failures") == "0"


def test_anything_missing_and_bad_characters_still_make_valid_xml():
    valid(ET.fromstring(junit_xml({})))
    weird = [{"name": 'quote " <tag> & \x1b[31mred\x00', "passed": False, "measured": "\x07", "threshold": None,
              "detail": "line\nbreak \ud800"}]
    text = junit_xml(report(checks=weird, notes=["\x0c form feed"]))
    suite = valid(ET.fromstring(text.encode("utf-8", "surrogatepass")))
    case = suite.find("testcase")
    assert case.get("name") == 'quote " <tag> & ?[31mred?'
    assert case.find("failure").text.startswith("line\nbreak")


def test_write_junit_masks_and_writes(tmp_path):
    secret = "sk-live-abcdefghijklmnop"
    path = write_junit(str(tmp_path), report(reason=f"key {secret}"), mask=lambda s: s.replace(secret, "***"))
    assert path == str(tmp_path / "junit.xml")
    text = (tmp_path / "junit.xml").read_text()
    assert secret not in text and "key ***" in text
    valid(ET.parse(path).getroot())
