"""history.sqlite's format, its version, and the check that a file is one this version reads, before anything is
written to it.

The version is SQLite's own user_version. A file of version 0 is from before the version was kept: the same tables
(the first had no host table, which is added), stamped 1 when next written. A newer version, a file that is not
SQLite, a table without a column this version reads, or a row whose value is not what its column holds is refused
with the file and the row named, and the file is left as it was: a history is never rewritten without a row.
"""

from __future__ import annotations

import os
import sqlite3

from ..errors import InputError

VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS gameday (
    id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL, suite TEXT NOT NULL, dir TEXT NOT NULL,
    status TEXT NOT NULL, score REAL, experiments INTEGER, passed INTEGER);
CREATE TABLE IF NOT EXISTS figure (
    gameday_id INTEGER NOT NULL REFERENCES gameday(id), experiment TEXT NOT NULL, figure TEXT NOT NULL,
    value REAL, low REAL, high REAL, n INTEGER, unit TEXT, PRIMARY KEY (gameday_id, experiment, figure));
CREATE TABLE IF NOT EXISTS host (
    gameday_id INTEGER NOT NULL REFERENCES gameday(id), experiment TEXT NOT NULL, samples INTEGER,
    others REAL, others_max REAL, own REAL, steal REAL, load1 REAL, psi_cpu REAL,
    PRIMARY KEY (gameday_id, experiment));
"""
HOST_COLS = ("samples", "others", "others_max", "own", "steal", "load1", "psi_cpu")

NUM, TEXT = ("integer", "real"), ("text",)
# what each column read back must hold; None allowed where the column may be NULL. SQLite keeps whatever was
# written (a REAL column takes 'abc'), so a row edited by hand or by another tool is found here, not mid-report.
COLUMNS: dict[str, dict[str, tuple[tuple[str, ...], bool]]] = {
    "gameday": {"id": (("integer",), False), "started": (NUM, False), "finished": (NUM, True),
                "suite": (TEXT, False), "dir": (TEXT, False), "status": (TEXT, False), "score": (NUM, True),
                "experiments": (("integer",), True), "passed": (("integer",), True)},
    "figure": {"gameday_id": (("integer",), False), "experiment": (TEXT, False), "figure": (TEXT, False),
               "value": (NUM, True), "low": (NUM, True), "high": (NUM, True), "n": (("integer",), True),
               "unit": (TEXT, True)},
    "host": {"gameday_id": (("integer",), False), "experiment": (TEXT, False),
             **{c: ((("integer",) if c == "samples" else NUM), True) for c in HOST_COLS}},
}
OPTIONAL_TABLES = {"host"}  # the first format had none


class HistoryError(InputError):
    """A history.sqlite this version cannot read; the message names the file, and the row where one is to blame."""


def check(path: str) -> None:
    """Refuse (HistoryError) a history this version cannot read; an absent or empty file is a new history. Read
    only: the file is not touched."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb") as f:
        head = f.read(16)
    if head != b"SQLite format 3\x00":
        kind = "JSON lines" if head.lstrip()[:1] in (b"{", b"[") else "not SQLite"
        raise HistoryError(f"{path}: not a game-day history ({kind}); a history is an SQLite file "
                           f"(docs/gameday.md): move this file aside, or give another --out")
    try:
        db = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error as e:
        raise HistoryError(f"{path}: cannot be opened: {e}") from None
    try:
        _check_open(path, db)
    except sqlite3.DatabaseError as e:
        raise HistoryError(f"{path}: a damaged SQLite file ({e}); restore it from a copy") from None
    finally:
        db.close()


def _check_open(path: str, db: sqlite3.Connection) -> None:
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > VERSION:
        raise HistoryError(f"{path}: history format {version}, written by a newer llm-chaos; this one reads up "
                           f"to {VERSION}: upgrade, or give another --out")
    bad = db.execute("PRAGMA quick_check").fetchone()[0]
    if bad != "ok":
        raise HistoryError(f"{path}: a damaged SQLite file ({bad}); restore it from a copy")
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, cols in COLUMNS.items():
        if table not in tables:
            if table in OPTIONAL_TABLES:
                continue
            raise HistoryError(f"{path}: no table {table!r}: not a game-day history of format {version or 'before 1'}")
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        if missing := [c for c in cols if c not in have]:
            raise HistoryError(f"{path}: table {table} has no column {', '.join(missing)}: not a history format "
                               f"{VERSION} reads")
        _check_rows(path, db, table, cols)


def _check_rows(path: str, db: sqlite3.Connection, table: str, cols: dict) -> None:
    for col, (types, nullable) in cols.items():
        allowed = (*types, "null") if nullable else types
        row = db.execute(f"SELECT rowid, typeof({col}), quote({col}) FROM {table} WHERE typeof({col}) NOT IN "
                         f"({', '.join('?' * len(allowed))}) ORDER BY rowid LIMIT 1", allowed).fetchone()
        if row:
            want = " or ".join(types) + (" or NULL" if nullable else "")
            raise HistoryError(f"{path}: table {table}, row {row[0]}: {col} is {row[2]} ({row[1]}), not {want}; "
                               f"fix or delete that row (sqlite3 {os.path.basename(path)}), nothing was written")
