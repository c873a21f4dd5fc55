"""Fault labels on records: x-chaos-fault through a real Locust run, the fault proxy's log, the summary's counts."""

import json

from chaos.load.driver import LoadConfig, run_load
from chaos.records.labels import label_records, merge_fault, merge_header, rule_and_effect, split_labels
from chaos.records import RequestRecord, read_records
from chaos.load.shapes import fixed
from chaos.records.summary import format_table, summarize
from chaos.load.workloads import WorkloadSpec

from .scripted_server import ScriptedServer

CHAT = [(WorkloadSpec("chat", input_tokens="24-40", output_tokens="4-8"), 1.0)]


def rec(i, outcome="ok", fault=None, **kw) -> RequestRecord:
    return RequestRecord(id=f"r{i}", case="chat", endpoint="chat", stream=True, t_sched=float(i),
                         t_start=float(i), t_first=i + 0.1, t_end=i + 1.0, outcome=outcome, fault=fault,
                         output_tokens=5, **kw)


def test_header_labels_and_retry_causes_from_a_real_locust_run(tmp_path):
    # One user, two requests in turn: the first is hit, reset, throttled, then answered with a slowed stream;
    # the second is hit once and its retry is not.
    script = [("http503", "drop-503; status"), ("reset_early", None), ("http429", None),
              ("ok", ["slow; delay", "trim; content"]),  # two rules acted: two headers
              ("http503", "drop-503; status"), ("ok", None)]
    with ScriptedServer("ok", gap=0.01, script=script) as srv:
        cfg = LoadConfig(target=srv.url, plan=fixed(1, 20.0, max_requests=2), workload=CHAT,
                         out_dir=str(tmp_path / "out"), retries=3, backoff_s=0.05)
        result = run_load(cfg, progress=lambda line: None)
    records = sorted(read_records(result.records_path), key=lambda r: r.t_start)  # the file Locust wrote
    assert srv.received == 6 and len(records) == 2
    first, second = records
    assert first.outcome == second.outcome == "ok"
    assert first.fault == "drop-503; status, slow; delay, trim; content"
    assert first.retries == 3 and first.retry_causes == ["503", "reset", "429"]
    assert first.retry_statuses == [503, 429]
    assert second.fault == "drop-503; status"  # the hit stays though the retry was clean
    assert second.retries == 1 and second.retry_causes == ["503"]
    # Every attempt of a request carries the record's id, so the proxy's log names the logical request.
    assert srv.request_ids == [first.id] * 4 + [second.id] * 2

    overall = json.load(open(result.out_dir + "/summary.json"))["overall"]
    assert overall["faults"] == {"drop-503; status": {"requests": 2, "ok": 2, "cancelled": 0, "errors": {}},
                                 "slow; delay": {"requests": 1, "ok": 1, "cancelled": 0, "errors": {}},
                                 "trim; content": {"requests": 1, "ok": 1, "cancelled": 0, "errors": {}}}
    assert overall["retry_causes"] == {"503": 2, "reset": 1, "429": 1}


def test_unfaulted_run_has_no_labels(tmp_path):
    with ScriptedServer("ok", gap=0.0) as srv:
        cfg = LoadConfig(target=srv.url, plan=fixed(1, 10.0, max_requests=2), workload=CHAT,
                         out_dir=str(tmp_path / "out"))
        result = run_load(cfg, progress=lambda line: None)
    records = read_records(result.records_path)
    assert len(records) == 2 and all(r.fault is None and r.retry_causes == [] for r in records)
    assert result.steps[0].faults == {} and result.steps[0].retry_causes == {}


def test_label_records_from_logs_fills_only_unlabelled_records(tmp_path):
    records = [rec(0, "reset"), rec(1, "http_error", fault="drop; status"), rec(2, "timeout"), rec(3),
               rec(4, "reset")]
    log = tmp_path / "proxy.jsonl"
    lines = [
        {"t": 1.0, "request_id": "r0", "fault": "cut", "effect": "reset", "detail": "after 3 chunks, mid-stream",
         "method": "POST", "path": "/v1/chat/completions"},
        {"t": 1.1, "request_id": "r1", "fault": "other", "effect": "status", "detail": "503"},  # has its header
        {"t": 1.2, "request_id": "r2", "fault": "hang", "effect": "stall", "detail": ""},
        {"t": 1.3, "request_id": "r2", "fault": "hang", "effect": "stall", "detail": ""},  # its retry, the same
        {"t": 1.4, "request_id": "nobody", "fault": "x", "effect": "y"},
        "not json at all",
        {"t": 1.5, "request_id": "r3"},  # no fault named
    ]
    cut = json.dumps({"t": 1.6, "request_id": "r4", "fault": "cut", "effect": "reset"})[:30]  # killed mid-write
    log.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines) + cut)
    second = tmp_path / "proxy2.jsonl"
    second.write_text(json.dumps({"request_id": "r2", "fault": "slow", "effect": "delay", "detail": "2 s"}) + "\n")

    n = label_records(records, [str(log), str(tmp_path / "missing.jsonl"), str(second)])
    assert n == 2
    assert records[0].fault == "cut; reset; after 3 chunks, mid-stream"
    assert records[1].fault == "drop; status"  # the header's label is kept
    assert records[2].fault == "hang; stall, slow; delay; 2 s"
    assert records[3].fault is None and records[4].fault is None
    assert label_records(records, [str(log)]) == 0  # all that could be labelled is


