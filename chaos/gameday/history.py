"""Every game day's key figures, kept in history.sqlite in the suite's game-day folder.

Why SQLite: one file beside the runs, in the standard library, safe against a game day killed mid-write (each
game day is one transaction), and queried with plain SQL by anyone who wants more than the trend plot. Appends;
the one row ever replaced is a resumed game day's, when it ends. docs/gameday.md lists the schema.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

SCHEMA = """
CREATE TABLE IF NOT EXISTS gameday (
    id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL, suite TEXT NOT NULL, dir TEXT NOT NULL,
    status TEXT NOT NULL, score REAL, experiments INTEGER, passed INTEGER);
CREATE TABLE IF NOT EXISTS figure (
    gameday_id INTEGER NOT NULL REFERENCES gameday(id), experiment TEXT NOT NULL, figure TEXT NOT NULL,
    value REAL, low REAL, high REAL, n INTEGER, unit TEXT, PRIMARY KEY (gameday_id, experiment, figure));
"""


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


class History:
    def __init__(self, path: str):
        self.path = path
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.db = sqlite3.connect(path, timeout=30)
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def append(self, gameday: dict, figures: list[dict]) -> int:
        """One game day and its figures, in one transaction."""
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
        return gid

    def remove(self, gameday_id: int) -> None:
        """A game day's row and figures, before a resumed game day writes them again when it ends."""
        with self.db:
            self.db.execute("DELETE FROM figure WHERE gameday_id = ?", (gameday_id,))
            self.db.execute("DELETE FROM gameday WHERE id = ?", (gameday_id,))

    def gamedays(self) -> list[dict]:
        cols = ("id", "started", "finished", "suite", "dir", "status", "score", "experiments", "passed")
        rows = self.db.execute(f"SELECT {', '.join(cols)} FROM gameday ORDER BY started, id").fetchall()
        return [dict(zip(cols, r)) for r in rows]

    def series(self) -> dict[tuple[str, str], list[Point]]:
        """(experiment, figure) -> its points, oldest first."""
        out: dict[tuple[str, str], list[Point]] = {}
        q = ("SELECT f.gameday_id, g.started, f.experiment, f.figure, f.value, f.low, f.high, f.n, f.unit "
             "FROM figure f JOIN gameday g ON g.id = f.gameday_id ORDER BY g.started, g.id")
        for row in self.db.execute(q):
            p = Point(*row)
            out.setdefault((p.experiment, p.figure), []).append(p)
        return out


def moved(points: list[Point], tolerance: float = 0.10, floor: float = 0.5, history: int = 3) -> str | None:
    """Did the latest point move beyond its noise? With intervals (percentiles, rates): the latest interval and
    the previous game day's do not overlap. One value a game day (recovery times): the latest lies outside the
    range of at least `history` earlier ones, widened by max(tolerance x that range's middle, floor). None: no."""
    if len(points) < 2 or points[-1].value is None:
        return None
    last, prev = points[-1], points[-2]
    if last.low is not None and prev.low is not None and prev.high is not None and last.high is not None:
        if last.low > prev.high:
            return f"up: [{last.low:.4g}, {last.high:.4g}] above the last game day's [{prev.low:.4g}, {prev.high:.4g}]"
        if last.high < prev.low:
            return f"down: [{last.low:.4g}, {last.high:.4g}] below the last game day's [{prev.low:.4g}, {prev.high:.4g}]"
        return None
    earlier = [p.value for p in points[:-1] if p.value is not None]
    if len(earlier) < history:
        return None
    lo, hi = min(earlier), max(earlier)
    slack = max(tolerance * (lo + hi) / 2, floor if last.unit == "s" else 0)
    if last.value > hi + slack:
        return f"up: {last.value:.4g} above every earlier game day's ({lo:.4g}-{hi:.4g}, slack {slack:.3g})"
    if last.value < lo - slack:
        return f"down: {last.value:.4g} below every earlier game day's ({lo:.4g}-{hi:.4g}, slack {slack:.3g})"
    return None
