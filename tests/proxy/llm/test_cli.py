"""`python -m chaos.proxy.llm`: the ready line, --rules, the loopback guard, SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys

from chaos.common import FAULT_TOKEN_HEADER

from .conftest import chat, request


def test_cli_runs_with_rules_file_token_and_stops_on_sigterm(upstream, tmp_path):
    rules = tmp_path / "rules.yaml"
    rules.write_text("- name: rl\n  effect: status\n  params: {status: 429, retry_after: 1}\n  count: 1\n")
    log = tmp_path / "f.jsonl"
    env = {**__import__("os").environ, "CHAOS_FAULT_TOKEN": "tok"}
    p = subprocess.Popen([sys.executable, "-m", "chaos.proxy.llm", "--listen", "127.0.0.1:0", "--upstream",
                          upstream.url, "--rules", str(rules), "--log", str(log)], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = p.stdout.readline()
        m = re.match(r"LLM fault proxy listening on http://127\.0\.0\.1:(\d+) -> (\S+) "
                     r"\(event loop (uvloop|asyncio)\)$", line.strip())
        assert m and m.group(2) == upstream.url, line
        port = int(m.group(1))
        assert chat(port)[0] == 429 and chat(port)[0] == 200
        assert request(port, "GET", "/__chaos/faults")[0] == 401
        [rule] = json.loads(request(port, "GET", "/__chaos/faults", headers={FAULT_TOKEN_HEADER: "tok"})[2])
        assert rule["applied"] == 1
        assert json.loads(log.read_text().splitlines()[0])["fault"] == "rl"
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0


def test_cli_refuses_a_remote_listen_address_and_bad_rules(upstream, tmp_path):
    out = subprocess.run([sys.executable, "-m", "chaos.proxy.llm", "--listen", "0.0.0.0:0", "--upstream", upstream.url],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--allow-remote" in out.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"name": "x", "effect": "stall", "params": {"for": 1}}]))
    out = subprocess.run([sys.executable, "-m", "chaos.proxy.llm", "--upstream", upstream.url, "--rules", str(bad)],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "params.for" in out.stderr


def test_help_lists_every_effect():
    from chaos.proxy.llm import EFFECTS
    out = subprocess.run([sys.executable, "-m", "chaos.proxy.llm", "--help"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for name in EFFECTS:
        assert re.search(rf"^\s+{name}\s", out.stdout, re.M), name
    assert "after_tokens" in out.stdout and "x-chaos-fault" in out.stdout
