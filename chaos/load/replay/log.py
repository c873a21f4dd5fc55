"""Replay logs read for the load: streamed, in time order, each line's number kept, a broken line an item with
its reason rather than an error (a log of bad input is replayed, not refused). The load's own JSONL of request
bodies is read here; traces and envelopes go through chaos.replay."""

from __future__ import annotations

import heapq
import json
from dataclasses import dataclass

PRESCAN_LINES = 1000  # lines checked when a workload is built; later ones are checked as they are sent
REORDER_WINDOW = 1000  # lines held to put a nearly sorted log in time order (bounded memory)


def _parse_line(path: str, lineno: int, line: bytes | str) -> dict:
    try:
        e = json.loads(line)
    except ValueError as err:
        raise ValueError(f"{path}:{lineno}: not JSON ({err})") from None
    except RecursionError:  # "[[[[..." deeper than json can go
        raise ValueError(f"{path}:{lineno}: not JSON (nested too deeply)") from None
    if not isinstance(e, dict) or ("messages" not in e and "prompt" not in e):
        raise ValueError(f"{path}:{lineno}: each line needs 'messages' or 'prompt'")
    return e


def log_entries(path: str, options=None):
    """(line, entry, None) or (line, None, why) for each request of a replay log, streamed. The load's own JSONL
    of request bodies is read here; any other log (a trace without text: Azure, BurstGPT, Mooncake; envelopes
    of request and response) goes through chaos.replay, its prompts synthesised to the trace's lengths, and so
    does every log when options (opts.ReplayOptions) scrub or filter: why is opts.FILTERED for a line
    the filter dropped."""
    if (options is not None and options.active) or _needs_reader(path):
        yield from _reader_entries(path, options)
        return
    from ...replay import Problem, blank_line, read_lines

    for lineno, line in read_lines(path):  # gunzipped, line length bounded, a corrupt .gz a last Problem
        if isinstance(line, Problem):
            yield lineno, None, f"{path}:{lineno}: {line.why}"
            continue
        if blank_line(line):
            continue
        try:
            yield lineno, _parse_line(path, lineno, line), None
        except ValueError as err:
            yield lineno, None, str(err)


def _needs_reader(path: str) -> bool:
    from ...replay import detect_format

    try:
        fmt = detect_format(path)
    except (ValueError, OSError):
        return False  # the JSONL path says what is wrong with the file, line by line
    if fmt not in ("jsonl", "openai"):
        return True
    from ...replay import Problem, blank_line, read_lines

    for _, line in read_lines(path):
        if isinstance(line, Problem):
            continue
        if not blank_line(line):
            try:
                e = json.loads(line)
            except (ValueError, RecursionError):
                return False
            return isinstance(e, dict) and isinstance(e.get("request"), dict)
    return False


def _reader_entries(path: str, options=None):
    from ...replay import Problem, Scrubber, iter_log
    from .opts import FILTERED, FIXED_KEY, SCRUBBED_KEY, TRACE_FORMATS, scrub_counts

    keep = options.compiled() if options is not None else None
    scrubber = Scrubber() if options is not None and options.scrub else None

    def entry(it):
        if keep is not None and not keep.match(it):  # on the logged request, before anything is changed
            # (its time only)
            return it.line_no, {"timestamp": it.offset_s} if it.offset_s is not None else None, FILTERED
        counts = None
        if scrubber is not None:  # before the body is copied anywhere: nothing downstream sees the raw text
            before = scrubber.report()
            scrubber.scrub_item(it)
            counts = scrub_counts(scrubber.report(), before)
        e = dict(it.body)
        if counts:
            e[SCRUBBED_KEY] = counts
        if it.fmt in TRACE_FORMATS and not it.failed:  # a failed BurstGPT row's length is unknown: a cap of 1
            e[FIXED_KEY] = True
        if it.offset_s is not None:
            e["timestamp"] = it.offset_s
        if it.case:
            e["case"] = it.case if scrubber is None else scrubber.text(it.case)  # a tag names the Locust entries
        return it.line_no, e, None

    # prepare: iter_log reads the lines a batch at a time and runs entry on each before handing any on (faster)
    for got in iter_log(path, prepare=entry):
        if isinstance(got, Problem):
            yield got.line_no, None, f"{path}:{got.line_no}: {got.why}"
        else:
            yield got


def _timestamp(e: dict) -> float | None:
    t = e.get("timestamp")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else None


@dataclass(slots=True)
class ReplayScan:
    requests: int  # non-blank lines of the whole file (counted, not parsed)
    checked: int  # lines parsed and checked
    timed: bool  # every checked line has a numeric timestamp
    filtered: int = 0  # lines the replay filter dropped (not in requests)


