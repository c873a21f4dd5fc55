"""The journal's event names are one enum: every event the toolkit writes is an Event, a journal reads back as the
strings it always held (a journal from before the enum reads the same), and what recover reads comes from it."""

from __future__ import annotations

import ast
import json
import pathlib

import chaos
from chaos.rundir.journal import Event, Journal, journaled_instances, journaled_processes, read_journal

ROOT = pathlib.Path(chaos.__file__).parent


def _journal_writes():
    """(file:line, first argument) of every `<something journal-ish>.write(...)` call in chaos/."""
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "write" \
                    and node.args and "journal" in ast.unparse(node.func.value).lower():
                yield f"{path.relative_to(ROOT.parent)}:{node.lineno}", node.args[0]


def test_every_event_written_is_a_member_of_the_enum():
    writes = list(_journal_writes())
    assert len(writes) >= 25  # the runner's, the replay's, recover's: the scan sees them
    literal = [where for where, arg in writes if any(isinstance(n, ast.Constant) for n in ast.walk(arg))]
    assert literal == []
    named = {where: [n.attr for n in ast.walk(arg) if isinstance(n, ast.Attribute)
                     and ast.unparse(n.value) == "Event"] for where, arg in writes}
    assert [where for where, members in named.items() if not members] == []
    assert {m for members in named.values() for m in members} <= set(Event.__members__)


def test_a_journal_reads_back_as_strings_and_an_old_one_reads_the_same(tmp_path):
    path = tmp_path / "journal.jsonl"
    j = Journal(str(path), clock=lambda: 1.0)
    j.write(Event.RUN_STARTED, run="x")
    j.write(Event.PROCESS_STARTED, instance={"id": "r0", "pid": 123, "create_time": 5.0, "pgid": 123})
    j.close()
    with open(path, "a") as f:  # as a journal written before the enum: plain strings, and a cut last line
        f.write(json.dumps({"t": 2.0, "event": "load_started", "processes": [{"pid": 456, "create_time": 6.0}]}) + "\n")
        f.write('{"t": 3.0, "event": "fault_appl')
    events = read_journal(str(path))
    assert [e["event"] for e in events] == ["run_started", "process_started", "load_started"]
    assert type(json.loads(path.read_text().splitlines()[0])["event"]) is str
    assert events[0]["event"] == Event.RUN_STARTED and events[2]["event"] == Event.LOAD_STARTED
    assert [i["id"] for i in journaled_instances(events)] == ["r0"]
    procs = journaled_processes(events)
    assert procs[(123, 5.0)]["what"] == "instance r0" and procs[(123, 5.0)]["pgid"] == 123
    assert procs[(456, 6.0)]["what"] == "load generator"
