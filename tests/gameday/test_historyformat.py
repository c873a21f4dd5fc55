"""history.sqlite that this version cannot read: refused with the file (and the row) named, before anything is
written, the file left byte for byte as it was; one from before the version was kept is read and kept whole."""

import hashlib
import sqlite3

import pytest

from chaos.errors import InputError, exit_code
from chaos.gameday.history import History
from chaos.gameday.historyformat import VERSION, HistoryError, check
from chaos.gameday.runner import run_gameday

FIRST_FORMAT = """
CREATE TABLE gameday (
    id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL, suite TEXT NOT NULL, dir TEXT NOT NULL,
    status TEXT NOT NULL, score REAL, experiments INTEGER, passed INTEGER);
CREATE TABLE figure (
    gameday_id INTEGER NOT NULL REFERENCES gameday(id), experiment TEXT NOT NULL, figure TEXT NOT NULL,
    value REAL, low REAL, high REAL, n INTEGER, unit TEXT, PRIMARY KEY (gameday_id, experiment, figure));
"""


def first_format(path, rows=3):
    """A history as the first version wrote it: no host table, no version."""
    db = sqlite3.connect(path)
    db.executescript(FIRST_FORMAT)
    for i in range(1, rows + 1):
        db.execute("INSERT INTO gameday VALUES (?, ?, ?, 's', ?, 'finished', 90, 1, 1)", (i, 100.0 * i, 100.0 * i + 5,
                                                                                          f"/g/2026120{i}T030000Z"))
        db.execute("INSERT INTO figure VALUES (?, 'kill', 'time to restore', ?, NULL, NULL, 1, 's')", (i, 5.0 + i))
    db.commit()
    db.close()
    return path


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def refused(path, *words):
    before = digest(path)
    with pytest.raises(HistoryError) as e:
        History(str(path))
    assert str(path) in str(e.value) and all(w in str(e.value) for w in words), str(e.value)
    assert digest(path) == before  # nothing written, nothing dropped
    return e.value


def test_a_history_from_before_the_version_is_read_whole_and_stamped(tmp_path):
    path = first_format(tmp_path / "history.sqlite")
    h = History(str(path))
    assert [p.value for p in h.series()[("kill", "time to restore")]] == [6.0, 7.0, 8.0]
    assert h.series()[("kill", "time to restore")][0].day == "20261201T030000Z"
    assert h.hosts() == {}
    assert h.db.execute("PRAGMA user_version").fetchone()[0] == VERSION
    h.close()


def test_a_history_of_a_newer_version_is_refused(tmp_path):
    path = first_format(tmp_path / "history.sqlite")
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {VERSION + 1}")
    db.close()
    e = refused(path, f"history format {VERSION + 1}", "newer llm-chaos")
    assert isinstance(e, InputError) and exit_code(e) == 2


def test_a_file_that_is_not_a_history_is_refused(tmp_path):
    jsonl = tmp_path / "history.sqlite"
    jsonl.write_text('{"started": 1, "figures": []}\n{"started": 2, "figures": []}\n')
    refused(jsonl, "not a game-day history (JSON lines)")
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE t (x)")
    db.close()
    refused(other, "no table 'gameday'")
    cols = tmp_path / "cols.sqlite"
    db = sqlite3.connect(cols)
    db.executescript(FIRST_FORMAT.replace("unit TEXT, ", ""))
    db.close()
    refused(cols, "table figure has no column unit")


def test_a_corrupt_row_is_named_by_file_table_and_row_and_nothing_is_dropped(tmp_path):
    path = first_format(tmp_path / "history.sqlite")
    db = sqlite3.connect(path)
    db.execute("UPDATE figure SET value = 'fast' WHERE gameday_id = 2")  # SQLite keeps text in a REAL column
    db.commit()
    db.close()
    refused(path, "table figure, row 2", "value is 'fast' (text)")
    assert sqlite3.connect(path).execute("SELECT COUNT(*) FROM figure").fetchone()[0] == 3


def test_a_damaged_file_is_refused(tmp_path):
    path = first_format(tmp_path / "history.sqlite", rows=200)
    data = bytearray(path.read_bytes())
    data[4096:8192] = b"\xff" * 4096  # a page of the tables overwritten
    path.write_bytes(bytes(data))
    refused(path, "damaged")


def test_a_game_day_refuses_a_bad_history_before_it_runs_anything(tmp_path):
    class Suite:  # no experiment would run anyway: the refusal comes first
        name, path, entries = "s", str(tmp_path / "s.yaml"), []

    first_format(tmp_path / "history.sqlite")
    db = sqlite3.connect(tmp_path / "history.sqlite")
    db.execute("UPDATE gameday SET started = 'yesterday' WHERE id = 3")
    db.commit()
    db.close()
    before = digest(tmp_path / "history.sqlite")
    with pytest.raises(HistoryError, match=r"table gameday, row 3: started"):
        run_gameday(Suite(), str(tmp_path), progress=lambda line: None)
    assert [p.name for p in tmp_path.iterdir() if p.name[0].isdigit()] == []  # no game day folder made
    assert digest(tmp_path / "history.sqlite") == before
    check(str(tmp_path / "absent.sqlite"))  # a new history: nothing to refuse
