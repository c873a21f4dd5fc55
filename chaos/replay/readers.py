"""iter_log: stream a request log or a production trace as Items, one line at a time.

Memory is bounded by the longest line (max_line_bytes; a longer line is skipped as a Problem), never by the
file: a 1 GB log is read like a 1 kB one. Lines are yielded in file order, each with its line number.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from collections.abc import Iterator

from .bodies import envelope_item, mapped_item, openai_item
from .mapping import LogMapping
from .model import Item, Problem
from .synth import PromptSynth
from .times import offset
from .traces import csv_kind, is_mooncake, iter_csv_trace, mooncake_item

FORMATS = ("auto", "jsonl", "openai", "envelope", "mapped", "azure", "burstgpt", "mooncake")
MAX_LINE_BYTES = 64 << 20  # an abnormal-input log may hold bodies of tens of MB
_SNIFF_LINES = 50


class _Source:
    """The file, gzip-decompressed when it is gzip."""

    def __init__(self, path):
        self._raw = open(path, "rb")
        self.f = gzip.GzipFile(fileobj=self._raw) if self._raw.peek(2)[:2] == b"\x1f\x8b" else self._raw

    def __enter__(self):
        return self.f

    def __exit__(self, *exc):
        if self.f is not self._raw:
            self.f.close()
        self._raw.close()


def _lines(f, max_line_bytes: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line, or (line number, None) for a line over max_line_bytes (then skipped
    in max_line_bytes chunks, so it never sits in memory whole)."""
    line_no = 0
    while True:
        line = f.readline(max_line_bytes + 1)
        if not line:
            return
        line_no += 1
        if len(line) > max_line_bytes and not line.endswith(b"\n"):
            while line and not line.endswith(b"\n"):
                line = f.readline(max_line_bytes)
            yield line_no, None
            continue
        yield line_no, line


def detect_format(path, mapping=None) -> str:
    """The format of a file from its content (the extension only breaks ties): a CSV trace by its header,
    a Mooncake trace by its fields, else JSONL of OpenAI bodies and/or envelopes; 'mapped' with a mapping."""
    if mapping is not None:
        return "mapped"
    name = str(path).lower().removesuffix(".gz")
    tried = 0
    with _Source(path) as f:
        for _, line in _lines(f, MAX_LINE_BYTES):
            if line is None or not line.strip():
                continue
            tried += 1
            text = line.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
            if name.endswith((".csv", ".tsv")) or not text.startswith(("{", "[")):
                kind = csv_kind(next(csv.reader([text]), []))
                if kind:
                    return kind
                if name.endswith(".csv"):
                    raise ValueError(f"{path}: a CSV whose header is neither the Azure LLM inference trace's "
                                     "(TIMESTAMP, ContextTokens, GeneratedTokens) nor BurstGPT's (Timestamp, "
                                     "Request tokens, Response tokens); pass fmt= or rename the columns")
            try:
                e = json.loads(text)
            except ValueError:
                if tried >= _SNIFF_LINES:
                    break
                continue  # a broken first line must not decide the format
            return "mooncake" if is_mooncake(e) else "jsonl"
    raise ValueError(f"{path}: cannot tell the format from its first {tried} lines (no CSV trace header, "
                     "no JSON line); pass fmt= one of " + ", ".join(FORMATS[1:]))


def iter_log(path, fmt: str = "auto", mapping: dict | LogMapping | None = None, *, seed: int = 0,
             synth_endpoint: str = "completion", scrubber=None,
             max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[Item | Problem]:
    """Items (and Problems for lines that cannot be read) from a log or trace file, streamed in file order.

    fmt: auto | jsonl (each line an OpenAI body or an envelope) | openai | envelope | mapped (needs mapping) |
    azure | burstgpt | mooncake. seed and synth_endpoint ('completion' or 'chat') shape the prompts
    synthesised for traces. scrubber (a scrub.Scrubber) redacts each Item's body and headers before it is
    yielded. offset_s counts from the first timed item; an unsorted log gives negative offsets (not sorted
    here: sorting would need the whole file in memory).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not isinstance(max_line_bytes, int) or max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be a positive int, not {max_line_bytes!r}")
    m = LogMapping.of(mapping) if mapping is not None else None
    if fmt == "mapped" and m is None:
        raise ValueError("fmt='mapped' needs a mapping (where the time, prompt and max_tokens are)")
    if fmt == "auto":
        fmt = detect_format(path, m)
    synth = PromptSynth(seed, synth_endpoint)
    origin = None
    for got in _parsed(path, fmt, m, synth, max_line_bytes):
        if isinstance(got, Problem):
            yield got
            continue
        stamp, item = got
        if stamp is not None:
            if origin is None:
                origin = stamp
            item.offset_s = offset(stamp, origin)
        if scrubber is not None:
            scrubber.scrub_item(item)
        yield item


def _parsed(path, fmt: str, m: LogMapping | None, synth: PromptSynth, max_line_bytes: int):
    with _Source(path) as f:
        if fmt in ("azure", "burstgpt"):
            text = io.TextIOWrapper(f, encoding="utf-8-sig", errors="replace", newline="")
            yield from iter_csv_trace(text, fmt, synth)
            return
        for line_no, line in _lines(f, max_line_bytes):
            if line is None:
                yield Problem(line_no, f"line longer than {max_line_bytes} bytes, skipped", fmt)
                continue
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError as err:  # UnicodeDecodeError included
                yield Problem(line_no, f"not JSON ({_short(err)})", fmt)
                continue
            if fmt == "mooncake":
                yield mooncake_item(line_no, e, synth)
            elif fmt == "mapped":
                yield mapped_item(line_no, e, m)
            elif fmt == "envelope" or (fmt == "jsonl" and isinstance(e, dict) and "request" in e):
                yield envelope_item(line_no, e)
            else:
                yield openai_item(line_no, e)


def _short(err: ValueError) -> str:
    # json's message names the position only; a UnicodeDecodeError's would quote the bytes (possibly PII).
    if isinstance(err, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {err.start}"
    return str(err)
