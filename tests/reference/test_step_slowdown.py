"""The step_slowdown hook on a real replica: accepted within its bounds, listed, reverted, and the engine's steps
really take longer (decode time from the server's own chaos_timing, with generous margins: no tight timings)."""

import asyncio
import statistics
import time

import pytest

from chaos.reference.config import EngineConfig, preset
from chaos.reference.engine.async_engine import AsyncEngine
from chaos.reference.engine.sequence import SamplingParams

from .http_util import post, request

M = "chaos-reference"


def decode_seconds(base_url, tokens=200) -> float:
    """Server-side first token -> end of one non-streamed completion of `tokens` tokens: engine decode steps."""
    status, _, body = post(base_url, "/v1/completions", {"model": M, "prompt": "slow down", "max_tokens": tokens,
                                                         "ignore_eos": True, "temperature": 0})
    assert status == 200, body
    assert body["usage"]["completion_tokens"] == tokens
    t = body["chaos_timing"]
    return t["end"] - t["first_token"]


def test_step_slowdown_is_accepted_listed_and_reverted(server):
    try:
        status, _, state = post(server.base_url, "/admin/faults", {"step_slowdown": 1.2})
        assert status == 200 and state["active"] == {"step_slowdown": 1.2}
        assert "step_slowdown" in state["available"]
        assert request(server.base_url, "GET", "/admin/faults")[2]["active"] == {"step_slowdown": 1.2}
        status, _, state = request(server.base_url, "DELETE", "/admin/faults/step_slowdown")
        assert status == 200 and state["active"] == {}
    finally:
        request(server.base_url, "DELETE", "/admin/faults")


@pytest.mark.parametrize("value", [0.5, 0.99, 10.5, True, "2", None])
def test_step_slowdown_out_of_bounds_is_refused(server, value):
    status, _, err = post(server.base_url, "/admin/faults", {"step_slowdown": value})
    assert status == 400 and "step_slowdown" in err["error"]["message"], err
    assert request(server.base_url, "GET", "/admin/faults")[2]["active"] == {}


@pytest.mark.slow
def test_step_slowdown_makes_a_replicas_decode_slower(server):
    # tiny preset: ~1 ms a step, 200 tokens in ~0.2-0.5 s on this box. x4 alternated with x1 four times, compared
    # on medians: a burst of other load on the host slows a stretch of requests, not every other one. Expected
    # ~4x or more; the bound asks for 1.5x.
    base, slow = [], []
    try:
        for _ in range(4):
            request(server.base_url, "DELETE", "/admin/faults/step_slowdown")
            base.append(decode_seconds(server.base_url))
            post(server.base_url, "/admin/faults", {"step_slowdown": 4.0})
            slow.append(decode_seconds(server.base_url))
    finally:
        request(server.base_url, "DELETE", "/admin/faults")
    assert statistics.median(slow) > 1.5 * statistics.median(base), (base, slow)


def test_the_engine_waits_at_least_factor_minus_one_times_its_own_step_time():
    # The engine's own step times (step_observer) against the wall time of the same steps: with the hook, the
    # waits add at least (factor - 1) x the steps' sum, whatever else the host is doing (a wait never ends early,
    # and what a wait overshoots is only credited against later waits). Without it, no wait at all.
    eng = AsyncEngine(EngineConfig(model=preset("tiny"), max_model_len=256))
    waits = []
    real_wait = eng._stop.wait
    eng._stop.wait = lambda t=None: (waits.append(t), real_wait(t))[1]

    async def run(factor):
        eng.set_step_slowdown(factor)
        steps, waits[:] = [], []
        eng.step_observer = steps.append
        t0 = time.perf_counter()
        async for _ in eng.generate(f"r{factor}", list(range(1, 20)), SamplingParams(max_tokens=50, ignore_eos=True)):
            pass
        return time.perf_counter() - t0, sum(steps), len(steps), list(waits)

    async def main():
        eng.start()
        try:
            return await run(2.5), await run(1.0)
        finally:
            eng.shutdown()

    (wall, stepped, n, slow_waits), (_, _, n1, plain_waits) = asyncio.run(main())
    assert n == 50 and n1 == 50
    assert wall >= 2.5 * stepped, (wall, stepped)
    assert slow_waits and not plain_waits  # reverted (factor 1.0): the engine never waits


def test_experiments_accept_step_slowdown_within_its_bounds(tmp_path):
    from chaos.experiment.loader import ExperimentError
    from chaos.experiment.model import load_experiment
    from chaos.faults.server_hook import HOOKS

    from ..experiment.test_files import GOOD

    assert "step_slowdown" in HOOKS  # what the server_hook fault sends on
    ok = tmp_path / "slow.yaml"
    ok.write_text(GOOD + "  - {type: server_hook, at: 2s, instance: all, step_slowdown: 1.2, duration: 3s}\n")
    assert load_experiment(str(ok)).faults[-1].params.step_slowdown == 1.2
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD + "  - {type: server_hook, at: 2s, step_slowdown: 0.5, duration: 3s}\n")
    with pytest.raises(ExperimentError, match="step_slowdown"):
        load_experiment(str(bad))
