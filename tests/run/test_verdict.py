"""served_by_all's three outcomes, on records made by hand (a unit test of one function): an instance back
long enough and silent fails, one back too late to be routed requests is not judged, one whose restart failed
fails, one killed for good is not asked to serve; and the verdict and exit code that follow. Then the SLO
checks: requests sent but left unanswered at the end fail the target, too few sent is not judged."""

from types import SimpleNamespace

from chaos.experiment.model import SLO
from chaos.verify.spec import Verify
from chaos.records import RequestRecord
from chaos.verify.checks import Check, slo_checks, verdict_of
from chaos.verify.verdict import RunFacts, run_checks, served_by_all


class FakeTarget:
    def __init__(self, ids, delay=0.0):
        self.instances = [SimpleNamespace(id=i, url=f"http://127.0.0.1:{9000 + n}") for n, i in enumerate(ids)]
        self.delay = delay

    def routing_delay(self):
        return self.delay


def kill(target, iid, at, back, error=None, for_good=False):
    victim = next(i for i in target.instances if i.id == iid)
    return SimpleNamespace(applied=True, applied_at=at, reverted_at=back, revert_error=error,
                           touches=lambda inst: inst is victim, leaves_down=lambda: for_good)


def recs(spans):
    """(who, start) pairs, each request 0.2 s long."""
    return [RequestRecord(id=str(n), case="chat", endpoint="chat", stream=True, t_sched=t, t_start=t,
                          t_end=t + 0.2, status=200, served_by=who) for n, (who, t) in enumerate(spans)]


def test_silent_instance_back_long_before_the_end_fails():
    t = FakeTarget(["r0", "r1"])
    records = recs([("r0", x / 2) for x in range(60)])  # 0 .. 29.5 s, all on r0
    facts = RunFacts(faults=[kill(t, "r1", 5, 8)], target=t, up_since={"r0": 0.0, "r1": 8.0})
    c = served_by_all(records, None, facts)
    assert c.passed is False and "r1" in c.detail and c.status == "failed"


def test_instance_back_too_late_is_not_judged():
    t = FakeTarget(["r0", "r1"], delay=3.0)
    records = recs([("r0", x / 2) for x in range(60)])
    facts = RunFacts(faults=[kill(t, "r1", 5, 28.5)], target=t, up_since={"r0": 0.0, "r1": 28.5})
    c = served_by_all(records, None, facts)
    assert c.passed is None and c.status == "not_judged"
    assert "r1 was back only 1.0s before the last request" in c.detail and "needs 5.0s" in c.detail
    assert verdict_of([Check("a", True, "", ""), c]) == "not_judged"
    assert verdict_of([Check("a", False, "", ""), c]) == "failed"  # a real failure still fails the run


def test_instance_never_back_is_not_judged_but_a_failed_restart_fails():
    t = FakeTarget(["r0", "r1"])
    records = recs([("r0", x / 2) for x in range(60)])
    down = RunFacts(faults=[kill(t, "r1", 5, None)], target=t, up_since={"r0": 0.0, "r1": None})
    assert served_by_all(records, None, down).passed is None
    broken = RunFacts(faults=[kill(t, "r1", 5, 9, error="r1 exited with 1 before it was healthy")], target=t,
                      up_since={"r0": 0.0, "r1": None})
    c = served_by_all(records, None, broken)
    assert c.passed is False and "restart failed" in c.detail


def test_every_instance_serving_after_its_fault_passes():
    t = FakeTarget(["r0", "r1"])
    records = recs([("r0", x / 2) for x in range(60)] + [("r1", 12.0)])
    facts = RunFacts(faults=[kill(t, "r1", 5, 10)], target=t, up_since={"r0": 0.0, "r1": 10.0})
    c = served_by_all(records, None, facts)
    assert c.passed is True and c.measured == "r0, r1"
    early = RunFacts(faults=[kill(t, "r1", 5, 10)], target=t, up_since={"r0": 0.0, "r1": 13.0})
    assert served_by_all(records, None, early).passed is False  # an answer from before it was back counts not


