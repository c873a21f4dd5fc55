"""Record lines into column slices, fast: the parsing half of chaos.records.columns.

Each line is parsed with orjson when installed (else the stdlib) and only the fields the analysis reads are kept,
as one tuple a line (_FIELDS' order); a chunk of tuples becomes numpy slices at once. The inter-token gaps are
cut out of the line before it is parsed: ~20 numbers as Python ints cost more than the rest of the record, and a
chunk's gaps parse from their text in one numpy call.

Which lines are records is read_records' rule: a last line without its newline (cut by a kill mid-write) and a
line that is not a record (not JSON, not an object, a field RequestRecord requires missing, gaps that are not a
list) are skipped, and so is one whose values do not convert (a time that is not a number); a line without `v`
(version 1) reads with the defaults of the fields it lacks, and a field a newer writer added is ignored.
"""

from __future__ import annotations

import json
from itertools import chain
from operator import itemgetter

import numpy as np

try:  # ~3x the stdlib's speed on a record line; optional (the stdlib reads the same files)
    import orjson

    fast_loads = orjson.loads
    _FastError = orjson.JSONDecodeError
except ImportError:  # pragma: no cover - exercised where orjson is absent
    fast_loads, _FastError = json.loads, ValueError

# The row tuple: each field with the default a line without it reads as (RequestRecord's), the gaps last.
_DEFAULTS = {"t_sched": None, "t_start": None, "t_first": None, "t_end": None, "status": None, "outcome": "ok",
             "served_by": None, "step": None, "fault": None, "case": None, "error_code": None, "input_tokens": 0,
             "output_tokens": 0, "retries": 0, "itl_dropped": 0, "input_tokens_source": "exact",
             "server_input_tokens": None, "requested_tokens": None, "fixed_output": False, "finish_reason": None,
             "retry_causes": [], "retry_statuses": [], "itl_us": []}
FIELDS = tuple(_DEFAULTS)
GAPS = FIELDS.index("itl_us")
_REQUIRED = ("id", "case", "endpoint", "stream", "t_sched", "t_start")  # what RequestRecord cannot do without
# every field in one C call when the line has them all (any file written since version 2), then the required ones
# only checked for presence
_GET = itemgetter(*FIELDS, "id", "endpoint", "stream")
_GAPS_KEY = b'"itl_us":['
_DIGITS = b"0123456789,"

STRINGS = ("outcome", "served_by", "step", "fault", "case", "error_code", "input_tokens_source")  # coded columns
TYPES = {"t_sched": np.float64, "t_start": np.float64, "t_first": np.float64, "t_end": np.float64,
         "status": np.int32, "input_tokens": np.int32, "output_tokens": np.int32, "retries": np.int32,
         "itl_dropped": np.int32, **{name: np.int32 for name in STRINGS}, "retry_causes": np.int32,
         "fixed_output": bool, "ended_early": bool, "input_mismatch": bool, "itl_n": np.int32}
NONE = -1  # status when no response came


def loads(line: bytes):
    try:
        return fast_loads(line)
    except _FastError:  # orjson refuses what the stdlib writes for a non-finite float (NaN): ask the stdlib
        return json.loads(line)


def row(line: bytes):
    """One line's fields as a tuple (FIELDS' order), or None when the line is not a record."""
    try:
        d = loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    try:
        r = _GET(d)
    except KeyError:  # an older writer's line without some field: its default
        if any(k not in d for k in _REQUIRED):
            return None
        r = tuple(d.get(k, v) for k, v in _DEFAULTS.items())
    except TypeError:  # not an object
        return None
    return r if type(r[GAPS]) is list else None


def rows(lines: list, offset: int) -> tuple[list, list, list, int]:
    """The records among a chunk's lines, each one's file offset and the text of its gaps ("12,34"; None when they
    are in the tuple), and the offset after the chunk. row(), inlined: a call a line costs a tenth of the time."""
    out, starts, texts = [], [], []
    parse, get, error, key, gaps = fast_loads, _GET, _FastError, _GAPS_KEY, GAPS
    for line in lines:
        if not line.endswith(b"\n"):  # the last line, cut by a kill mid-write
            break
        text, body = None, line
        i = line.find(key)
        if i >= 0:
            i += 10
            j = line.find(b"]", i)
            text, body = line[i:j], line[:i] + line[j:]
        try:
            r = get(parse(body))
            if r[gaps] != []:  # the cut was not the record's own list: read the line whole
                raise TypeError
        except (error, KeyError, TypeError):
            r, text = row(line), None  # the slow path decides: NaN, an older line, not a record
        if r is not None:
            out.append(r)
            starts.append(offset)
            texts.append(text)
        offset += len(line)
    return out, starts, texts, offset


