"""Every game day's key figures, kept in history.sqlite in the suite's game-day folder.

Why SQLite: one file beside the runs, in the standard library, safe against a game day killed mid-write (each
game day is one transaction), and queried with plain SQL by anyone who wants more than the trend plot. Appends;
the one row ever replaced is a resumed game day's, when it ends. docs/gameday.md lists the schema.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

from ..host import HostSummary
from .historyformat import HOST_COLS, SCHEMA, VERSION, check


@dataclass(slots=True)
class Point:
    gameday_id: int
    started: float
    experiment: str
    figure: str
    value: float | None
    low: float | None
    high: float | None
    n: int | None
    unit: str
    day: str = ""  # the game day's folder name (its UTC start, 20261204T030000Z)


class History:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        check(path)  # before anything is written: a file this version cannot read is refused as it is
        self.db = sqlite3.connect(path, timeout=30)
        self.db.executescript(SCHEMA)
        if self.db.execute("PRAGMA user_version").fetchone()[0] < VERSION:
            self.db.execute(f"PRAGMA user_version = {VERSION}")  # the same tables: stamping it loses nothing

    def close(self) -> None:
        self.db.close()

    def append(self, gameday: dict, figures: list[dict], hosts: dict[str, HostSummary] | None = None) -> int:
        """One game day, its figures and each experiment's host over its load, in one transaction."""
        with self.db:
            cur = self.db.execute(
                "INSERT INTO gameday (started, finished, suite, dir, status, score, experiments, passed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (gameday["started"], gameday.get("finished"), gameday["suite"], gameday["dir"], gameday["status"],
                 gameday.get("score"), gameday.get("experiments"), gameday.get("passed")))
            gid = cur.lastrowid
            self.db.executemany(
                "INSERT OR REPLACE INTO figure VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [(gid, f["experiment"], f["figure"], f.get("value"), f.get("low"), f.get("high"), f.get("n"),
                  f.get("unit", "s")) for f in figures])
            self.db.executemany(
                f"INSERT OR REPLACE INTO host VALUES (?, ?, {', '.join('?' * len(HOST_COLS))})",
                [(gid, exp, *(getattr(h, c) for c in HOST_COLS)) for exp, h in (hosts or {}).items() if h])
        return gid

    def remove(self, gameday_id: int) -> None:
        """A game day's row and figures, before a resumed game day writes them again when it ends."""
        with self.db:
            self.db.execute("DELETE FROM figure WHERE gameday_id = ?", (gameday_id,))
            self.db.execute("DELETE FROM host WHERE gameday_id = ?", (gameday_id,))
            self.db.execute("DELETE FROM gameday WHERE id = ?", (gameday_id,))

    def gamedays(self) -> list[dict]:
        cols = ("id", "started", "finished", "suite", "dir", "status", "score", "experiments", "passed")
        rows = self.db.execute(f"SELECT {', '.join(cols)} FROM gameday ORDER BY started, id").fetchall()
        return [dict(zip(cols, r)) for r in rows]

    def hosts(self) -> dict[tuple[int, str], HostSummary]:
        """(game day id, experiment) -> the host over that experiment's load."""
        rows = self.db.execute(f"SELECT gameday_id, experiment, {', '.join(HOST_COLS)} FROM host").fetchall()
        return {(r[0], r[1]): HostSummary(**dict(zip(HOST_COLS, r[2:]))) for r in rows}

    def series(self) -> dict[tuple[str, str], list[Point]]:
        """(experiment, figure) -> its points, oldest first."""
        out: dict[tuple[str, str], list[Point]] = {}
        q = ("SELECT f.gameday_id, g.started, f.experiment, f.figure, f.value, f.low, f.high, f.n, f.unit, g.dir "
             "FROM figure f JOIN gameday g ON g.id = f.gameday_id ORDER BY g.started, g.id")
        for row in self.db.execute(q):
            p = Point(*row[:-1], day=os.path.basename(row[-1].rstrip("/")))
            out.setdefault((p.experiment, p.figure), []).append(p)
        return out


def median_host(hosts: list[HostSummary]) -> HostSummary | None:
    """The typical host of earlier game days: the median of their others' CPU."""
    vals = sorted(h.others for h in hosts if h is not None and h.others is not None)
    if not vals:
        return None
    return HostSummary(len(vals), others=vals[len(vals) // 2], others_max=vals[-1])

