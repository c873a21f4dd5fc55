"""served_by_all's three outcomes, on records made by hand (a unit test of one function): an instance back
long enough and silent fails, one back too late to be routed requests is not judged, one whose restart failed
fails; and the verdict and exit code that follow."""

from types import SimpleNamespace

from chaos.load.records import RequestRecord
from chaos.verify.checks import Check, verdict_of
from chaos.verify.verdict import RunFacts, served_by_all


class FakeTarget:
    def __init__(self, ids, delay=0.0):
        self.instances = [SimpleNamespace(id=i, url=f"http://127.0.0.1:{9000 + n}") for n, i in enumerate(ids)]
        self.delay = delay

    def routing_delay(self):
        return self.delay


def kill(target, iid, at, back, error=None):
    victim = next(i for i in target.instances if i.id == iid)
    return SimpleNamespace(applied=True, applied_at=at, reverted_at=back, revert_error=error,
                           touches=lambda inst: inst is victim)


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
