"""chaos/common.py: the helpers several packages share."""

import subprocess

import psutil
import pytest

from chaos.common import is_loopback, parse_duration, parse_percent, retry_after_headers, stop_group


def test_loopback_is_localhost_127_slash_8_and_ipv6_one_only():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.9.8.7", "localhost", "LOCALHOST", "::1", "[::1]"))
    assert not any(is_loopback(h) for h in ("127.attacker.example", "10.0.0.1", "0.0.0.0", "example.com", "", None))


@pytest.mark.parametrize("value", [10**400, -1, float("nan"), float("inf"), "1e999s", True])
def test_a_duration_past_float_or_below_zero_is_a_value_error(value):
    with pytest.raises(ValueError):
        parse_duration(value)


@pytest.mark.parametrize("value", [10**400, 1.5, "150%", "0.5", float("nan")])
def test_a_percentage_outside_0_to_100_is_a_value_error(value):
    with pytest.raises(ValueError):
        parse_percent(value)


def test_retry_after_rounds_up_and_keeps_milliseconds():
    assert retry_after_headers(2.5) == {"retry-after": "3", "retry-after-ms": "2500"}
    assert retry_after_headers(2.0) == {"retry-after": "2", "retry-after-ms": "2000"}
    assert retry_after_headers(0.2)["retry-after"] == "1"


def test_stop_group_never_touches_a_recycled_pid():
    p = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        started = psutil.Process(p.pid).create_time()
        stop_group(p.pid, started - 100, grace=0.2)  # the journal's start time is another process's
        assert p.poll() is None
        stop_group(p.pid, started, grace=1.0, proc=p)  # ours: stopped
        assert p.returncode is not None
    finally:
        p.kill()
        p.wait()
