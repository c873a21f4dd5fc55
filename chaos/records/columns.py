"""The records of a run as numpy columns, read from requests.jsonl a chunk at a time.

A record as a Python object costs ~1 KB (a million records: a GB, and ~30 s to build), and the analysis reads only
a few of its fields. Columns keeps those fields only (chaos.records.colread parses them), ~90 bytes a record, and
no record outlives its chunk. Strings that repeat (outcome, served_by, step, fault, case, error_code, the input
token source, the retry causes) are int32 codes into their tables.

The inter-token gaps are pooled in one uint32 array while there are at most `gap_cap` of them (exact ITL
percentiles); past that the pool is dropped and the gaps are counted in histograms instead (chaos.records.gaphist,
bins 0.5 % wide): one of the ok records' gaps per block of BLOCK_ROWS rows, so the gaps of any set of rows (a
phase, a step) are the histograms of the blocks wholly in it plus the few rows of the blocks it cuts, read again
from the file. Memory then grows with the record count only, not with the token count.
"""

from __future__ import annotations

import os
import weakref
from operator import attrgetter

import numpy as np

from . import colread, gaphist
from .colread import STRINGS, TYPES, Grow
from .record import ERROR_OUTCOMES, OUTCOMES, RequestRecord, _record

GAP_CAP = 50_000_000  # pooled gaps kept exactly (200 MB); past it, histograms
BLOCK_ROWS = 8192  # rows per gap histogram (~17 KB each: 2 bytes a row)
CHUNK_BYTES = 8 << 20  # read this much of the file at a time (its lines and tuples: ~3x that while parsed)
CODED = STRINGS + ("retry_causes",)  # the columns that are codes into a table
_HELD: weakref.WeakValueDictionary = weakref.WeakValueDictionary()  # (path, size, mtime, settings) -> Columns in use


