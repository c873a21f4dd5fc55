"""Output stability scoring on records built to pass and to fail by a known margin: identical probe answers
against each key's baseline, JSON validity, truncation, loops and garbled text, each a rate with a Wilson interval,
per phase, with examples; and the rules for not judging."""

from chaos.verify.stabilityspec import StabilitySpec
from chaos.records import RequestRecord
from chaos.verify.stability import (AFTER, BEFORE, baselines, fault_phases, phase_of, stability_checks,
                                    stability_report, windows_of)

FAULT = [(100.0, 110.0, "kill-r1")]  # one fault window


def rec(i, t, key=None, sha="aaaa", head="the answer", outcome="ok", finish="stop", out=20, asked=64, **kw):
    """A complete answer sent at t, 1 s long."""
    return RequestRecord(id=f"r{i}", case="stability" if key else "chat", endpoint="chat", stream=True, t_sched=t,
                         t_start=t, t_end=t + 1, status=200, outcome=outcome, finish_reason=finish,
                         output_tokens=out, requested_tokens=asked, stability_key=key, output_sha=sha,
                         output_head=head, repeat_ngram=kw.pop("loop", 0.0), garbled=kw.pop("garbled", 0),
                         served_by=kw.pop("served_by", "r0"), **kw)


def probes(n_before=10, n_during=10, n_after=10, differ_during=0, keys=("s0-chat", "s1-json_object")):
    """Probe answers spread before, during and after FAULT; the first differ_during during it answer otherwise."""
    out, i = [], 0
    for phase, n, t0 in ((BEFORE, n_before, 50.0), ("kill-r1", n_during, 100.5), (AFTER, n_after, 120.0)):
        for j in range(n):
            key = keys[j % len(keys)]
            changed = phase == "kill-r1" and j < differ_during
            out.append(rec(i, t0 + j * 0.5 / max(n, 1), key, sha=("bbbb" if changed else "sha-" + key),
                           head="garbled" if changed else "answer of " + key, served_by="r1",
                           fault="garble-r1; garble" if changed else None))
            i += 1
    return out


def by_name(checks):
    return {c.name: c for c in checks}


def test_identical_answers_through_the_fault_pass_with_n_and_an_interval():
    checks, rep = stability_checks(probes(), {"identical": "100%"}, FAULT)
    c = by_name(checks)["stability: identical outputs"]
    assert c.passed is True and "(n=30)" in c.measured
    ident = rep["identical"]
    assert ident["status"] == "passed" and ident["count"] == ident["n"] == 30 and ident["rate"]["value"] == 1.0
    assert ident["rate"]["method"] == "wilson" and ident["rate"]["low"] < 1.0 == ident["rate"]["high"]
    assert set(ident["by_phase"]) == {BEFORE, "kill-r1", AFTER} and ident["by_phase"]["kill-r1"]["n"] == 10
    assert rep["probes"]["keys"] == ["s0-chat", "s1-json_object"] and rep["probes"]["unanchored"] == 0


def test_answers_that_change_during_the_fault_fail_with_examples():
    checks, rep = stability_checks(probes(differ_during=3), {"identical": "90%"}, FAULT)
    c = by_name(checks)["stability: identical outputs"]
    # 27 of 30 = 90% meets 90%; one more would not
    assert c.passed is True
    checks, rep = stability_checks(probes(differ_during=4), {"identical": "90%"}, FAULT)
    c = by_name(checks)["stability: identical outputs"]
    assert c.passed is False and c.measured.startswith("86.67%") and "garble-r1; garble" in c.detail
    ex = rep["identical"]["examples"]
    assert len(ex) == 4 and rep["identical"]["failures"] == 4
    assert ex[0]["phase"] == "kill-r1" and ex[0]["got_head"] == "garbled" and ex[0]["served_by"] == "r1"
    assert ex[0]["expected_head"] == "answer of s0-chat" and ex[0]["fault"] == "garble-r1; garble"
    during = rep["identical"]["by_phase"]["kill-r1"]
    assert during["count"] == 6 and during["n"] == 10 and during["rate"]["value"] == 0.6