def gap_column(lists, texts) -> tuple[np.ndarray, np.ndarray]:
    """Each row's gap count and the chunk's gaps, flat. texts[k], when not None, is row k's gaps as "12,34"."""
    if texts is not None and None not in texts:
        joined = b",".join(filter(None, texts))
        if not joined.translate(None, _DIGITS) and b",," not in joined and joined[:1] != b"," \
                and joined[-1:] != b",":
            counts = np.fromiter([t.count(b",") + 1 if t else 0 for t in texts], np.int64, len(texts))
            flat = np.fromstring(joined, dtype=np.int64, sep=",") if joined else np.empty(0, np.int64)
            if len(flat) == counts.sum():
                return counts, flat
    if texts is not None:  # a chunk with an older line or an odd number in it: each row's own
        lists = [lst if t is None else loads(b"[" + t + b"]") for lst, t in zip(lists, texts)]
    counts = np.fromiter(map(len, lists), np.int64, len(lists))
    return counts, np.fromiter(chain.from_iterable(lists), np.int64, int(counts.sum()))


def convert(rows_: list, texts, tables: dict, index: dict) -> tuple[dict, np.ndarray]:
    """A chunk's column slices and its gaps (a bad value raises: TypeError, ValueError, OverflowError). New strings
    join `tables` / `index` (name -> list of values / value -> code)."""
    cols = dict(zip(FIELDS, zip(*rows_)))
    out = {}
    for name in STRINGS:
        vals, idx, table = cols[name], index[name], tables[name]
        for v in dict.fromkeys(vals):  # a table in the order values first appear
            if v not in idx:
                idx[v] = len(table)
                table.append(v)
        out[name] = np.fromiter(map(idx.__getitem__, vals), np.int32, len(vals))
    for name in ("t_sched", "t_start", "t_first", "t_end", "input_tokens", "output_tokens", "retries",
                 "itl_dropped"):
        out[name] = np.array(cols[name], dtype=TYPES[name])  # a time's None -> nan
    status = np.array(cols["status"], dtype=np.float64)  # None -> nan -> NONE
    out["status"] = np.where(np.isnan(status), NONE, status).astype(np.int32)
    out["fixed_output"] = fixed = np.array(cols["fixed_output"], dtype=bool)
    stop = np.fromiter([f == "stop" for f in cols["finish_reason"]], bool, len(rows_))
    # RequestRecord.ended_early and summary's input mismatch, per row (a missing number is nan: never less/equal)
    out["ended_early"] = fixed & stop & (out["output_tokens"] < np.array(cols["requested_tokens"], np.float64))
    server = np.array(cols["server_input_tokens"], np.float64)
    exact = out["input_tokens_source"] == index["input_tokens_source"].get("exact", -1)
    out["input_mismatch"] = exact & ~np.isnan(server) & (server != out["input_tokens"])
    out["retry_causes"] = _causes(cols, tables, index)
    counts, flat = gap_column(cols["itl_us"], texts)
    out["itl_n"] = counts.astype(np.int32)
    return out, flat


def _causes(cols: dict, tables: dict, index: dict) -> np.ndarray:
    """What each retried attempt met, as a code of the tuple; a file from before retry_causes: its statuses, then
    "unknown" for the transport failures it did not name (summary's rule)."""
    keys = [tuple(c) if c else (tuple(map(str, s)) + ("unknown",) * max(0, n - len(s)) if n else ())
            for c, s, n in zip(cols["retry_causes"], cols["retry_statuses"], cols["retries"])]
    idx, table = index["retry_causes"], tables["retry_causes"]
    for k in dict.fromkeys(keys):
        if k not in idx:
            idx[k] = len(table)
            table.append(k)
    return np.fromiter(map(idx.__getitem__, keys), np.int32, len(keys))


class Grow:
    """A 1-D (or row-appended 2-D) array grown in place: no second copy of a column while reading."""

    __slots__ = ("a", "n")

    def __init__(self, dtype, capacity: int, width: int | None = None):
        shape = (max(capacity, 16),) if width is None else (max(capacity, 16), width)
        self.a, self.n = np.zeros(shape, dtype), 0

    def reserve(self, n: int) -> None:
        if n > len(self.a):
            self.a.resize((max(n, len(self.a) * 3 // 2),) + self.a.shape[1:], refcheck=False)

    def extend(self, values: np.ndarray) -> None:
        self.reserve(self.n + len(values))
        self.a[self.n:self.n + len(values)] = values
        self.n += len(values)

    def done(self) -> np.ndarray:
        self.a.resize((self.n,) + self.a.shape[1:], refcheck=False)
        return self.a
