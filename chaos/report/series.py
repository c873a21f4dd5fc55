"""Request records as columns, and those columns cut into time bins: what report.html plots.

Everything here is numpy over whole columns: a run can hold a million records, and the page must stay a few MB,
so the plots get per-bin figures (at most MAX_BINS bins) and capped samples, never one point a record.

Time is seconds since the load started (report["load_started"]). Latency is placed at a request's send time (the
moment it met whatever state the target was in; open loop: its intended send time, as the step table counts it);
throughput and errors at a request's end (when the client saw the result).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..records import ERROR_OUTCOMES, OUTCOMES
from ..records.labels import rule_and_effect, split_labels

MAX_BINS = 600
NICE_WIDTHS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600)
QUANTILES = (0.50, 0.95, 0.99)
MAX_LABELS = 10  # fault labels drawn one by one; the rest are summed as "other faults"


def min_count(q: float) -> int:
    """The fewest requests a bin needs for its q-quantile to mean anything: at least one request expected above
    it (P50: 2, P95: 20, P99: 100). Fewer, and the "P99" would be just the bin's largest value."""
    return math.ceil(1 / (1 - q) - 1e-9)


@dataclass(slots=True)
class Columns:
    """The records' fields the plots need, one numpy array each (seconds; NaN where a request has none)."""

    t0: float
    sent: np.ndarray  # x of the send time
    done: np.ndarray  # x of the end (the send time when it never ended)
    ttft: np.ndarray  # ok requests only, as the step table counts them
    e2e: np.ndarray  # ok requests only
    spent: np.ndarray  # end - send for every request: how long a failed one took to fail
    outcome: np.ndarray  # index into classes
    classes: list[str]
    error: np.ndarray  # bool: an error outcome (cancelled and ok are not)
    label_rec: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # (record, label) pairs
    label_idx: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    labels: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.sent)


def columns(records, t0: float | None, open_loop: bool = False) -> Columns:
    """Columns from RequestRecords or chaos.records.columns.Columns. t0: the x origin (the load's start; the first
    send when None)."""
    from ..records.columns import Columns as Read  # the records read as columns: no loop over records

    if isinstance(records, Read):
        return _from_read(records, t0, open_loop)
    n = len(records)
    base = np.fromiter(((r.t_sched if open_loop else r.t_start) for r in records), dtype=float, count=n)
    start = np.fromiter((r.t_start for r in records), dtype=float, count=n)
    first = np.fromiter((np.nan if r.t_first is None else r.t_first for r in records), dtype=float, count=n)
    end = np.fromiter((np.nan if r.t_end is None else r.t_end for r in records), dtype=float, count=n)
    classes = list(OUTCOMES)
    index = {c: i for i, c in enumerate(classes)}
    outcome = np.fromiter((index.setdefault(r.outcome, len(index)) for r in records), dtype=np.int64, count=n)
    classes = list(index)  # an outcome this version does not know gets a class of its own
    error = np.isin(outcome, [index[c] for c in ERROR_OUTCOMES])
    # not an error and not cancelled counts as ok, as in the step table
    ok = ~error & (outcome != index["cancelled"])
    if t0 is None:
        t0 = float(base.min()) if n else 0.0
    spent = np.where(np.isnan(end), np.nan, end - base)
    cols = Columns(t0=t0, sent=base - t0, done=np.where(np.isnan(end), start, end) - t0,
                   ttft=np.where(ok, first - base, np.nan), e2e=np.where(ok, spent, np.nan), spent=spent,
                   outcome=outcome, classes=classes, error=error)
    _fault_labels(records, cols)
    return cols


def _from_read(c, t0: float | None, open_loop: bool) -> Columns:
    """columns() of chaos.records.columns.Columns: the same arrays from its columns."""
    base = c.t_sched if open_loop else c.t_start
    ok = c.ok
    if t0 is None:
        t0 = float(base.min()) if len(c) else 0.0
    spent = np.where(np.isnan(c.t_end), np.nan, c.t_end - base)
    cols = Columns(t0=t0, sent=base - t0, done=np.where(np.isnan(c.t_end), c.t_start, c.t_end) - t0,
                   ttft=np.where(ok, c.t_first - base, np.nan), e2e=np.where(ok, spent, np.nan), spent=spent,
                   outcome=c.outcome.astype(np.int64), classes=list(c.tables["outcome"]), error=c.failed)
    # (record, label) pairs in record order, each distinct fault string split once
    codes, first = np.unique(c.fault, return_index=True)
    names: dict[str, int] = {}
    ids = [[] for _ in c.tables["fault"]]
    for k in np.argsort(first):
        if c.tables["fault"][codes[k]]:
            keys = dict.fromkeys(rule_and_effect(x) for x in split_labels(c.tables["fault"][codes[k]]))
            ids[codes[k]] = [names.setdefault(x, len(names)) for x in keys]
    per_code = np.fromiter(map(len, ids), np.int64, len(ids))
    rows = np.flatnonzero(per_code[c.fault] > 0) if len(ids) else np.empty(0, np.int64)
    count = per_code[c.fault[rows]]
    flat = np.fromiter((i for x in ids for i in x), np.int64, int(per_code.sum()))
    at = np.repeat((np.cumsum(per_code) - per_code)[c.fault[rows]], count)
    cols.label_rec = np.repeat(rows, count)
    cols.label_idx = flat[at + np.arange(len(at)) - np.repeat(np.cumsum(count) - count, count)]
    cols.labels = list(names)
    return cols