def test_examples_are_capped_at_five():
    _, rep = stability_checks(probes(differ_during=10), {}, FAULT)
    assert len(rep["identical"]["examples"]) == 5 and rep["identical"]["failures"] == 10


def test_the_baseline_is_the_most_common_answer_before_the_first_fault():
    rs = [rec(0, 10, "k", sha="x"), rec(1, 11, "k", sha="y"), rec(2, 12, "k", sha="y"),
          rec(3, 105, "k", sha="z"), rec(4, 106, "k", sha="z"), rec(5, 107, "k", sha="z")]  # z only during it
    assert baselines(rs, windows_of(FAULT))["k"].output_sha == "y"
    _, rep = stability_checks(rs, {"min_repeats": 1}, FAULT)
    assert rep["identical"]["count"] == 2 and rep["identical"]["n"] == 6  # the x before the fault differs too


def test_too_few_probe_answers_after_the_fault_is_not_judged_and_says_what_it_needs():
    checks, rep = stability_checks(probes(n_during=2, n_after=3), {}, FAULT)
    c = by_name(checks)["stability: identical outputs"]
    assert c.passed is None and "needs at least 10" in c.detail and rep["identical"]["status"] == "not_judged"
    # but answers that already differ fail, however few
    checks, _ = stability_checks(probes(n_during=2, n_after=3, differ_during=1), {}, FAULT)
    assert by_name(checks)["stability: identical outputs"].passed is False


def test_no_baseline_before_the_first_fault_is_not_judged():
    checks, rep = stability_checks(probes(n_before=0), {}, FAULT)
    c = by_name(checks)["stability: identical outputs"]
    assert c.passed is None and "start the fault later" in c.detail
    assert rep["probes"]["unanchored"] == 20


def test_without_faults_the_whole_run_is_the_baseline():
    rs = probes(n_before=20, n_during=0, n_after=0)
    checks, rep = stability_checks(rs, {}, [])
    assert by_name(checks)["stability: identical outputs"].passed is True
    assert list(rep["identical"]["by_phase"]) == ["whole run"]


def test_json_validity_rate_counts_only_requests_for_json():
    rs = [rec(i, 10 + i, json_valid=i >= 2) for i in range(20)] + [rec(99, 50)]  # 18 of 20; the last asked no JSON
    checks, rep = stability_checks(rs, {"json_valid": "90%"}, [])
    assert by_name(checks)["stability: JSON validity"].passed is True and rep["json_valid"]["n"] == 20
    checks, rep = stability_checks(rs, {"json_valid": "95%"}, [])
    c = by_name(checks)["stability: JSON validity"]
    assert c.passed is False and c.measured.startswith("90.00%") and len(rep["json_valid"]["examples"]) == 2
    assert rep["json_valid"]["rate"]["value"] == 0.9  # what chaos.verify.diagnosis reads


def test_truncation_counts_length_only_where_the_baseline_stopped():
    before = [rec(i, 10 + i, "k", finish="stop", out=20) for i in range(10)]
    cut = [rec(10 + i, 120 + i, "k", sha="cut", finish="length", out=64) for i in range(2)]
    capped = [rec(20 + i, 10 + i, "c", sha="c", finish="length", out=64) for i in range(5)]  # never stops: no stop due
    checks, rep = stability_checks(before + cut + capped, {"max_truncated": "10%", "min_repeats": 1}, FAULT)
    c = by_name(checks)["stability: truncation"]
    assert rep["truncated"]["n"] == 12 and rep["truncated"]["count"] == 2 and c.passed is False  # 16.7% > 10%
    assert rep["truncated"]["examples"][0]["expected_tokens"] == 20


def test_loops_over_the_threshold_and_answers_forced_past_eos_left_out():
    rs = [rec(i, 10 + i, loop=0.9 if i < 3 else 0.1) for i in range(30)]
    rs += [rec(100 + i, 50 + i, loop=1.0, ignore_eos=True) for i in range(5)]
    checks, rep = stability_checks(rs, {"max_repetition": "10%"}, [])
    c = by_name(checks)["stability: repetition loops"]
    assert rep["repetition"]["n"] == 30 and rep["repetition"]["count"] == 3 and c.passed is True  # 10% <= 10%
    checks, _ = stability_checks(rs, {"max_repetition": "10%", "loop_threshold": 0.05}, [])
    assert by_name(checks)["stability: repetition loops"].passed is False  # now every answer is a loop


