"""One JSON record a request: the contract between the load user, the verifier and reports.

Times are Unix epoch seconds (float) from one anchor per Locust process plus monotonic
deltas (chaos.load.clock), so any difference of two times is a monotonic interval. In
open-loop runs t_sched is when the request should have been sent; latency counted from it
includes time the generator itself fell behind, so coordinated omission cannot hide
queueing. docs/load.md defines every field.
"""

from __future__ import annotations

import json
import sys
from array import array
from dataclasses import dataclass, field, fields

# 1: files written before the field existed (read as they are); 2: the field is written; 3: the output fields
# (output_sha ... stability_key) are written: in a version 1 or 2 record they read as their defaults (unknown)
RECORD_VERSION = 3

OUTCOMES = ("ok", "http_error", "timeout", "connect_error", "reset", "stream_error", "bad_output", "cancelled")
ERROR_OUTCOMES = tuple(o for o in OUTCOMES if o not in ("ok", "cancelled"))


@dataclass(slots=True)
class RequestRecord:
    id: str
    case: str  # workload case: chat, rag, long, prefix, json, replay, ...
    endpoint: str  # chat | completion
    stream: bool
    t_sched: float  # intended send time
    t_start: float  # actual send time
    t_first: float | None = None  # first non-empty content
    t_end: float | None = None
    status: int | None = None  # HTTP status; None when no response came
    outcome: str = "ok"
    error_code: str | None = None  # the body's error.code, or our own detail (e.g. no_done)
    error: str | None = None  # short human message
    timeout_kind: str | None = None  # connect | first_token | total
    input_tokens: int = 0  # the prompt as the workload counted it (exact: what the reference server counts)
    input_tokens_source: str = "exact"  # exact | estimate | usage
    server_input_tokens: int | None = None  # usage.prompt_tokens, when the server said
    requested_tokens: int | None = None  # max_tokens (or max_completion_tokens) asked for
    ignore_eos: bool = False  # whether the request asked the server to ignore EOS (fixed output length)
    fixed_output: bool = False  # the workload fixed the output length (max_tokens is what was asked, not a cap)
    output_tokens: int = 0  # produced: usage.completion_tokens, else content chunks seen
    output_tokens_source: str = "usage"  # usage | stream
    finish_reason: str | None = None
    chunks: int = 0
    max_itl: float | None = None  # largest inter-token gap, seconds
    itl_p50: float | None = None
    itl_p90: float | None = None
    itl_p99: float | None = None
    # every gap between content chunks, integer microseconds; read back as array('I'), 4 bytes a gap
    itl_us: list[int] | array = field(default_factory=list)
    itl_dropped: int = 0  # gaps past chaos.load.sse.MAX_GAPS, counted but not kept
    server_ttft: float | None = None  # the reference server's own chaos_timing: first_token - arrival, seconds
    server_e2e: float | None = None  # end - arrival
    served_by: str | None = None
    retries: int = 0
    retry_statuses: list[int] = field(default_factory=list)
    step: str | None = None
    worker: str | None = None
    # what each retried attempt met, in order: its status ("429", "503") or transport outcome ("connect_error",
    # "reset", "timeout:first_token"); files from before this field have only retry_statuses
    retry_causes: list[str] = field(default_factory=list)
    # the fault proxy's labels (chaos.records.labels): "rule; effect" from x-chaos-fault, "rule; effect; detail"
    # from its log; several distinct ones joined with ", "; None: no fault seen
    fault: str | None = None
    source_line: int | None = None  # replay: the request's line in the log file
    scrubbed: dict | None = None  # replay with scrubbing: redactions in this request's body, kind -> count (no values)
    # The output, described without being kept (chaos.load.outputs; judged by chaos.verify.stability). Written only
    # for a complete output (outcome ok, or bad_output: the answer came whole); None for the rest and for records
    # from before version 3.
    output_sha: str | None = None  # the first 16 hex digits of the sha256 of the output's UTF-8
    output_head: str | None = None  # its first 80 characters, for examples; generated workloads only, never a replay's
    json_valid: bool | None = None  # the output parses as JSON; None: the request did not ask for JSON
    repeat_ngram: float | None = None  # share of the output taken by its closing loop (a unit repeated 3+ times)
    garbled: int | None = None  # U+FFFD, lone surrogates, noncharacters and control characters (not \t \n \r)
    # a stability probe's identity (the same key, the same request body), on its record whatever the outcome;
    # None: an ordinary request
    stability_key: str | None = None
    v: int = RECORD_VERSION  # the record format's version; a file without it is version 1

    @property
    def ttft(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_start

    @property
    def e2e(self) -> float | None:
        return None if self.t_end is None else self.t_end - self.t_start

    @property
    def ended_early(self) -> bool:
        """Stopped by the model (EOS or a stop string) before producing the length the workload fixed. A json
        or replayed request's max_tokens is only a cap: stopping before it is what such a request should do."""
        return (self.fixed_output and self.requested_tokens is not None
                and self.output_tokens < self.requested_tokens and self.finish_reason == "stop")

    def to_json(self) -> str:
        # the fields as they are, not asdict(): its deep copy cost ~0.5 ms a record, in the sending process
        d = {name: getattr(self, name) for name in _FIELDS}
        if isinstance(self.itl_us, array):
            d["itl_us"] = self.itl_us.tolist()
        return json.dumps(d, separators=(",", ":"))


_FIELDS = tuple(f.name for f in fields(RequestRecord))
_FIELD_SET = frozenset(_FIELDS)

# The string fields that repeat across records: one shared object each instead of ~50 bytes a field a record.
_REPEATED = ("case", "endpoint", "outcome", "error_code", "timeout_kind", "input_tokens_source",
             "output_tokens_source", "finish_reason", "served_by", "step", "worker", "fault", "stability_key")


def _gaps(values) -> array:
    """A record's gaps as 4-byte integers: an hour-long run's gaps as Python ints (36 bytes each) were over a GB."""
    try:
        return array("I", values)
    except OverflowError:  # a gap past 71 minutes (or a negative one from a foreign file): 8 bytes, signed
        return array("q", values)


def _record(d: dict) -> RequestRecord:
    """A record from one parsed line. A line without `v` is version 1 (same fields, fewer of them); a field this
    version does not know (a newer writer's) is dropped rather than losing the whole record."""
    if not isinstance(d, dict):
        raise TypeError("a record is a JSON object")
    d.setdefault("v", 1)
    unknown = [k for k in d if k not in _FIELD_SET]
    for k in unknown:
        del d[k]
    return RequestRecord(**d)


def read_new_records(path: str, offset: int = 0) -> tuple[list[RequestRecord], int]:
    """Whole records written after byte offset, and the offset to read from next time. A line still being
    written (no newline yet) waits for the next call; a line cut by a kill mid-write is skipped. Read a line at a
    time: the file of a long run is hundreds of MB."""
    out = []
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return [], offset
    with f:
        f.seek(offset)
        for line in f:
            if not line.endswith(b"\n"):
                break
            offset += len(line)
            try:
                rec = _record(json.loads(line))
                rec.itl_us = _gaps(rec.itl_us)
            except (ValueError, TypeError):
                continue
            for name in _REPEATED:
                v = getattr(rec, name)
                if type(v) is str:
                    setattr(rec, name, sys.intern(v))
            rec.retry_causes = [sys.intern(c) if type(c) is str else c for c in rec.retry_causes]
            out.append(rec)
    return out, offset


def read_records(path: str) -> list[RequestRecord]:
    return read_new_records(path)[0]
