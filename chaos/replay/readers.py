"""iter_log: stream a request log or a production trace as Items, one line at a time.

Memory is bounded by the longest line, never by the file: a 1 GB log is read like a 1 kB one. A line is held whole
only up to max_line_bytes (MAX_LINE_BYTES, 64 MiB, by default); a longer one is a Problem, dropped as it streams
past, of which the reader never holds more than max_line_bytes (in a buffer of at most 1.125 x that, plus a 16 KiB
read chunk). A line within the limit costs about 3 x its size while it is parsed (its bytes, its text, the decoded
values). A trace's synthesised prompt is bounded too (traces.MAX_PROMPT_TOKENS). With a scrubber (or prepare),
up to SCRUB_BATCH lines are held at once, and only as many as fit in SCRUB_BATCH_BYTES (1 MiB, their synthesised
prompts counted) plus one.

Hostile input is reported, never fatal. Each line that cannot be read (not JSON, invalid UTF-8, NUL bytes, too
long, too deeply nested, a bad CSV row) is a Problem with its line number, and reading goes on. A file that
stops being readable (a .gz cut short or corrupt, a bad CRC, a read error) gives one Problem at the line where it
stopped, naming the byte offsets, and the reading ends there; the lines before it have been read.

Lines end at \\n, \\r\\n or a lone \\r. gzip is told by its magic bytes, not the name; concatenated gzip members
are one stream. Text is UTF-8 (a BOM dropped); a file that starts with a UTF-16 or UTF-32 BOM, or whose first
bytes are ASCII in UTF-16/32, is read in that encoding (an invalid sequence spoils its line only).
Lines are yielded in file order, each with its line number.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import json
import os
import re
import zlib
from collections.abc import Iterator

from .bodies import envelope_item, mapped_item, openai_item
from .mapping import LogMapping
from .model import Item, Problem
from .synth import PromptSynth
from .times import offset
from .traces import csv_kind, is_mooncake, iter_csv_trace, mooncake_item

FORMATS = ("auto", "jsonl", "openai", "envelope", "mapped", "azure", "burstgpt", "mooncake")
MAX_LINE_BYTES = 64 << 20  # an abnormal-input log may hold bodies of tens of MB
MAX_DEPTH = 256  # JSON nesting a line may have (json itself stops near 1000, the scrubber sooner)
CHUNK_BYTES = 16 << 10  # read at a time: a line over the limit is dropped a chunk at a time
# With a scrubber, items are read this many at a time (or until their lines pass SCRUB_BATCH_BYTES), then scrubbed
# together, then yielded (iter_log says why).
SCRUB_BATCH = 64
SCRUB_BATCH_BYTES = 1 << 20
_SNIFF_LINES = 50
_EOL = re.compile(rb"\r\n?|\n")
_READ_ERRORS = (OSError, EOFError, zlib.error)  # gzip.BadGzipFile is an OSError

# An undecodable sequence of a UTF-16/32 file becomes the byte 0xff in the UTF-8 the lines are read as: the
# line it is in is reported (invalid text), not silently altered.
_INVALID = "chaos.replay.invalid"
codecs.register_error(_INVALID, lambda err: ("\udcff", err.end))
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"), (codecs.BOM_UTF8, "utf-8"),
         (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def _encoding(head: bytes) -> tuple[str, int]:
    """(encoding, BOM length) of a stream from its first bytes. Without a BOM, UTF-16/32 only when the first
    bytes (up to 16) are printable ASCII in it: a log starts with '{' or a CSV header, and a NUL byte in a UTF-8
    log's first line must not turn the whole file into UTF-16."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc, len(bom)
    sample = head[:16]
    if len(sample) >= 4 and 0 in sample:
        for enc, unit in (("utf-32-le", 4), ("utf-32-be", 4), ("utf-16-le", 2), ("utf-16-be", 2)):
            try:
                text = sample[:len(sample) // unit * unit].decode(enc)
            except UnicodeDecodeError:
                continue
            if all(" " <= c <= "~" or c in "\t\r\n" for c in text):
                return enc, 0
    return "utf-8", 0


class _Source:
    """A log's bytes as UTF-8, a chunk at a time: gunzipped when it starts as gzip does, transcoded when it is
    UTF-16 or UTF-32, its BOM dropped."""

    def __init__(self, path):
        self._raw = open(path, "rb")
        try:
            self.size = os.fstat(self._raw.fileno()).st_size
            head = self._raw.peek(2)[:2]
            self.gzip = head == b"\x1f\x8b" or (head == b"\x1f" and self.size == 1)  # a .gz cut after 1 byte
        except BaseException:
            self._raw.close()
            raise
        self._f = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gzip else self._raw
        self.encoding = None  # told from the first bytes
        self._decoder = None
        self.done = 0  # bytes of the (decompressed) stream read

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            if self._f is not self._raw:
                self._f.close()
        finally:
            self._raw.close()

    def _read1(self) -> bytes:
        chunk = self._f.read1(CHUNK_BYTES)
        self.done += len(chunk)
        return chunk

    def read(self) -> bytes:
        """The next chunk of UTF-8, b'' at the end; one of _READ_ERRORS where the file stops being readable."""
        if self.encoding is None:
            chunk = self._read1()
            while 0 < len(chunk) < 16:
                more = self._read1()
                if not more:
                    break
                chunk += more
            self.encoding, bom = _encoding(chunk)
            chunk = chunk[bom:]
            if self.encoding != "utf-8":
                self._decoder = codecs.getincrementaldecoder(self.encoding)(_INVALID)
        else:
            chunk = self._read1()
        while self._decoder is not None:
            out = self._decoder.decode(chunk, final=not chunk).encode("utf-8", "surrogateescape")
            if out or not chunk:
                return out
            chunk = self._read1()
        return chunk

    def stopped(self, err: BaseException) -> str:
        """Why and where reading stopped, for the Problem that ends it (the error's own text names no content
        beyond a few bytes of a bad gzip header)."""
        raw = self._raw.tell() if not self._raw.closed else self.size
        if not self.gzip:
            return (f"the file cannot be read from here ({err}): reading stopped after {self.done} of its "
                    f"{self.size} bytes")
        if isinstance(err, EOFError) or self.size < 2:  # (gzip calls a lone first byte "not gzip")
            what = "the gzip stream ends early (a truncated .gz?)"
        elif "CRC" in str(err) or "length" in str(err):
            what = f"the gzip data fails its check ({err}): the lines read before may be corrupt too"
        else:
            what = f"the gzip data is corrupt ({err})"
        return (f"{what}; reading stopped here, {self.done} bytes into the decompressed log "
                f"({raw} of the file's {self.size} compressed bytes read)")


class _Stop(Problem):
    """The point where the file stops being readable: the last thing read from it."""

    __slots__ = ()


def _lines(src: _Source, max_line_bytes: int) -> Iterator[tuple[int, bytes | bytearray | Problem]]:
    """(line number, the line without its end) per line, or (line number, Problem) for a line over max_line_bytes
    (never held whole: dropped a chunk at a time) and, last, for the point where the file became unreadable."""
    line_no = 0
    buf = bytearray()  # the start of a line that runs past the chunk
    over = False  # that line is over the limit: its bytes are dropped as they come
    after_cr = False  # the last chunk ended in \r: a \n opening the next one ends no line
    long = f"line longer than {max_line_bytes} bytes, skipped"
    while True:
        try:
            chunk = src.read()
        except _READ_ERRORS as err:
            yield line_no + 1, _Stop(line_no + 1, src.stopped(err))
            return
        if not chunk:
            if buf or over:
                yield line_no + 1, Problem(line_no + 1, long) if over else buf
            return
        if after_cr and chunk[:1] == b"\n":
            chunk = chunk[1:]
        after_cr = chunk.endswith(b"\r")
        parts = _EOL.split(chunk) if b"\r" in chunk else chunk.split(b"\n")  # (split on LF alone is much faster)
        tail = parts.pop()  # the start of the next line (or b"")
        for part in parts:
            line_no += 1
            if over or len(buf) + len(part) > max_line_bytes:
                yield line_no, Problem(line_no, long)
                buf, over = bytearray(), False
            elif buf:
                buf += part
                yield line_no, buf
                buf = bytearray()  # a new one: the caller may still hold the last
            else:
                yield line_no, part
        if tail and not over:
            if len(buf) + len(tail) > max_line_bytes:
                buf, over = bytearray(), True
            else:
                buf += tail


def blank(line: bytes | bytearray) -> bool:
    """Whether a line is empty or whitespace only (without the copy that strip() makes of a long line)."""
    return not line or line.isspace()


def read_lines(path, max_line_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, bytes | bytearray | Problem]]:
    """The lines of a log as bytes (UTF-8, the line end dropped), streamed with their numbers: gunzipped,
    transcoded, bounded as iter_log reads them. A line over max_line_bytes comes as a Problem, and so does, last,
    the point where the file stops being readable (a truncated or corrupt .gz)."""
    with _Source(path) as src:
        yield from _lines(src, max_line_bytes)