def _fault_labels(records, cols: Columns) -> None:
    """(record, label) pairs for every "rule; effect" a record met. Only labelled records are visited, and each
    distinct fault string is split once (they repeat: the reader interns them)."""
    parsed: dict[str, list[int]] = {}
    names: dict[str, int] = {}
    recs, idx = [], []
    for i, r in enumerate(records):
        if not r.fault:
            continue
        ids = parsed.get(r.fault)
        if ids is None:
            keys = dict.fromkeys(rule_and_effect(x) for x in split_labels(r.fault))
            ids = parsed[r.fault] = [names.setdefault(k, len(names)) for k in keys]
        recs.extend([i] * len(ids))
        idx.extend(ids)
    cols.label_rec = np.asarray(recs, dtype=np.int64)
    cols.label_idx = np.asarray(idx, dtype=np.int64)
    cols.labels = list(names)


def bin_width(span_s: float, max_bins: int = MAX_BINS) -> float:
    """About 1 s, wider for long runs so there are at most max_bins bins; a round number of seconds."""
    need = span_s / max_bins if span_s > 0 else 1.0
    return float(next((w for w in NICE_WIDTHS if w >= need), math.ceil(need / 3600) * 3600))


@dataclass(slots=True)
class Bins:
    edges: np.ndarray

    @property
    def width(self) -> float:
        return float(self.edges[1] - self.edges[0])

    @property
    def centers(self) -> np.ndarray:
        return (self.edges[:-1] + self.edges[1:]) / 2

    def __len__(self) -> int:
        return len(self.edges) - 1

    def index(self, x: np.ndarray) -> np.ndarray:
        """The bin of each x, clipped into range."""
        return np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, len(self) - 1)


def bins_for(cols: Columns, end_x: float | None = None) -> Bins:
    """Bins from the first send (or 0) to the last end (or end_x, when later)."""
    lo = min(0.0, float(np.nanmin(cols.sent))) if len(cols) else 0.0
    hi = max(float(np.nanmax(cols.done)) if len(cols) else 0.0, end_x or 0.0)
    width = bin_width(hi - lo)
    lo = math.floor(lo / width) * width
    count = max(1, math.ceil((hi - lo) / width + 1e-9))
    return Bins(lo + width * np.arange(count + 1))


def binned_quantiles(bins: Bins, x: np.ndarray, v: np.ndarray, qs=QUANTILES) -> tuple[dict, np.ndarray]:
    """({q: per-bin q-quantile of v, NaN where the bin has fewer than min_count(q) values}, per-bin counts).
    One sort of (bin, value) pairs, then every bin's quantile by index arithmetic: no loop over bins."""
    keep = ~np.isnan(v) & ~np.isnan(x)
    b, v = bins.index(x[keep]), v[keep]
    order = np.lexsort((v, b))
    b, v = b[order], v[order]
    counts = np.bincount(b, minlength=len(bins))
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    out = {}
    for q in qs:
        vals = np.full(len(bins), np.nan)
        has = counts >= max(1, min_count(q))
        if has.any():
            pos = q * (counts[has] - 1)  # linear interpolation, as numpy's default percentile
            lo = np.floor(pos).astype(np.int64)
            hi = np.minimum(lo + 1, counts[has] - 1)
            s = starts[has]
            vals[has] = v[s + lo] + (pos - lo) * (v[s + hi] - v[s + lo])
        out[q] = vals
    return out, counts


def window_bins(counts: np.ndarray, q: float, most: int = 60) -> int:
    """How many bins a q-quantile's rolling window spans: enough for min_count(q) requests at the run's typical
    rate (its median bin among those with any), at least 1, at most `most`."""
    busy = counts[counts > 0]
    if not len(busy):
        return 1
    return int(min(most, max(1, math.ceil(min_count(q) / float(np.median(busy))))))


