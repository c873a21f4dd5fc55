"""chaos.load.limits: a load plan kept within the limits a vendor target states (caps, a pause per user that no
minute can outrun, and refusals where no cap can hold). Real LoadConfigs and plans; nothing is sent."""

import pytest

from chaos.load.driver import LoadConfig, Timeouts
from chaos.load.errors import LoadError
from chaos.load.limits import Limits, apply_limits, request_tokens
from chaos.load.shapes import arrival_rate, fixed, plan_from, ramp, steps
from chaos.load.workloads import WorkloadSpec

URL = "http://127.0.0.1:9"


def config(plan, specs=None, **kw) -> LoadConfig:
    specs = specs or [(WorkloadSpec("chat", input_tokens="30-60", output_tokens="100-2000"), 1.0)]
    return LoadConfig(target=URL, plan=plan, workload=specs, out_dir="unused", **kw)


def most_in_a_minute(cfg: LoadConfig, users: int, duration: float, latency: float = 0.0) -> int:
    """Every user sending as fast as the pause lets it, all starting together: the most request starts any
    60 s window can hold (the worst case of a closed loop)."""
    starts = sorted(u_t for _ in range(users) for u_t in _user_starts(cfg.think_time, latency, duration))
    return max(sum(1 for t in starts if s <= t < s + 60) for s in starts)


def _user_starts(pause: float, latency: float, duration: float):
    t = 0.0
    while t < duration:
        yield t
        t += latency + pause


def test_users_output_and_pause_are_capped_so_no_minute_exceeds_the_rate():
    cfg = config(fixed(12, 300.0))
    notes = apply_limits(cfg, Limits(requests_per_minute=40, max_concurrency=8, max_output_tokens=1024))
    assert cfg.plan.stages[0].users == 8
    assert cfg.workload[0][0].output_tokens == (100, 1024)
    assert most_in_a_minute(cfg, 8, 300.0) <= 40  # 5 a user in any minute, however fast the answers
    assert any("at most 8 users" in n for n in notes) and any("capped at 1024" in n for n in notes)
    assert any("pauses" in n and "40 requests" in n for n in notes)


@pytest.mark.parametrize("rpm, users", [(1, 1), (7, 3), (60, 8), (100, 100), (59, 7)])
def test_the_pause_holds_at_the_edges(rpm, users):
    cfg = config(fixed(users, 600.0))
    apply_limits(cfg, Limits(requests_per_minute=rpm))
    assert most_in_a_minute(cfg, cfg.plan.stages[0].users, 600.0) <= rpm


def test_retries_count_against_the_rate_and_too_many_are_refused():
    cfg = config(fixed(4, 300.0), retries=2)
    apply_limits(cfg, Limits(requests_per_minute=60))
    per_request = most_in_a_minute(cfg, 4, 300.0)
    assert per_request * 3 <= 60  # each request may be tried three times
    with pytest.raises(LoadError, match="cannot carry 2 retries"):
        apply_limits(config(fixed(1, 60.0), retries=2), Limits(requests_per_minute=2))


def test_tokens_per_minute_sets_the_request_budget():
    cfg = config(fixed(4, 300.0), [(WorkloadSpec("chat", input_tokens=1000, output_tokens=1000), 1.0)])
    assert request_tokens(cfg.workload) == 2000
    notes = apply_limits(cfg, Limits(requests_per_minute=600, tokens_per_minute=20_000))
    assert most_in_a_minute(cfg, 4, 300.0) <= 10  # 20,000 / 2,000 a request
    assert any("allow 10 requests/min" in n for n in notes)
    with pytest.raises(LoadError, match="one request may take 2,000 tokens"):
        apply_limits(config(fixed(1, 60.0), cfg.workload), Limits(tokens_per_minute=1999))


def test_open_loop_rates_pools_steps_and_ramps_are_capped():
    cfg = config(arrival_rate([0.5, 5.0], 30.0, poisson=True, max_users=256))
    apply_limits(cfg, Limits(requests_per_minute=120, max_concurrency=16))
    assert [s.rate for s in cfg.plan.stages] == [0.5, 2.0] and all(s.users == 16 for s in cfg.plan.stages)
    assert cfg.think_time >= 60 / (120 // 16)
    s = config(steps([2, 20, 50], 30.0))
    apply_limits(s, Limits(max_concurrency=10))
    assert [x.users for x in s.plan.stages] == [2, 10, 10] and s.think_time == 0.0  # no rate: no pause
    r = config(ramp(1, 64, 60.0))
    apply_limits(r, Limits(max_concurrency=8))
    assert (r.plan.stages[0].users, r.plan.stages[0].ramp_to) == (1, 8)


def test_stability_probes_are_capped_and_counted():
    from chaos.load.stability import with_stability

    specs = with_stability([(WorkloadSpec("chat"), 1.0)], {"max_tokens": 500})
    cfg = config(fixed(2, 60.0), specs)
    apply_limits(cfg, Limits(max_output_tokens=128))
    assert all((s.extra.get("max_tokens", 0) <= 128) if s.name == "stability" else max(s.output_tokens) <= 128
               for s, _ in cfg.workload)
    assert request_tokens(cfg.workload) > 128  # the probe's prompt counts too


def test_what_no_cap_can_hold_is_refused(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"timestamp": 0, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 9000}\n')
    replay = [(WorkloadSpec("replay", replay_file=str(log)), 1.0)]
    with pytest.raises(LoadError, match="timed replay .* cannot be held"):
        apply_limits(config(plan_from({"replay_speed": 2.0, "duration": 10}), replay),
                     Limits(requests_per_minute=60))
    with pytest.raises(LoadError, match="logged requests carry their own max_tokens"):
        apply_limits(config(fixed(1, 10.0), replay), Limits(max_output_tokens=100))
    with pytest.raises(LoadError, match="auto timeouts calibrate"):
        apply_limits(config(fixed(1, 10.0), timeouts=Timeouts(5.0, "auto", 60.0)), Limits(requests_per_minute=60))


def test_limits_refuse_what_is_not_a_whole_number_from_one():
    assert Limits.from_dict(None) is None and Limits.from_dict({}) is None
    assert Limits.from_dict({"max_concurrency": 3}).to_dict() == {"max_concurrency": 3}
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="limits.requests_per_minute must be a whole number"):
            Limits(requests_per_minute=bad)