def scan_replay(path: str, check: int = PRESCAN_LINES, options=None) -> ReplayScan:
    """Check the first `check` lines (JSON, a body) and count the rest without parsing them: bounded memory and a
    read of the file, so a workload can be validated before a run without holding the log. A log read through
    chaos.replay (traces, envelopes, or options that scrub or filter) may have broken lines: they are counted
    (requests includes them) and only refuse the file when none of the checked lines is readable. Lines the
    filter drops are not requests of the replay: counted in filtered, not in requests."""
    n = checked = filtered = readable = 0
    timed = True
    if (options is not None and options.active) or _needs_reader(path):  # streamed through chaos.replay
        from .opts import FILTERED

        first_error = None
        for lineno, e, error in _reader_entries(path, options):
            if error == FILTERED:
                filtered += 1
                continue
            n += 1
            if checked < check:
                checked += 1
                if error:
                    first_error = first_error or error
                    continue
                readable += 1
                timed = timed and _timestamp(e) is not None
        if not n:
            raise ValueError(f"{path}: no requests in the replay file"
                             + (f" ({filtered} lines filtered out by the replay filter)" if filtered else ""))
        if not readable:
            raise ValueError(f"{path}: none of the first {checked} lines is a request that can be sent (the first: "
                             f"{first_error})")
        return ReplayScan(n, checked, timed, filtered)
    first_error = None
    from ...replay import Problem, blank_line, read_lines

    for lineno, line in read_lines(path):
        if not isinstance(line, Problem) and blank_line(line):
            continue
        n += 1
        if checked < check:
            checked += 1
            try:
                if isinstance(line, Problem):  # too long, or where a corrupt .gz stops
                    raise ValueError(f"{path}:{lineno}: {line.why}")
                timed = timed and _timestamp(_parse_line(path, lineno, line)) is not None
                readable += 1
            except ValueError as err:  # a broken line is counted and skipped when sending, never fatal
                first_error = first_error or str(err)
    if not n:
        raise ValueError(f"{path}: no requests in the replay file")
    if not readable:
        raise ValueError(f"{path}: none of the first {checked} lines is a request that can be sent (the first: "
                         f"{first_error})")
    return ReplayScan(n, checked, timed)


@dataclass(slots=True)
class ReplayItem:
    lineno: int
    entry: dict | None  # None: the line could not be read (error says why)
    offset_s: float | None  # seconds after the log's first request, passes included
    error: str | None = None

    @property
    def filtered(self) -> bool:
        """Dropped by the replay filter: not a request of the replay, so never owed."""
        from .opts import FILTERED

        return self.error == FILTERED


def iter_replay(path: str, passes: int = 1, window: int = REORDER_WINDOW, options=None):
    """The log's requests in time order, streamed: a heap of `window` lines puts a nearly sorted log in order;
    a line older than one already released comes out at once (its offset is in the past: it is sent late, and the
    replay counts it). A line that cannot be read comes out as an item with error set, never fatal. A line the
    options' filter drops comes out as an item with error FILTERED, in its time order when it has a time (so a
    replay that stops after its window has not counted lines read ahead of it), never setting the offsets' origin:
    the replay starts at its first kept request. Pass k repeats the log k x (its span + 1 s) later. Offsets count
    from the earliest timestamp of the first window."""
    from .opts import FILTERED

    t0: float | None = None
    last = 0.0  # the largest offset of the first pass: its span
    for k in range(passes):
        heap: list = []
        shift = k * (last + 1.0)

        def release(t, n, e):
            nonlocal t0, last
            if e is None:
                return ReplayItem(n, None, None, FILTERED)
            t0 = t if t0 is None else t0
            if not k:
                last = max(last, t - t0)
            return ReplayItem(n, e, t - t0 + shift)

        for lineno, e, error in log_entries(path, options):
            t = _timestamp(e) if e is not None else None
            if error == FILTERED and t is not None:
                e = None  # held in the heap as a mark: counted where it falls in time
            elif error:
                yield ReplayItem(lineno, None, None, error)
                continue
            elif t is None:
                yield ReplayItem(lineno, None, None, f"{path}:{lineno}: no numeric 'timestamp'")
                continue
            heapq.heappush(heap, (t, lineno, e))
            if len(heap) > window:
                yield release(*heapq.heappop(heap))
        while heap:
            yield release(*heapq.heappop(heap))
        if t0 is None:
            return  # nothing readable: more passes would read the same


class ReplayCursor:
    """Request i of an untimed replay (a rate or users plan): entry i % N of the file, read forward. Each process
    asks for increasing i, so this is one streamed read a pass, never the whole file in memory."""

    def __init__(self, path: str, options=None):
        self.path = path
        self.options = options
        self._it = None
        self._pos = -1  # the index of the entry last read
        self._last = None

    def at(self, i: int) -> tuple[dict, float | None, int]:
        if self._it is None or i < self._pos:
            self._it, self._pos = self._entries(), -1
        while self._pos < i:
            self._last = next(self._it)
            self._pos += 1
        e, offset, lineno = self._last
        return e, offset, lineno

    def _entries(self):
        """(entry, offset, line) forever, pass after pass; unreadable lines are skipped past the pre-scan (which
        refused the first ones), so they cannot stop a run."""
        t0, span, k = None, 0.0, 0
        while True:
            found = False
            for lineno, e, error in log_entries(self.path, self.options):
                if error:
                    continue
                found = True
                t = _timestamp(e)
                offset = None
                if t is not None:
                    t0 = t if t0 is None else t0
                    if not k:
                        span = max(span, t - t0)
                    offset = t - t0 + k * (span + 1.0)
                yield e, offset, lineno
            if not found:
                raise ValueError(f"{self.path}: no readable requests in the replay file")
            k += 1


def load_replay(path: str) -> list[dict]:
    """Every request of a small JSONL log, sorted by time (tests and tools; a run streams the file instead)."""
    entries = []
    for _, e, error in log_entries(path):
        if error:
            raise ValueError(error)
        entries.append(e)
    if not entries:
        raise ValueError(f"{path}: no requests in the replay file")
    stamps = [_timestamp(e) for e in entries]
    if all(t is not None for t in stamps):
        t0 = min(stamps)
        for e, t in zip(entries, stamps):
            e["offset_s"] = t - t0
        entries.sort(key=lambda e: e["offset_s"])
    return entries
