"""Where the Scrubber's patterns can match in a string, found in one pass per question: the engines behind
chaos.replay.scrub.Scrubber's fast path.

Two engines answer the same two questions, exactly as re would:
- gates(s): which of a few gates (literals) occur in s, i.e. which text stages can redact;
- runs(s): the spans of run.finditer(s), the digit runs the number patterns are tried on.

"hyperscan" (`pip install 'llm-chaos[fast]'`, Intel's multi-pattern regex engine) finds the gates in one
vectorised pass, and where the digit runs end in another; re then only walks the stretch of number characters
around each run found. Prose between numbers is never walked by re, which is what costs: re enters its matcher
at every digit (~30 ns each), and log text is full of digits that are no phone number.
"python" needs nothing: str's substring search and re, with the run pattern rewritten to fail fast.
Both give re's own answers (tests/replay/test_scrub_equivalence.py); "auto" takes hyperscan where it is usable.
"""

from __future__ import annotations

import re
import threading

ENGINES = ("auto", "hyperscan", "python")
_NONE: frozenset[str] = frozenset()
# Below this length a hyperscan call (its set-up, the bytes copy) costs more than str's search and re.
SHORT = 256
WINDOW = 8192  # bytes scanned for the next run at a time (a log line's text is mostly shorter)
FIRST_WINDOW = 256  # after a run: the next one is often close
MANY = 16  # runs found by Hyperscan in one string; re finds the rest


class PythonFinder:
    """The pure-Python engine. gates: (name, literal) pairs; run: the run pattern as finditer should try it (same
    matches as the exact one, faster)."""

    name = "python"

    def __init__(self, gates, run: re.Pattern):
        self._gates = gates
        self._run = run

    def gates(self, s: str) -> frozenset[str]:
        found = [name for name, literal in self._gates if literal in s]
        return frozenset(found) if found else _NONE

    def runs(self, s: str) -> list[tuple[int, int]]:
        return [m.span() for m in self._run.finditer(s)]


class HyperscanFinder:
    """The Hyperscan engine, for strings of SHORT characters or more (shorter ones go to the Python engine).

    exact: the run pattern with re's semantics and no lookaround (Hyperscan compiles it as is); chars: every
    character a run can hold; reach: a length that every run holds a match of exact within. A run lies within
    one stretch of those characters (a "stretch"), so re run on just the stretches where Hyperscan saw a match
    finds what re finds on the whole string.
    """

    name = "hyperscan"

    def __init__(self, hs, gates, exact: re.Pattern, run: re.Pattern, chars: str, reach: int):
        self._hs = hs
        self._reach = reach
        self._names = tuple(name for name, _ in gates)
        self._gate_db = _database(hs, [re.escape(literal) for _, literal in gates])
        self._run_db = _database(hs, [exact.pattern])
        self._run = run
        self._chars = chars
        self._local = threading.local()
        self._python = PythonFinder(gates, run)
        # A binding too old to scan a memoryview (before 0.9) fails here, where "auto" can still fall back.
        self._run_db.scan(memoryview(b"0")[1:], _collect_end, 0, [], self._scratch()[1])

    def gates(self, s: str) -> frozenset[str]:
        if len(s) < SHORT:
            return self._python.gates(s)
        found: list[int] = []
        self._gate_db.scan(_bytes(s), _collect, 0, found, self._scratch()[0])
        return frozenset(self._names[i] for i in found) if found else _NONE

    def runs(self, s: str) -> list[tuple[int, int]]:
        if len(s) < SHORT:
            return self._python.runs(s)
        data, scratch = _bytes(s), self._scratch()[1]
        out, pos = [], 0
        for _ in range(MANY):
            end = self._next_end(data, pos, scratch)
            if end is None:
                return out
            lo, pos = self._stretch(s, end)  # re walks the stretch of the run that ends there, and only that
            out += [m.span() for m in self._run.finditer(s, lo, pos)]
        # So many runs: a string of numbers, where re finds the rest as fast as a scan per run would.
        return out + [m.span() for m in self._run.finditer(s, pos)]

    def _next_end(self, data: bytes, pos: int, scratch) -> int | None:
        """Where the earliest run in data[pos:] ends (Hyperscan reports the earliest end), or None. Hyperscan scans
        a buffer to its end even after its one report, so a string with thousands of runs is not scanned to its end
        for each: after the first run, windows of FIRST_WINDOW bytes, doubling up to WINDOW, overlapping by reach
        (each run's shortest match lies whole in one of them)."""
        found: list[int] = []
        size = WINDOW if pos == 0 else FIRST_WINDOW
        while pos < len(data):
            window = memoryview(data)[pos:pos + size] if pos or len(data) > size else data
            self._run_db.scan(window, _collect_end, 0, found, scratch)
            if found:
                return pos + found[0]
            if pos + size >= len(data):
                break
            pos, size = pos + size - self._reach, min(size * 2, WINDOW)
        return None

    def _stretch(self, s: str, end: int) -> tuple[int, int]:
        """The stretch of run characters through s[end - 1]: where re must look for the runs of this part. Walked
        by rstrip and lstrip, in C, over chunks that double (a stretch of a million spaces takes 15 steps)."""
        lo, hi, step, chars = end, end, 64, self._chars
        while lo:
            chunk = s[max(0, lo - step):lo]
            kept = len(chunk.rstrip(chars))
            lo, step = lo - (len(chunk) - kept), step * 2
            if kept:
                break
        step = 64
        while hi < len(s):
            chunk = s[hi:hi + step]
            kept = len(chunk.lstrip(chars))
            hi, step = hi + (len(chunk) - kept), step * 2
            if kept:
                break
        return lo, hi

    def _scratch(self) -> tuple:
        """This thread's scratch spaces, one per database (a scan must not share one with another thread)."""
        scratch = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = (self._hs.Scratch(self._gate_db), self._hs.Scratch(self._run_db))
        return scratch