def _detect(path, mapping, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[str | None, str | None]:
    """(format, None), or (None, why it cannot be told), or (None, None) when there is nothing to tell it from
    (an empty or blank file, or one unreadable before its format shows)."""
    if mapping is not None:
        return "mapped", None
    name = str(path).lower().removesuffix(".gz")
    is_csv = name.endswith((".csv", ".tsv"))
    tried = 0
    with _Source(path) as src:
        not_gz = (" (named .gz, it does not start as gzip does: not gzip, or its first bytes are damaged)"
                  if str(path).lower().endswith(".gz") and not src.gzip else "")
        for _, line in _lines(src, max_line_bytes):
            if isinstance(line, _Stop):
                return None, None
            if isinstance(line, Problem) or blank(line):
                continue
            tried += 1
            text = line.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
            if is_csv or not text.startswith(("{", "[")):
                try:
                    kind = csv_kind(next(csv.reader([text]), []))
                except csv.Error:  # a field over csv's limit: not a header
                    kind = None
                if kind:
                    return kind, None
            if not is_csv:
                try:
                    e = json.loads(text)
                except (ValueError, RecursionError):
                    pass  # a broken first line must not decide the format
                else:
                    return ("mooncake" if is_mooncake(e) else "jsonl"), None
            if tried >= _SNIFF_LINES:
                break
    if not tried:
        return None, None
    if is_csv:
        return None, (f"{path}: a CSV whose header (none in its first {tried} lines{not_gz}) is neither the Azure LLM "
                      "inference trace's (TIMESTAMP, ContextTokens, GeneratedTokens) nor BurstGPT's (Timestamp, "
                      "Request tokens, Response tokens); pass fmt= or rename the columns")
    return None, (f"{path}: cannot tell the format from its first {tried} lines (no CSV trace header, no JSON "
                  f"line){not_gz}; pass fmt= one of " + ", ".join(FORMATS[1:]))


def detect_format(path, mapping=None) -> str:
    """The format of a file from its content (the extension only breaks ties): a CSV trace by its header,
    a Mooncake trace by its fields, else JSONL of OpenAI bodies and/or envelopes; 'mapped' with a mapping.
    ValueError when it cannot be told (no line, or none of the first 50 says)."""
    fmt, why = _detect(path, mapping)
    if fmt is None:
        raise ValueError(why or f"{path}: no line to tell the format from (empty, blank, or unreadable from its "
                                "start); pass fmt= one of " + ", ".join(FORMATS[1:]))
    return fmt


def iter_log(path, fmt: str = "auto", mapping: dict | LogMapping | None = None, *, seed: int = 0,
             synth_endpoint: str = "completion", scrubber=None, prepare=None,
             max_line_bytes: int = MAX_LINE_BYTES) -> Iterator:
    """Items (and Problems for lines that cannot be read) from a log or trace file, streamed in file order.

    fmt: auto | jsonl (each line an OpenAI body or an envelope) | openai | envelope | mapped (needs mapping) |
    azure | burstgpt | mooncake. seed and synth_endpoint ('completion' or 'chat') shape the prompts
    synthesised for traces. scrubber (a scrub.Scrubber) redacts each Item's body and headers before it is
    yielded. prepare(item), where given, is called on each Item (after the scrubber) and what it returns is
    yielded in the Item's place. offset_s counts from the first timed item; an unsorted log gives negative
    offsets (not sorted here: sorting would need the whole file in memory).

    With a scrubber or prepare, lines are read SCRUB_BATCH at a time (fewer once they and the prompts made for
    them pass SCRUB_BATCH_BYTES), then each item is scrubbed and prepared, then they are yielded: scrubbing
    between reads costs ~25 % more (BENCHMARKS.md section 9; most likely the reader's code and the scrubber's
    evicting each other from the CPU's caches). An Item too deeply nested to scrub (a RecursionError) becomes a
    Problem.

    ValueError (on the first next(), before anything is yielded) for bad arguments or a format that cannot be
    told; an empty file yields nothing. Anything wrong in the file after that is a Problem (see the module's
    docstring).
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if not isinstance(max_line_bytes, int) or max_line_bytes < 1:
        raise ValueError(f"max_line_bytes must be a positive int, not {max_line_bytes!r}")
    m = LogMapping.of(mapping) if mapping is not None else None
    if fmt == "mapped" and m is None:
        raise ValueError("fmt='mapped' needs a mapping (where the time, prompt and max_tokens are)")
    if fmt == "auto":
        fmt, why = _detect(path, m, max_line_bytes)
        if why is not None:
            raise ValueError(why)
        fmt = fmt or "jsonl"  # nothing to tell it from: an empty file, or one whose reading fails at once
    synth = PromptSynth(seed, synth_endpoint)
    batched = scrubber is not None or prepare is not None
    origin = None
    pending: list[Item | Problem] = []  # read, not yet scrubbed or prepared (batched only)
    held = 0  # bytes of the pending items' lines
    for got in _parsed(path, fmt, m, synth, max_line_bytes):
        if isinstance(got, Problem):
            if batched:
                pending.append(got)  # in file order with the items around it
            else:
                yield got
            continue
        stamp, item, size = got
        if stamp is not None:
            if origin is None:
                origin = stamp
            item.offset_s = offset(stamp, origin)
        if not batched:
            yield item
            continue
        pending.append(item)
        held += size
        if len(pending) >= SCRUB_BATCH or held >= SCRUB_BATCH_BYTES:
            yield from _prepared(pending, scrubber, prepare, fmt)
            pending, held = [], 0
    if pending:
        yield from _prepared(pending, scrubber, prepare, fmt)


def _prepared(batch: list, scrubber, prepare, fmt: str) -> list:
    """The batch with each Item scrubbed in place and prepared, all of them before any is handed on."""
    for i, x in enumerate(batch):
        if isinstance(x, Item):
            try:
                if scrubber is not None:
                    scrubber.scrub_item(x)
                batch[i] = x if prepare is None else prepare(x)
            except RecursionError:  # MAX_DEPTH bounds the nesting; a caller deep in its own stack may still hit it
                batch[i] = Problem(x.line_no, "nested too deeply to scrub", fmt)
    return batch


def _parsed(path, fmt: str, m: LogMapping | None, synth: PromptSynth, max_line_bytes: int):
    with _Source(path) as src:
        lines = _lines(src, max_line_bytes)
        if fmt in ("azure", "burstgpt"):
            for got in iter_csv_trace(_texts(lines, fmt), fmt, synth):
                yield got if isinstance(got, Problem) else (*got, _synthesised(got[1]))
            return
        for line_no, line in lines:
            if isinstance(line, Problem):
                line.fmt = fmt
                yield line
                continue
            if blank(line):
                continue
            try:
                e = json.loads(line)  # UTF-8, a BOM dropped (or a line of UTF-16/32: json tells it by its NULs)
            except UnicodeDecodeError as err:  # its message would quote the bytes (possibly PII)
                yield Problem(line_no, f"not JSON (invalid {_name(err.encoding, src.encoding)} at byte "
                                       f"{err.start})", fmt)
                continue
            except ValueError as err:
                yield Problem(line_no, f"not JSON ({err})", fmt)  # json's message names the position only
                continue
            except RecursionError:
                yield Problem(line_no, f"JSON nested too deeply (more than {MAX_DEPTH} levels)", fmt)
                continue
            if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _deeper(e, MAX_DEPTH):
                yield Problem(line_no, f"JSON nested too deeply (more than {MAX_DEPTH} levels)", fmt)
                continue
            if fmt == "mooncake":
                got = mooncake_item(line_no, e, synth)
            elif fmt == "mapped":
                got = mapped_item(line_no, e, m)
            elif fmt == "envelope" or (fmt == "jsonl" and isinstance(e, dict) and "request" in e):
                got = envelope_item(line_no, e)
            else:
                got = openai_item(line_no, e)
            if isinstance(got, Problem):
                yield got
            else:  # what the item holds, for the batches' bound: its line, and a prompt made for it
                yield *got, len(line) + (_synthesised(got[1]) if fmt == "mooncake" else 0)


def _synthesised(item: Item) -> int:
    """Characters of the prompt a trace's item was given (a 16 Mi-token cap allows tens of MB)."""
    body = item.body
    if isinstance(body.get("prompt"), str):
        return len(body["prompt"])
    return sum(len(m.get("content") or "") for m in body.get("messages") or () if isinstance(m, dict))


def _texts(lines, fmt: str):
    """A CSV trace's lines as text (an invalid byte replaced: it spoils at most its own row's fields)."""
    for line_no, line in lines:
        if isinstance(line, Problem):
            line.fmt = fmt
            yield line_no, line
        else:
            yield line_no, line.decode("utf-8", errors="replace")


def _name(line_encoding: str, file_encoding: str) -> str:
    if file_encoding != "utf-8":  # the line was transcoded from the file's encoding
        return f"{file_encoding.upper()} text"
    return line_encoding.upper().replace("UTF-8-SIG", "UTF-8")


def _deeper(v, limit: int) -> bool:
    """Whether a decoded JSON value nests more than limit arrays/objects deep (walked without recursion)."""
    if not isinstance(v, (dict, list)):
        return False
    stack = [(v, 1)]
    while stack:
        x, depth = stack.pop()
        if depth > limit:
            return True
        for c in (x.values() if isinstance(x, dict) else x):
            if isinstance(c, (dict, list)):
                stack.append((c, depth + 1))
    return False
