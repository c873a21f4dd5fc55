"""The record file is a contract across versions: a line of an earlier version reads, a field of a newer writer
is dropped rather than the record, a broken or cut line is skipped."""

import json

from chaos.records import RECORD_VERSION, RequestRecord, read_records

V1_LINE = {"id": "a", "case": "chat", "endpoint": "chat", "stream": True, "t_sched": 1.0, "t_start": 1.0,
           "t_first": 1.1, "t_end": 1.5, "status": 200, "outcome": "ok", "itl_us": [1000, 2000]}


def test_every_version_reads(tmp_path):
    p = tmp_path / "requests.jsonl"
    new = RequestRecord(id="b", case="chat", endpoint="chat", stream=True, t_sched=2.0, t_start=2.0, t_end=2.4)
    lines = [json.dumps(V1_LINE), new.to_json(), json.dumps({**V1_LINE, "id": "c", "v": 99, "from_the_future": 1}),
             "{not json", json.dumps([1, 2]), json.dumps({**V1_LINE, "id": "cut"})[:40]]
    p.write_text("\n".join(lines[:-1]) + "\n" + lines[-1])  # the last line cut by a kill mid-write
    recs = read_records(str(p))
    assert [r.id for r in recs] == ["a", "b", "c"]
    assert recs[0].v == 1 and recs[1].v == RECORD_VERSION and recs[2].v == 99
    assert list(recs[0].itl_us) == [1000, 2000] and recs[0].e2e == 0.5
    assert json.loads(new.to_json())["v"] == RECORD_VERSION
