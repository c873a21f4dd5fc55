"""Every game day's key figures, kept in history.sqlite in the suite's game-day folder.

Why SQLite: one file beside the runs, in the standard library, safe against a game day killed mid-write (each
game day is one transaction), and queried with plain SQL by anyone who wants more than the trend plot. Appends;
the one row ever replaced is a resumed game day's, when it ends. docs/gameday.md lists the schema.
"""

from __future__ import annotations

import math
import os
import sqlite3
from dataclasses import dataclass

import numpy as np

from ..host import DEFAULT_BOUND, HostSummary, differs
from ..report.sections import duration_text

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
        q = ("SELECT f.gameday_id, g.started, f.experiment, f.figure, f.value, f.low, f.high, f.n, f.unit "
             "FROM figure f JOIN gameday g ON g.id = f.gameday_id ORDER BY g.started, g.id")
        for row in self.db.execute(q):
            p = Point(*row)
            out.setdefault((p.experiment, p.figure), []).append(p)
        return out


@dataclass(slots=True)
class Rule:
    """How far a figure may move from what earlier game days did before it is called moved."""
    # 99 %: a nightly game day of unchanged code flags a figure one night in a hundred (Bonferroni over its
    # figures), not one in twenty
    confidence: float = 0.99
    min_history: int = 5  # earlier game days a figure needs before anything is called
    window: int = 20  # the latest this many earlier game days make the history
    tolerance: float = 0.10  # relative, for times
    latency_floor: float = 0.005  # seconds
    recovery_floor: float = 0.5  # seconds
    fraction_tolerance: float = 0.01  # absolute, for shares (the error budget)
    host_bound: float = DEFAULT_BOUND

    def floor(self, figure: str) -> float:
        return self.recovery_floor if figure.startswith("time to") else self.latency_floor


@dataclass(slots=True)
class Move:
    direction: str | None  # "up", "down", or None: not moved (or not judged)
    text: str
    judged: bool = True
    held_for_host: bool = False


def moved(points: list[Point], family: int = 1, rule: Rule | None = None, host: HostSummary | None = None,
          history_host: HostSummary | None = None) -> Move:
    """Did the latest point leave what the run-to-run spread of the earlier game days allows?

    Times are compared on a log scale (a time is positive and its spread grows with it), shares as they are. With
    k earlier values (the latest `window`, at least `min_history`) of mean m and standard deviation s, the latest
    moved when it lies outside m +- t(k-1) s sqrt(1 + 1/k), the prediction interval of one more game day, at
    alpha / family (Bonferroni over the figures judged in this game day: a night of unchanged code flags nothing
    in all but alpha of game days), AND beyond the tolerance (10 % and a floor: 5 ms of latency, 0.5 s of a
    recovery time; a share, one point). A time is not called moved where this game day's host differed from the
    history's typical one (others' CPU apart by more than the bound): the host explains a time, not a build."""
    from scipy import stats as st

    rule = rule or Rule()
    if not points or points[-1].value is None:
        return Move(None, "no value in this game day", judged=False)
    last = points[-1]
    earlier = [p.value for p in points[:-1] if p.value is not None][-rule.window:]
    k = len(earlier)
    if k < rule.min_history:
        return Move(None, f"{k} earlier game day(s): judged from {rule.min_history}", judged=False)
    log = last.unit == "s" and min(earlier + [last.value]) > 0
    xs = np.log(earlier) if log else np.asarray(earlier, float)
    x = math.log(last.value) if log else last.value
    m, sd = float(xs.mean()), float(xs.std(ddof=1))
    half = float(st.t.ppf(1 - (1 - rule.confidence) / (2 * max(1, family)), k - 1)) * sd * math.sqrt(1 + 1 / k)
    lo, hi = (math.exp(m - half), math.exp(m + half)) if log else (m - half, m + half)
    centre = math.exp(m) if log else m
    band = f"{k} earlier game days allow {_fmt(lo, last.unit)}-{_fmt(hi, last.unit)}"
    if log:
        beyond = abs(last.value / centre - 1) > rule.tolerance and abs(last.value - centre) > rule.floor(last.figure)
    else:
        beyond = abs(last.value - centre) > rule.fraction_tolerance
    if not (beyond and (x > m + half or x < m - half)):
        return Move(None, f"{_fmt(last.value, last.unit)}: {band}")
    direction = "up" if x > m else "down"
    text = f"{direction}: {_fmt(last.value, last.unit)}, where {band} (their middle {_fmt(centre, last.unit)})"
    why = differs(history_host, host, rule.host_bound) if last.unit == "s" else None
    if why:
        return Move(None, f"{text}; not called: the host differed from the earlier game days' ({why})",
                    held_for_host=True)
    return Move(direction, text)


def median_host(hosts: list[HostSummary]) -> HostSummary | None:
    """The typical host of earlier game days: the median of their others' CPU."""
    vals = sorted(h.others for h in hosts if h is not None and h.others is not None)
    if not vals:
        return None
    return HostSummary(len(vals), others=vals[len(vals) // 2], others_max=vals[-1])


def _fmt(v: float, unit: str) -> str:
    if unit == "fraction":
        return f"{v * 100:.2f}%"
    return duration_text(v)