def rolling_quantiles(bins: Bins, x: np.ndarray, v: np.ndarray, qs=QUANTILES) -> tuple[dict, dict, np.ndarray]:
    """({q: the q-quantile of v over a window centred on each bin, NaN where it holds fewer than min_count(q)},
    {q: the window in seconds}, per-bin counts). A P99 in 1 s bins at 12 requests a second would be all gaps: its
    window widens to hold 100 requests at the run's typical rate, a P50's stays one bin."""
    binned, counts = binned_quantiles(bins, x, v, qs)
    keep = ~np.isnan(v) & ~np.isnan(x)
    order = np.argsort(x[keep], kind="stable")
    xs, vs = x[keep][order], v[keep][order]
    out, widths = {}, {}
    for q in qs:
        k = window_bins(counts, q)
        widths[q] = k * bins.width
        if k == 1:
            out[q] = binned[q]
            continue
        lo = np.searchsorted(xs, bins.centers - widths[q] / 2, side="left")
        hi = np.searchsorted(xs, bins.centers + widths[q] / 2, side="left")
        vals = np.full(len(bins), np.nan)
        for i in np.flatnonzero(hi - lo >= max(1, min_count(q))):
            vals[i] = np.quantile(vs[lo[i]:hi[i]], q)
        out[q] = vals
    return out, widths, counts


def binned_counts(bins: Bins, x: np.ndarray, group: np.ndarray, groups: int) -> np.ndarray:
    """(bins, groups) counts of x by group index."""
    if not len(x):
        return np.zeros((len(bins), groups), dtype=np.int64)
    flat = bins.index(x) * groups + group
    return np.bincount(flat, minlength=len(bins) * groups).reshape(len(bins), groups)


def error_rate(bins: Bins, cols: Columns) -> np.ndarray:
    """Per bin: errors / requests that ended there (cancelled ones not counted); NaN where none ended."""
    judged = cols.outcome != cols.classes.index("cancelled")
    total = np.bincount(bins.index(cols.done[judged]), minlength=len(bins)) if judged.any() else np.zeros(len(bins))
    errs = np.bincount(bins.index(cols.done[cols.error]), minlength=len(bins)) if cols.error.any() else 0 * total
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, errs / np.maximum(total, 1), np.nan)


def label_counts(bins: Bins, cols: Columns) -> tuple[list[str], np.ndarray]:
    """(labels, (bins, labels) counts of requests ending in a bin that met each fault). The MAX_LABELS most
    frequent are kept; the others are summed into "other faults"."""
    if not len(cols.label_rec):
        return [], np.zeros((len(bins), 0))
    counts = binned_counts(bins, cols.done[cols.label_rec], cols.label_idx, len(cols.labels))
    if len(cols.labels) <= MAX_LABELS:
        return list(cols.labels), counts
    top = np.argsort(-counts.sum(axis=0), kind="stable")[:MAX_LABELS - 1]
    rest = np.setdiff1d(np.arange(len(cols.labels)), top)
    return ([cols.labels[i] for i in top] + [f"other faults ({len(rest)})"],
            np.column_stack([counts[:, top], counts[:, rest].sum(axis=1)]))


def sample(n: int, cap: int, seed: int = 0) -> np.ndarray:
    """Indices of at most cap of n items, in order: all when n <= cap, else a fixed-seed random subset (a stride
    would alias with periodic load)."""
    if n <= cap:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=cap, replace=False))


def histogram(values: np.ndarray, max_bins: int = 60) -> tuple[np.ndarray, np.ndarray, bool]:
    """(edges, counts, log): log-spaced bins when the values span more than 20x (and are all > 0)."""
    v = values[~np.isnan(values)]
    if not len(v):
        return np.array([0.0, 1.0]), np.zeros(1, dtype=np.int64), False
    lo, hi = float(v.min()), float(v.max())
    log = lo > 0 and hi / lo > 20
    if log:
        edges = np.logspace(math.log10(lo), math.log10(hi), max_bins + 1)
    else:
        edges = np.linspace(lo, hi if hi > lo else lo + 1e-3, max_bins + 1)
    counts, edges = np.histogram(v, bins=edges)
    return edges, counts, log


def ecdf(values, max_points: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """(x, fraction <= x) of a sample, at most max_points points: the sample's quantiles at evenly spaced
    fractions when it is larger. values: a list of numbers, or a histogram {"edges": [...], "counts": [...]}."""
    if isinstance(values, dict):
        edges = np.asarray(values.get("edges") or values.get("bins") or [], dtype=float)
        counts = np.asarray(values.get("counts") or [], dtype=float)
        if len(edges) != len(counts) + 1 or not counts.sum():
            return np.empty(0), np.empty(0)
        return edges, np.concatenate(([0.0], np.cumsum(counts) / counts.sum()))
    v = np.asarray(values if values is not None else [], dtype=float).ravel()  # a None in the list: NaN
    v = np.sort(v[~np.isnan(v)])
    if not len(v):
        return v, v
    if len(v) <= max_points:
        return v, np.arange(1, len(v) + 1) / len(v)
    f = np.linspace(1 / len(v), 1.0, max_points)
    return np.quantile(v, f), f