def test_fault_and_retry_causes_round_trip_and_old_files_still_read(tmp_path):
    r = rec(0, retries=2, retry_statuses=[503], retry_causes=["503", "timeout:first_token"],
            fault="cut; reset; after 3 chunks, mid-stream")
    old = json.loads(rec(1, retries=2, retry_statuses=[429]).to_json())
    del old["fault"], old["retry_causes"]  # a file written before these fields
    path = tmp_path / "requests.jsonl"
    path.write_text(r.to_json() + "\n" + json.dumps(old) + "\n")
    back, legacy = read_records(str(path))
    assert back.fault == r.fault and back.retry_causes == r.retry_causes
    assert legacy.fault is None and legacy.retry_causes == []
    s = summarize([back, legacy], "step")
    assert s.retry_causes == {"503": 1, "timeout:first_token": 1, "429": 1, "unknown": 1}


def test_summary_counts_by_fault_and_the_table_shows_them():
    rs = [rec(0, fault="drop; status"), rec(1, "http_error", fault="drop; status"),
          rec(2, "reset", fault="cut; reset; after 1 chunk"), rec(3, "reset", fault="cut; reset; after 2 chunks"),
          rec(4, fault="drop; status, slow; delay"), rec(5), rec(6, "cancelled", fault="slow; delay")]
    s = summarize(rs, "step")
    assert s.faults == {
        "drop; status": {"requests": 3, "ok": 2, "cancelled": 0, "errors": {"http_error": 1}},
        "cut; reset": {"requests": 2, "ok": 0, "cancelled": 0, "errors": {"reset": 2}},  # details grouped
        "slow; delay": {"requests": 2, "ok": 1, "cancelled": 1, "errors": {}},
    }
    table = format_table([s])
    assert "fault cut; reset: 2 requests (ok 0, reset 2)" in table
    assert "fault drop; status: 3 requests (ok 2, http_error 1)" in table
    assert "fault slow; delay: 2 requests (ok 1, cancelled 1)" in table


def test_merge_header_takes_every_value():
    class Multi(dict):  # what geventhttpclient gives: getlist for a repeated header
        def getlist(self, name):
            return self.get(name, [])

    assert merge_header(None, Multi({"x-chaos-fault": ["a; b", "c; d"]})) == "a; b, c; d"
    assert merge_header("a; b", {"x-chaos-fault": "c; d, a; b"}) == "a; b, c; d"  # joined by an intermediary
    assert merge_header("a; b", {"x-chaos-fault": ["e; f"]}) == "a; b, e; f"
    assert merge_header("a; b", {}) == "a; b" and merge_header(None, None) is None


def test_merge_and_split_labels():
    assert merge_fault(None, "") is None and merge_fault(None, "  ") is None
    assert merge_fault(None, "a; b") == "a; b"
    assert merge_fault("a; b", "a; b") == "a; b"
    assert merge_fault("a; b", "c; d") == "a; b, c; d"
    assert merge_fault("a; b, c; d", "a; b") == "a; b, c; d"
    # a detail that holds ", " stays one label
    assert split_labels("cut; reset; after 3 chunks, mid-stream, x; y") == ["cut; reset; after 3 chunks, mid-stream",
                                                                            "x; y"]
    assert rule_and_effect("cut; reset; after 3 chunks, mid-stream") == "cut; reset"
    assert split_labels(None) == []


class _ProxyThread:
    """The real LLM fault proxy (chaos.proxy.llm) on an event loop of its own thread, between load and server."""

    def __init__(self, upstream: str, log_path: str):
        import asyncio
        import threading

        from chaos.proxy.llm import LLMProxy

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.proxy = LLMProxy(upstream, host="127.0.0.1", port=0, token=None, log_path=log_path)
        self.run(self.proxy.start())

    def run(self, coro):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def close(self):
        try:
            self.run(self.proxy.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(5)
            self.loop.close()


def test_through_the_real_fault_proxy_header_and_log(tmp_path):
    log = tmp_path / "faults.jsonl"
    with ScriptedServer("ok", gap=0.0) as srv:
        px = _ProxyThread(srv.url, str(log))
        try:
            target = f"http://127.0.0.1:{px.proxy.port}"
            px.proxy.add_rule({"name": "rl", "effect": "status", "params": {"status": 503}, "count": 1,
                               "match": {"method": "POST"}})  # not the driver's GET /v1/models
            cfg = LoadConfig(target=target, plan=fixed(1, 10.0, max_requests=1), workload=CHAT,
                             out_dir=str(tmp_path / "a"), retries=2, backoff_s=0.05)
            hit = read_records(run_load(cfg, progress=lambda line: None).records_path)
            px.proxy.remove_rule("rl")
            px.proxy.add_rule({"name": "c", "effect": "close", "count": 1, "match": {"method": "POST"}})
            cfg = LoadConfig(target=target, plan=fixed(1, 10.0, max_requests=1), workload=CHAT,
                             out_dir=str(tmp_path / "b"))
            closed = read_records(run_load(cfg, progress=lambda line: None).records_path)
        finally:
            px.close()
    assert len(hit) == 1 and hit[0].outcome == "ok", hit
    assert hit[0].fault == "rl; status" and hit[0].retry_causes == ["503"]  # the header of the first attempt
    assert len(closed) == 1 and closed[0].outcome != "ok" and closed[0].fault is None  # no response, no header
    assert label_records(hit + closed, [str(log)]) == 1
    assert closed[0].fault.startswith("c; close") and hit[0].fault == "rl; status"
