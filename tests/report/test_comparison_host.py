"""`chaos report --compare` and the host: both runs' hosts side by side, and a latency change where they differed
is warned of and not called, while an error-rate change there still is (synthetic reports, known truth)."""

from chaos.report.comparison import _guard, host_comparison, host_markdown, summary
from chaos.verify import compare as C


def _rep(steady: float, fault: float) -> dict:
    def h(o):
        return {"samples": 8, "ncpu": 2, "others": o, "others_max": o, "own": 1.4, "steal": 0.0, "load1": 2.0,
                "psi_cpu": 0.4, "psi_io": 0.0, "psi_mem": 0.0}
    return {"phases": [{"name": "steady state", "start": 0, "end": 8}, {"name": "kill-r1", "start": 8, "end": 16}],
            "host": {"load": h((steady + fault) / 2), "phases": {"steady state": h(steady), "kill-r1": h(fault)}}}


def _fig(phase, kind, verdict, name="E2E p50"):
    return {"figure": f"{phase} {name}", "phase": phase, "kind": kind, "verdict": verdict, "p_value": 0.001,
            "a": {"value": 0.05, "low": 0.049, "high": 0.051, "n": 300}, "b": {"value": 0.08, "low": 0.078,
                                                                             "high": 0.082, "n": 300}}


def test_where_the_hosts_differed_a_latency_change_is_not_called_and_said_why():
    host = host_comparison(_rep(0.02, 0.03), _rep(0.02, 0.95))
    assert host["measured"] and set(host["differs"]) == {"kill-r1", "whole load"}
    worse_there = _guard(_fig("kill-r1", "latency", C.WORSE), host)
    assert worse_there["verdict"] == C.NOT_JUDGED and worse_there["host"] and "0.03 and 0.95 cores" in worse_there["why"]
    assert "not called" in summary(worse_there) and "A 50 ms" in summary(worse_there)
    assert _guard(_fig("steady state", "latency", C.WORSE), host)["verdict"] == C.WORSE  # the hosts agreed there
    errors = _fig("kill-r1", "proportion", C.WORSE, "error rate")
    assert _guard(errors, host)["verdict"] == C.WORSE  # a slow host does not make HTTP errors
    md = "\n".join(host_markdown(host))
    assert "Warning: the host differed" in md and "| kill-r1 | others 0.03 cores" in md


def test_runs_without_host_figures_say_so():
    host = host_comparison({"phases": []}, _rep(0.0, 0.0))
    assert not host["measured"] and host["differs"] == {}
    assert "not measured" in "\n".join(host_markdown(host))
    f = _fig("kill-r1", "latency", C.WORSE)
    assert _guard(f, host) is f