class Columns:
    """One column per field the analysis reads, row i being the i-th record of the file (or list).

    Times are float64 epoch seconds, nan where the record has none; status -1 where none came. outcome, served_by,
    step, fault, case, error_code, input_tokens_source and retry_causes (a tuple a row) are integer codes into
    `tables[name]` (a list whose entries may include None); `code(name, value)` and `text(name, row)` translate.
    fixed_output, ended_early and input_mismatch are the record's flags (chaos.records.summary reads them); itl_n
    is each record's count of kept gaps."""

    def __init__(self):
        self.n = 0
        self.tables: dict[str, list] = {name: [] for name in CODED}
        self.tables["outcome"] = list(OUTCOMES)
        self._index = {name: {v: i for i, v in enumerate(t)} for name, t in self.tables.items()}
        for name, t in TYPES.items():
            setattr(self, name, np.empty(0, t))
        self.gaps: np.ndarray | None = np.empty(0, np.uint32)  # the pooled gaps, µs; None past the cap
        self.gap_blocks = np.zeros((0, gaphist.BINS), np.uint32)  # per BLOCK_ROWS rows: their ok gaps' counts
        self.block_offsets = np.empty(0, np.int64)  # the file offset of each block's first row
        self.path: str | None = None
        self._records: list | None = None
        self._odd_blocks: set[int] = set()  # blocks with a line dropped for a bad value (not for bad JSON)

    # -- building ---------------------------------------------------------------------------------------------

    @classmethod
    def read(cls, path: str, gap_cap: int = GAP_CAP, chunk_bytes: int = CHUNK_BYTES) -> Columns:
        """The records of a requests.jsonl, streaming: a chunk of lines parsed, turned into column slices and
        dropped before the next. While a caller still holds the Columns of an unchanged file, another read of it
        returns them (`chaos report` reads the file for the report and again for its page)."""
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, gap_cap, chunk_bytes)
        if (held := _HELD.get(key)) is not None:
            return held
        c = cls()
        c.path = path
        b = _Builder(c, gap_cap, st.st_size)
        with open(path, "rb") as f:
            offset = 0
            while lines := f.readlines(chunk_bytes):
                rows, starts, texts, offset = colread.rows(lines, offset)
                b.add(rows, starts, texts)
        b.finish()
        _HELD[key] = c
        return c

    @classmethod
    def from_records(cls, records) -> Columns:
        """The same columns from records already in memory (every gap kept: they are in memory anyway)."""
        c = cls()
        c._records = records = list(records)
        b = _Builder(c, None, expect=len(records))
        get = attrgetter(*colread.FIELDS)
        for i in range(0, len(records), 65536):
            b.add(list(map(get, records[i:i + 65536])), None, None)
        b.finish()
        return c

    # -- reading ----------------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self.n

    def code(self, name: str, value) -> int:
        """value's code in column `name`; -1 (matching no row) when no record has it."""
        return self._index[name].get(value, -1)

    def codes(self, name: str, values) -> list[int]:
        return [i for v in values if (i := self.code(name, v)) >= 0]

    def text(self, name: str, row: int):
        return self.tables[name][int(getattr(self, name)[row])]

    @property
    def cancelled(self) -> np.ndarray:
        return self.outcome == self.code("outcome", "cancelled")

    @property
    def failed(self) -> np.ndarray:
        """Rows whose outcome is an error (ERROR_OUTCOMES)."""
        return np.isin(self.outcome, self.codes("outcome", ERROR_OUTCOMES))

    @property
    def ok(self) -> np.ndarray:
        """Neither failed nor cancelled: the rows every latency figure reads."""
        return ~np.isin(self.outcome, self.codes("outcome", ERROR_OUTCOMES + ("cancelled",)))

    @property
    def exact_gaps(self) -> bool:
        return self.gaps is not None

    def itl(self, rows: np.ndarray):
        """The gaps (µs) of the ok records among `rows` (a bool mask): a uint32 array while every gap is kept, else
        a gaphist.GapHistogram of them."""
        take = rows & self.ok
        if self.gaps is not None:
            return self.gaps[np.repeat(take, self.itl_n)]
        return gaphist.GapHistogram(self._binned(take))

    def record(self, row: int) -> RequestRecord:
        """Row `row` as a whole record: from the list it was built from, or read again from its file."""
        if self._records is not None:
            return self._records[row]
        b = row // BLOCK_ROWS
        for k, (line, r) in enumerate(self._block_lines(b)):
            if b * BLOCK_ROWS + k == row:
                return _record(colread.loads(line))
        raise IndexError(f"row {row}: not in {self.path} any more (was the file changed after it was read?)")

    # -- the histogram path -----------------------------------------------------------------------------------

    def _block_lines(self, b: int):
        """(line, fields) of block b's rows, read again from the file."""
        got = 0
        probe = _Builder(Columns(), None) if b in self._odd_blocks else None
        with open(self.path, "rb") as f:
            f.seek(int(self.block_offsets[b]))
            for line in f:
                if got >= BLOCK_ROWS or not line.endswith(b"\n"):
                    return
                r = colread.row(line)
                if r is not None and (probe is None or probe._convertible(r, None)):
                    got += 1
                    yield line, r

    def _binned(self, take: np.ndarray) -> np.ndarray:
        """Bin counts of the gaps of rows `take` (ok rows): whole blocks from their histograms, the blocks it
        cuts read again."""
        has = self.ok & (self.itl_n > 0)
        inside, total = _per_block(take & has), _per_block(has)
        whole = (inside == total) & (total > 0)
        out = self.gap_blocks[whole].sum(axis=0, dtype=np.int64)
        for b in np.flatnonzero((inside > 0) & ~whole):
            pick = take[b * BLOCK_ROWS:(b + 1) * BLOCK_ROWS]
            gaps = [g for (_, r), keep in zip(self._block_lines(int(b)), pick) if keep for g in r[colread.GAPS]]
            out += gaphist.counts(np.asarray(gaps, dtype=np.int64))
        return out


