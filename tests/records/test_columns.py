"""Columns read streaming from requests.jsonl against the record list: every column, every figure computed from
them (phases, recovery, the step table, the diagnosis, the page's series), chunk boundaries, the lines
read_records skips, older and newer writers, and the histogram path past the gap cap."""

import json

import numpy as np
import pytest

from chaos.verify.spec import SLO
from chaos.records import RequestRecord, read_records
from chaos.records import colread, columns, gaphist
from chaos.records.columns import Columns
from chaos.records.summary import summarize_steps
from chaos.report import series
from chaos.verify import diagnosis, phases, recovery
from chaos.verify.phases import cut, phase_table

T0 = 1_700_000_000.0
NUMERIC = ("t_sched", "t_start", "t_first", "t_end", "status", "input_tokens", "output_tokens", "retries",
           "itl_dropped", "fixed_output", "ended_early", "input_mismatch", "itl_n")
JOURNAL = [
    {"t": T0 + 20, "event": "fault_applying", "fault": "kill", "type": "kill_instance",
     "plan": {"instances": [{"id": "r1"}]}},
    {"t": T0 + 26, "event": "fault_reverted", "fault": "kill",
     "instances": [{"id": "r1", "up_since": T0 + 25.5}]},
]
SLO_ = SLO(p95_latency=1.0, error_rate=0.05)


