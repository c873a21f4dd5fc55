"""Replay filters: `chaos load --replay-filter` and load.replay_filter select log lines by the logged status, error
code and prompt size. A line filtered out is counted (filtered: N), never sent and never counted as lost. Real
Locust against a real server on loopback that reads each body."""

import json
import os
import subprocess
import sys

import pytest

from chaos.load.replay.notes import replay_notes
from chaos.load.replay.opts import ReplayOptions
from chaos.replay import ReplayFilter, count_body
from chaos.experiment.loadspec import LoadSpec, load_config

from .scripted_server import ScriptedServer

CODES = {200: None, 400: "context_length_exceeded", 500: "server_error"}


class LineServer(ScriptedServer):
    def __init__(self):
        super().__init__("ok", tokens=1)
        self.lines: list[int] = []

    async def _respond(self, writer, body, headers):
        self.lines.append(int(body["messages"][0]["content"].split()[1]))
        return await super()._respond(writer, body, headers)


def envelope_log(path, n=30) -> dict[int, tuple[int, int]]:
    """{line: (logged status, prompt tokens as the reference counts them)}"""
    out = {}
    with open(path, "w") as f:
        for i in range(1, n + 1):
            status = (200, 400, 500)[i % 3]
            body = {"messages": [{"role": "user", "content": f"line {i} " + "x" * (7 * i)}], "max_tokens": 2}
            resp = {"status": status}
            if CODES[status]:
                resp["body"] = {"error": {"code": CODES[status]}}
            f.write(json.dumps({"timestamp": 100 + i * 0.02, "request": {"body": body}, "response": resp}) + "\n")
            out[i] = (status, count_body(body))
    return out


def test_the_filter_text_and_the_experiment_key_parse_and_refuse_what_they_cannot_use():
    f = ReplayFilter.parse("status=400,5xx error_code=context_length_exceeded min_input_tokens=10 max_input_tokens=2000")
    assert f.to_dict() == {"status": [400, "5xx"], "error_code": ["context_length_exceeded"],
                           "min_input_tokens": 10, "max_input_tokens": 2000}
    for bad, why in (("status=4oo", "status filter"), ("size=3", "unknown replay filter key"),
                     ("min_input_tokens=ten", "whole number"), ("status", "KEY=VALUE"),
                     ("min_input_tokens=9 max_input_tokens=3", "above max_input_tokens")):
        with pytest.raises(ValueError, match=why):
            ReplayFilter.parse(bad)
    cfg = load_config(LoadSpec(workload="replay", replay="log.jsonl", replay_scrub=True,
                               replay_filter={"status": [400], "max_input_tokens": 100}), ["http://127.0.0.1:9"], None,
                      None, ".")
    spec = cfg.workload[0][0]
    assert ReplayOptions.of(spec.extra) == ReplayOptions(True, {"status": [400], "max_input_tokens": 100})
    with pytest.raises(ValueError, match="unknown replay filter key"):
        load_config(LoadSpec(replay="x", replay_filter={"code": "x"}), ["http://127.0.0.1:9"], None, None, ".")


@pytest.mark.parametrize("timed", [True, False])
def test_only_matching_lines_are_sent_and_the_rest_are_counted_as_filtered(tmp_path, timed):
    log = tmp_path / "env.jsonl"
    lines = envelope_log(log)
    want = sorted(i for i, (status, n) in lines.items() if status in (400, 500) and 30 <= n <= 150)
    assert 5 < len(want) < 20
    out = tmp_path / "out"
    shape = ["--replay-speed", "4"] if timed else ["--rate", "40", "--max-requests", str(len(want))]
    with LineServer() as srv:
        p = subprocess.run([sys.executable, "-m", "chaos", "load", srv.url, "--replay", str(log), *shape,
                            "--replay-filter", "status=400,500 min_input_tokens=30 max_input_tokens=150",
                            "--duration", "20s", "--out", str(out), "--interval", "0"],
                           capture_output=True, text=True, timeout=90)
        got = list(srv.lines)
    assert p.returncode == 0, p.stdout + p.stderr
    assert sorted(got) == want  # each matching line once, nothing else
    summary = json.load(open(os.path.join(out, "summary.json")))
    filtered = len(lines) - len(want)
    assert summary["replay_filter"]["filtered"] == filtered
    assert f"filtered: {filtered} lines of the log" in p.stdout
    if timed:
        acc = summary["replay"]
        assert (acc["window"], acc["sent"], acc["not_sent"], acc["filtered"]) == (len(want), len(want), 0, filtered)
        head = next(x for x in p.stdout.splitlines() if x.startswith("replay: sent"))
        assert head.startswith(f"replay: sent {len(want)} of {len(want)}, not sent: 0") and f"filtered: {filtered}" in head


def test_failed_replayed_requests_are_named_by_source_line_bounded():
    facts = {"failed": {"count": 14, "lines": [{"line": 10 + i, "why": "400 context_length_exceeded"}
                                               for i in range(13)] + [{"line": 90, "why": "timeout total"}]}}
    (note,) = replay_notes(facts)
    assert note.startswith("replayed requests that failed: line 10 (400 context_length_exceeded), line 11 (")
    assert note.endswith("line 19 (400 context_length_exceeded) ... and 4 more") and len(note) < 500


def test_filtered_lines_come_out_in_time_order_and_the_replay_starts_at_the_first_kept_one(tmp_path):
    from chaos.load.replay.log import iter_replay

    log = tmp_path / "env.jsonl"
    with open(log, "w") as f:
        for i in range(10):  # odd lines short (kept), even lines long (filtered), one second apart
            f.write(json.dumps({"timestamp": 100 + i, "request": {"body": {"prompt": "x" * (5 if i % 2 else 50)}},
                                "response": {"status": 200}}) + "\n")
    items = list(iter_replay(str(log), window=3, options=ReplayOptions(False, {"max_input_tokens": 10})))
    assert [(i.lineno, i.filtered) for i in items] == [(n, n % 2 == 1) for n in range(1, 11)]
    assert [i.offset_s for i in items if not i.filtered] == [0.0, 2.0, 4.0, 6.0, 8.0]  # from line 2, not line 1