def test_garbled_answers_fail_a_zero_threshold_with_their_counts():
    rs = [rec(i, 10 + i, garbled=2 if i == 7 else 0, head="bad \ufffd\ufffd" if i == 7 else "fine") for i in range(40)]
    checks, rep = stability_checks(rs, {}, [])
    c = by_name(checks)["stability: garbled text"]
    assert c.passed is False and "1 of 40" in c.detail and "\\ufffd" in c.detail
    assert rep["garbled"]["examples"][0]["garbled"] == 2 and rep["garbled"]["rate"]["value"] == 0.025


def test_off_reports_without_judging_and_defaults_with_nothing_to_judge_are_left_out():
    rs = [rec(i, 10 + i, garbled=3) for i in range(10)]  # no probe, no JSON request
    checks, rep = stability_checks(rs, {"max_garbled": "off"}, [])
    names = by_name(checks)
    assert "stability: garbled text" not in names and rep["garbled"]["status"] == "off"
    assert rep["garbled"]["rate"]["value"] == 1.0
    assert "stability: JSON validity" not in names and rep["json_valid"]["status"] == "not_applicable"
    assert "stability: identical outputs" not in names
    checks, _ = stability_checks(rs, {"json_valid": "100%", "max_garbled": "off"}, [])
    c = by_name(checks)["stability: JSON validity"]  # written, nothing to judge: not judged, not silently passed
    assert c.passed is None and "no complete answer to a request for JSON" in c.detail


def test_failed_requests_are_not_outputs():
    rs = probes() + [rec(500, 105, "s0-chat", sha=None, outcome="reset")]
    _, rep = stability_checks(rs, {}, FAULT)
    assert rep["identical"]["n"] == 30 and rep["probes"]["not_complete"] == 1 and rep["probes"]["sent"] == 31


def test_phases_and_fault_windows():
    ws = windows_of([(100.0, None, "x"), (50.0, 60.0)])
    assert [w.name for w in ws] == ["fault 2", "x"] and ws[1].end == float("inf")
    assert phase_of(rec(0, 10), ws) == BEFORE and phase_of(rec(0, 55), ws) == "fault 2"
    assert phase_of(rec(0, 70), ws) == "between faults" and phase_of(rec(0, 200), ws) == "x"
    both = windows_of([(10.0, 20.0, "garble-r1"), (10.0, 25.0, "replace-r0"), (30.0, 31.0, "later")])
    assert [(w.start, w.end, w.name) for w in both] == [(10.0, 25.0, "garble-r1 + replace-r0"), (30.0, 31.0, "later")]

    class F:  # the runner's fault objects, as far as fault_phases reads them
        def __init__(self, applied, at, rev, name):
            self.applied, self.applied_at, self.reverted_at = applied, at, rev
            self.spec = type("S", (), {"name": name})()

    assert fault_phases([F(True, 1.0, None, "a"), F(False, None, None, "b"), F(True, 3.0, 4.0, "c")], 9.0) == \
        [(1.0, 9.0, "a"), (3.0, 4.0, "c")]


def test_report_is_none_for_records_without_output_fields():
    old = [RequestRecord(id="x", case="chat", endpoint="chat", stream=True, t_sched=1, t_start=1, t_end=2)]
    assert stability_report(old) is None
    unasked = stability_report(probes(), None, FAULT)  # verify: has no stability: rates only, nothing judged
    assert all(unasked[c]["status"] == "off" for c in ("identical", "garbled")) and unasked["identical"]["n"] == 30
    rep = stability_report(probes(), StabilitySpec(identical=0.5), FAULT)
    assert rep["identical"]["status"] == "passed" and rep["thresholds"]["identical"] == 0.5
    assert rep["phases"] == [{"name": "kill-r1", "start": 100.0, "end": 110.0}]