def _per_block(mask: np.ndarray) -> np.ndarray:
    """How many rows of each block of BLOCK_ROWS the mask holds."""
    pad = np.zeros(-(-len(mask) // BLOCK_ROWS) * BLOCK_ROWS, bool)
    pad[:len(mask)] = mask
    return pad.reshape(-1, BLOCK_ROWS).sum(axis=1)


class _Builder:
    """Appends chunks of row tuples to a Columns' growing arrays."""

    def __init__(self, c: Columns, gap_cap: int | None, file_size: int = 0, expect: int = 0):
        self.c, self.cap, self.size, self.expect = c, gap_cap, file_size, expect
        self.cols = None
        self.gaps = Grow(np.uint32, 1 << 16)
        self.blocks = Grow(np.uint32, 16, gaphist.BINS)
        self.offsets: list[int] = []
        self.n_gaps = 0

    def _start(self, rows: int, starts) -> None:
        # a first guess of the record count from the first chunk's bytes a line: few or no regrowths
        guess = max(rows, self.expect)
        if starts and self.size and len(starts) > 1:
            guess = int(self.size / max((starts[-1] - starts[0]) / (len(starts) - 1), 1) * 1.05) + 16
        # codes as int16 while their table is small (2 bytes a row each), widened when one outgrows it
        self.cols = {name: Grow(np.int16 if name in CODED else t, guess) for name, t in TYPES.items()}
        self.guess = guess

    def _convert(self, rows: list, texts) -> tuple[dict, np.ndarray]:
        return colread.convert(rows, texts, self.c.tables, self.c._index)

    def add(self, rows: list, starts, texts) -> None:
        if not rows:
            return
        if self.cols is None:
            self._start(len(rows), starts)
        try:
            out, flat = self._convert(rows, texts)
        except (TypeError, ValueError, OverflowError):  # a value that is not what its field holds: drop its row
            good = [k for k, r in enumerate(rows) if self._convertible(r, None if texts is None else texts[k])]
            rows = [rows[k] for k in good]
            starts = None if starts is None else [starts[k] for k in good]
            texts = None if texts is None else [texts[k] for k in good]
            n0 = self.c.n  # the blocks the dropped lines may lie in: read again, they are checked the same way
            self.c._odd_blocks.update(range((n0 - 1) // BLOCK_ROWS if n0 else 0, (n0 + len(rows)) // BLOCK_ROWS + 1))
            if not rows:
                return
            out, flat = self._convert(rows, texts)
        n0 = self.c.n
        if not n0 and self.gaps is not None and self.cap is not None:  # the pool sized once, from the first chunk
            self.gaps.reserve(min(self.cap, int(len(flat) / len(rows) * self.guess * 1.05)) + 16)
        for name in CODED:
            if len(self.c.tables[name]) > 32767 and self.cols[name].a.dtype == np.int16:
                self.cols[name].a = self.cols[name].a.astype(np.int32)
        for name, a in out.items():
            self.cols[name].extend(a)
        self.c.n += len(rows)
        self.n_gaps += len(flat)
        if starts is not None:  # a file: where each block of rows begins, to read one again
            self.offsets += starts[-n0 % BLOCK_ROWS::BLOCK_ROWS]
        if self.gaps is not None and self.cap is not None and self.n_gaps > self.cap:
            self._to_histograms(n0)  # past the cap: the histograms alone from here
        if self.gaps is None:
            self._histogram(n0, len(rows), flat, out["itl_n"])
            return
        if len(flat) and (flat.min() < 0 or flat.max() > 0xFFFFFFFF) and self.gaps.a.dtype != np.int64:
            self.gaps.a = self.gaps.a.astype(np.int64)  # a foreign file's gap past 71 min or below 0
        self.gaps.extend(flat)

    def _to_histograms(self, n: int) -> None:
        """The pooled gaps of rows [0, n) into their blocks' histograms, a few blocks at a time, and the pool
        dropped."""
        pool, counts = self.gaps.a, self.cols["itl_n"].a
        ends = np.cumsum(counts[:n])
        step = 64 * BLOCK_ROWS
        for lo in range(0, n, step):
            hi = min(lo + step, n)
            g0, g1 = (int(ends[lo - 1]) if lo else 0), (int(ends[hi - 1]) if hi else 0)
            self._histogram(lo, hi - lo, pool[g0:g1], counts[lo:hi])
        self.gaps = None

    def _convertible(self, row, text) -> bool:
        try:
            self._convert([row], None if text is None else [text])
            return True
        except (TypeError, ValueError, OverflowError):
            return False

    def _histogram(self, n0: int, m: int, flat: np.ndarray, counts: np.ndarray) -> None:
        """Rows [n0, n0 + m)'s ok gaps (flat, counts a row) added to their blocks' histograms."""
        if not m:
            return
        n1 = n0 + m
        first, last = n0 // BLOCK_ROWS, (n1 - 1) // BLOCK_ROWS
        self.blocks.reserve(last + 1)
        self.blocks.n = max(self.blocks.n, last + 1)
        if not len(flat):
            return
        ok = ~np.isin(self.cols["outcome"].a[n0:n1], self.c.codes("outcome", ERROR_OUTCOMES + ("cancelled",)))
        keep = np.repeat(ok, counts)
        block = np.repeat(np.arange(n0, n1) // BLOCK_ROWS - first, counts)[keep]
        add = np.bincount(block * gaphist.BINS + gaphist.bins(flat[keep]),
                          minlength=(last - first + 1) * gaphist.BINS)
        self.blocks.a[first:last + 1] += add.reshape(-1, gaphist.BINS).astype(np.uint32)

    def finish(self) -> None:
        c = self.c
        if self.cols is None:
            self._start(0, None)
        for name, g in self.cols.items():
            setattr(c, name, g.done())
        c.gaps = None if self.gaps is None else self.gaps.done()
        c.gap_blocks = self.blocks.done()
        c.block_offsets = np.asarray(self.offsets, dtype=np.int64)


def as_columns(records) -> Columns:
    """Columns as they are, or built from a list of records (callers that hold a list keep working)."""
    return records if isinstance(records, Columns) else Columns.from_records(records)