def records(n=600, seed=5):
    """A run with every kind of record the analysis distinguishes: ok streams, 5xx and 429 answers, timeouts,
    connection failures on a killed instance, cancelled ones at the end, fault labels, retries (with causes and
    from before them), fixed lengths ended early, exact counts the server disagreed with."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        t = T0 + i * 0.1
        inst = ("r0", "r1", "r2")[i % 3]
        dur = float(rng.lognormal(np.log(0.4), 0.3))
        gaps = [int(g) for g in rng.lognormal(np.log(12_000), 0.4, int(rng.integers(0, 25)))]
        r = RequestRecord(id=f"{i:08d}-{seed}", case=("chat", "rag")[i % 2], endpoint="chat", stream=True,
                          t_sched=t, t_start=t + 0.001 * (i % 4), t_first=t + dur / 4, t_end=t + dur, status=200,
                          served_by=inst, step=("users=4", "users=8", None)[(i // 200) % 3], itl_us=gaps,
                          output_tokens=len(gaps) + 1, requested_tokens=len(gaps) + 1 + (i % 5 == 0),
                          fixed_output=i % 2 == 0, finish_reason="stop" if i % 5 == 0 else "length",
                          input_tokens=50 + i % 300, server_input_tokens=50 + i % 300 + (i % 37 == 0))
        if 20 <= t - T0 < 23 and inst == "r1":
            r.outcome, r.status, r.t_first, r.itl_us, r.t_end = "connect_error", None, None, [], t + 0.002
        elif i % 41 == 0:
            r.outcome, r.status, r.error_code, r.t_first, r.itl_us = "http_error", 503, "overloaded", None, []
        elif i % 53 == 0:
            r.outcome, r.status, r.error_code, r.timeout_kind = "timeout", None, "timeout", "total"
        elif i % 67 == 0:
            r.outcome, r.status, r.error_code = "http_error", 400, "context_length_exceeded"
        if i % 29 == 0:
            r.fault = "slow-r1; delay 200ms" if i % 2 else "cut; reset, detail, more; stall; 2s"
        if i % 31 == 0:
            r.retries, r.retry_statuses, r.retry_causes = 2, [503, 429], ["503", "reset"]
        if i % 47 == 0:
            r.retries, r.retry_statuses = 2, [503]  # a record from before retry_causes
        if i >= n - 4:
            r.outcome, r.t_end, r.t_first = "cancelled", None, None
        out.append(r)
    return out


def write(path, recs, extra: list[str] = ()):
    path.write_text("".join(r.to_json() + "\n" for r in recs) + "".join(extra))
    return str(path)


def same_columns(a: Columns, b: Columns):
    assert a.n == b.n
    for name in NUMERIC:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    for name in colread.STRINGS + ("retry_causes",):
        assert [a.tables[name][k] for k in getattr(a, name)] == [b.tables[name][k] for k in getattr(b, name)], name
    assert np.array_equal(a.gaps, b.gaps)


def analysis(recs_or_cols):
    windows = recovery.fault_windows(JOURNAL)
    rec = recovery.recovery(recs_or_cols, JOURNAL, SLO_, (T0, T0 + 20), 5.0)
    cuts = cut(windows, T0, T0 + 61, 10, (rec["run"] or {}).get("time_to_failover", {}).get("at"))
    return {"recovery": rec, "phases": phase_table(recs_or_cols, cuts), "open": phase_table(recs_or_cols, cuts, True),
            "steps": [s.to_dict() for s in summarize_steps(recs_or_cols, ["users=8"], False)],
            "diagnosis": diagnosis.diagnose(recs_or_cols, [], None, None)}


def test_columns_equal_the_record_list_and_every_figure_is_identical(tmp_path):
    recs = records()
    path = write(tmp_path / "requests.jsonl", recs)
    listed = read_records(path)
    cols = Columns.read(path)
    same_columns(cols, Columns.from_records(listed))
    assert cols.n == len(recs) and cols.gaps.dtype == np.uint32
    old, new = analysis(listed), analysis(cols)
    assert old == new
    assert json.dumps(old) == json.dumps(new)  # the order of every dict too (errors by first appearance)
    fo = new["recovery"]["faults"][0]
    assert fo["time_to_detect"]["evidence"].startswith("request 00000") and "served by r1" in \
        fo["time_to_detect"]["evidence"]
    assert new["diagnosis"] and new["steps"][0]["step"] == "users=8" and new["steps"][0]["faults"]
    assert [s["step"] for s in new["steps"]] == ["users=8", "users=4", "all"]
    for open_loop in (False, True):  # the page's series
        a, b = series.columns(listed, None, open_loop), series.columns(cols, None, open_loop)
        for f in ("sent", "done", "ttft", "e2e", "spent", "outcome", "error", "label_rec", "label_idx"):
            assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=getattr(a, f).dtype.kind == "f"), f
        assert (a.t0, a.classes, a.labels) == (b.t0, b.classes, b.labels) and len(a.label_rec) > 10


def test_chunk_boundaries_do_not_matter(tmp_path):
    path = write(tmp_path / "requests.jsonl", records(200))
    whole = Columns.read(path)
    for chunk in (1, 700, 4096, 100_000):
        same_columns(Columns.read(path, chunk_bytes=chunk), whole)


def test_lines_read_records_skips_are_skipped(tmp_path):
    recs = records(120)
    good = [r.to_json() + "\n" for r in recs]
    bad = ["not json\n", "[1, 2]\n", '{"id": "x", "case": "chat"}\n', '"a string"\n', "\n",
           json.dumps({**json.loads(good[0]), "itl_us": None}) + "\n", '{"id": "cut-by-a-crash", "ca' + "\n"]
    lines = good[:50] + bad + good[50:] + [good[0][:-30]]  # ... and a last line cut mid-write, no newline
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(lines))
    listed = read_records(str(path))
    assert len(listed) == 120
    same_columns(Columns.read(str(path), chunk_bytes=900), Columns.from_records(listed))
    assert analysis(Columns.read(str(path))) == analysis(listed)


def test_version_1_lines_and_a_newer_writers_field_read(tmp_path):
    recs = records(60)
    lines = [r.to_json() for r in recs]
    v1 = {k: v for k, v in json.loads(lines[3]).items()
          if k in ("id", "case", "endpoint", "stream", "t_sched", "t_start", "t_first", "t_end", "status",
                   "outcome", "input_tokens", "output_tokens", "itl_us", "served_by")}
    lines[3] = json.dumps(v1)  # no `v`, none of the later fields
    lines[7] = json.dumps({**json.loads(lines[7]), "v": 9, "from_the_future": {"itl_us": [1, 2]}, "x": [1]})
    lines[9] = lines[9].replace('"server_e2e":null', '"server_e2e":NaN')  # the stdlib writes NaN; orjson refuses it
    lines[11] = json.dumps(json.loads(lines[11]), indent=None, separators=(", ", ": "))  # another writer's spacing
    assert "NaN" in lines[9] and '"itl_us": [' in lines[11]
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(lines) + "\n")
    listed = read_records(str(path))
    assert len(listed) == 60 and listed[3].v == 1
    cols = Columns.read(str(path))
    same_columns(cols, Columns.from_records(listed))
    assert cols.text("input_tokens_source", 3) == "exact" and cols.retry_causes[3] == cols.code("retry_causes", ())


def test_the_stdlib_reads_the_same_columns(tmp_path, monkeypatch):
    path = write(tmp_path / "requests.jsonl", records(150))
    fast = Columns.read(path)
    monkeypatch.setattr(colread, "fast_loads", json.loads)
    monkeypatch.setattr(colread, "_FastError", ValueError)
    same_columns(Columns.read(path, chunk_bytes=5000), fast)


def test_a_value_that_does_not_convert_drops_its_line_only(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "BLOCK_ROWS", 16)
    recs = records(100)
    lines = [r.to_json() + "\n" for r in recs]
    lines.insert(40, json.dumps({**json.loads(lines[40]), "t_sched": "soon", "id": "bad"}) + "\n")
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(lines))
    cols = Columns.read(str(path), gap_cap=10, chunk_bytes=3000)  # past the cap: the gaps are re-read by block
    assert cols.n == 100 and cols.gaps is None and cols._odd_blocks  # its block is read again with the same rule
    assert [cols.record(i).id for i in (0, 39, 40, 41, 99)] == [recs[i].id for i in (0, 39, 40, 41, 99)]
    exact = Columns.from_records(recs)
    for lo, hi in ((0, 100), (33, 47), (40, 41)):
        rows = np.zeros(100, bool)
        rows[lo:hi] = True
        assert np.array_equal(cols.itl(rows).counts, gaphist.counts(exact.itl(rows)))


def test_gaps_past_the_cap_are_binned_within_their_stated_error(tmp_path, monkeypatch):
    monkeypatch.setattr(columns, "BLOCK_ROWS", 64)  # many blocks: phases take some whole and cut others
    recs = records(1500, seed=9)
    path = write(tmp_path / "requests.jsonl", recs)
    exact, binned = Columns.read(path), Columns.read(path, gap_cap=5000, chunk_bytes=20_000)
    assert exact.gaps is not None and binned.gaps is None and len(binned.gap_blocks) == -(-1500 // 64)
    rows = np.zeros(1500, bool)
    for lo, hi in ((0, 1500), (100, 101), (130, 700), (64, 128)):
        rows[:] = False
        rows[lo:hi] = True
        assert np.array_equal(binned.itl(rows).counts, gaphist.counts(exact.itl(rows)))
    ph = cut(recovery.fault_windows(JOURNAL), T0, T0 + 151, 10, T0 + 30)
    for a, b in zip(phase_table(exact, ph), phase_table(binned, ph)):
        assert {k: v for k, v in a.items() if k != "itl"} == {k: v for k, v in b.items() if k != "itl"}
        for q in ("p50", "p95", "p99"):
            x, y = a["itl"][q], b["itl"][q]
            assert x["n"] == y["n"] and y["relative_error"] == pytest.approx(gaphist.RELATIVE_ERROR, abs=1e-6)
            assert abs(y["value"] - x["value"]) <= y["relative_error"] * x["value"] + 1e-12
            if x["low"] is not None:  # the bins' outer edges: the interval can only widen, by a bin at most
                assert x["low"] / gaphist.RATIO <= y["low"] <= x["low"] <= x["high"] <= y["high"] \
                    <= x["high"] * gaphist.RATIO
    a, b = summarize_steps(exact, []), summarize_steps(binned, [])
    for x, y in zip(a, b):
        assert x.itl_gaps == y.itl_gaps and x.e2e == y.e2e
        for q in ("p50", "p95", "p99"):
            assert abs(y.itl[q] - x.itl[q]) <= gaphist.RELATIVE_ERROR * x.itl[q] + 1e-12


def test_foreign_gaps_past_uint32_or_negative_still_match(tmp_path):
    recs = records(40)
    recs[5].itl_us, recs[6].itl_us = [5, 2**33, 7], [-3, 4]
    path = write(tmp_path / "requests.jsonl", recs)
    listed, cols = read_records(path), Columns.read(path)
    assert cols.gaps.dtype == np.int64
    assert analysis(listed)["phases"] == analysis(cols)["phases"]


def test_a_changed_file_is_read_again(tmp_path):
    recs = records(30)
    path = write(tmp_path / "requests.jsonl", recs[:20])
    first = Columns.read(path)
    assert Columns.read(path) is first  # held: the same file read twice in one report
    write(tmp_path / "requests.jsonl", recs)
    assert Columns.read(path).n == 30


def test_a_table_past_int16_widens_its_codes(tmp_path):
    n = 33_000  # distinct fault strings (a proxy log's detail each): more codes than an int16 holds
    path = tmp_path / "requests.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "case": "chat", "endpoint": "chat", "stream": False,
                                        "t_sched": T0 + i, "t_start": T0 + i, "fault": f"f; delay; {i}"}) + "\n"
                            for i in range(n)))
    cols = Columns.read(str(path), chunk_bytes=200_000)
    assert cols.fault.dtype == np.int32 and cols.step.dtype == np.int16
    assert [cols.text("fault", i) for i in (0, 32_767, 32_768, n - 1)] == [f"f; delay; {i}" for i in
                                                                         (0, 32_767, 32_768, n - 1)]


def test_no_records(tmp_path):
    path = tmp_path / "requests.jsonl"
    path.write_text("")
    cols = Columns.read(str(path))
    assert cols.n == 0 and len(cols.t_end) == 0
    assert phases.figures(cols, cut([], T0, T0 + 1, None, None)[0])["requests"] == 0
    assert recovery.recovery(cols, JOURNAL, SLO_, None)["faults"] == []
    assert summarize_steps(cols, []) == []