def _bytes(s: str) -> bytes:
    """s as one byte per character, so that byte offsets are string indices: a non-ASCII character becomes "?",
    which neither a gate nor a run contains (the patterns are ASCII)."""
    return s.encode("ascii", "replace")


def _database(hs, patterns: list[str]):
    db = hs.Database()
    db.compile(expressions=[p.encode() for p in patterns], ids=list(range(len(patterns))), elements=len(patterns),
               flags=[hs.HS_FLAG_SINGLEMATCH] * len(patterns))  # the first report of each is all we use
    return db


def _collect(pattern_id, start, end, flags, found):
    found.append(pattern_id)


def _collect_end(pattern_id, start, end, flags, found):
    found.append(end)


def finder(engine: str, gates, exact: re.Pattern, run: re.Pattern, chars: str, reach: int):
    """The engine asked for: "auto" (hyperscan where it is usable, else python), "hyperscan" (ImportError where it
    is not) or "python". Built once per engine and shared: the Hyperscan databases take milliseconds."""
    if engine not in ENGINES:
        raise ValueError(f"unknown scrub engine {engine!r}; the engines are {list(ENGINES)}")
    if not 0 < reach < FIRST_WINDOW:
        raise ValueError(f"reach must be in (0, {FIRST_WINDOW}), not {reach}")
    key = (engine, gates, exact.pattern, run.pattern, chars, reach)
    with _LOCK:
        if key not in _BUILT:
            _BUILT[key] = _build(engine, gates, exact, run, chars, reach)
        return _BUILT[key]


def _build(engine: str, gates, exact, run, chars, reach):
    if engine == "python":
        return PythonFinder(gates, run)
    try:
        import hyperscan

        return HyperscanFinder(hyperscan, gates, exact, run, chars, reach)
    except Exception as err:  # not installed, or it cannot run here (a CPU without the instructions it needs)
        if engine == "hyperscan":
            raise ImportError(f"scrub engine 'hyperscan' is not usable here ({err!r}); "
                              "pip install 'llm-chaos[fast]'") from err
        return PythonFinder(gates, run)


_LOCK = threading.Lock()
_BUILT: dict = {}