def test_an_instance_killed_for_good_is_not_asked_to_serve():
    """kill_instance without restart_after: r1 is meant to stay down, so it cannot make the check unjudgeable
    (it used to end every such run "not judged", exit 4); the others are still judged."""
    t = FakeTarget(["r0", "r1"])
    records = recs([("r0", x / 2) for x in range(60)])
    facts = RunFacts(faults=[kill(t, "r1", 5, None, for_good=True)], target=t, up_since={"r0": 0.0, "r1": None})
    c = served_by_all(records, None, facts)
    assert c.passed is True and c.measured == "r0" and "not asked of r1" in c.detail
    silent = RunFacts(faults=[kill(t, "r1", 5, None, for_good=True)], target=t, up_since={"r0": 0.0, "r1": None})
    only_r1 = recs([("r1", x / 2) for x in range(60)])
    assert served_by_all(only_r1, None, silent).passed is False  # r0 served nothing: still fails
    alone = FakeTarget(["r0"])
    gone = RunFacts(faults=[kill(alone, "r0", 5, None, for_good=True)], target=alone, up_since={"r0": None})
    assert served_by_all(records, None, gone).passed is None  # nothing left to judge


def cancelled(start, end):
    return RequestRecord(id=f"c{start}", case="chat", endpoint="chat", stream=True, t_sched=start, t_start=start,
                         t_end=end, outcome="cancelled", error="the load test stopped")


SLO_1S = SLO(p95_latency=1.0, error_rate=0.01)


def test_requests_left_unanswered_at_the_end_fail():
    """A replica hung at the end (hang_s, a first-token timeout longer than the window): every request of the
    window is cancelled when the load stops. The target did not answer: failed, not "not judged"."""
    hung = [cancelled(20 + x, 30.0) for x in range(6)]
    got = slo_checks("steady state re-checked", hung, SLO_1S, min_requests=3)
    assert [c.passed for c in got] == [False], got
    assert "0 of 6 requests answered" in got[0].measured and "did not answer" in got[0].detail
    few = slo_checks("steady state re-checked", hung[:2], SLO_1S, min_requests=3)
    assert [c.passed for c in few] == [None]  # too few sent: the run's timing, not the target
    healthy = recs([("r0", 20 + x / 6) for x in range(30)]) + [cancelled(24.9, 25.0)]
    assert all(c.passed for c in slo_checks("x", healthy, SLO_1S, min_requests=3))
    # 10 answers cannot carry a P95 (it would be the largest one): not judged, saying how many it needs; the
    # steady-state gate, which must decide, judges the point value and says so
    sparse = recs([("r0", 20 + x / 2) for x in range(10)])
    p95 = next(c for c in slo_checks("x", sparse, SLO_1S, min_requests=3) if "p95" in c.name)
    assert p95.passed is None and "needs at least 20 answers (has 10)" in p95.detail
    gate = next(c for c in slo_checks("x", sparse, SLO_1S, min_requests=3, judge_few=True) if "p95" in c.name)
    assert gate.passed is True and "fewer than the 20 a P95 needs" in gate.detail


def test_a_target_wedged_at_the_end_fails_the_re_check_and_slo_after():
    exp = SimpleNamespace(verify=Verify(slo_after=SLO(p95_latency=1.0)), steady_slo=SLO_1S, steady_window=5.0,
                          steady_health=False)
    t = FakeTarget(["r0"])
    records = recs([("r0", x / 2) for x in range(40)]) + [cancelled(20 + x / 2, 30.0) for x in range(20)]
    hook = SimpleNamespace(applied=True, applied_at=5.0, reverted_at=8.0, revert_error=None,
                           touches=lambda inst: True, leaves_down=lambda: False)
    checks = run_checks(exp, records, RunFacts(faults=[hook], target=t, load_t0=0.0))
    by_name = {c.name: c for c in checks}
    assert by_name["steady state re-checked"].passed is False, checks
    assert verdict_of(checks) == "failed"
