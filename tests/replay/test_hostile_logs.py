"""Hostile logs (issue 30, fuzzing): truncated, mixed-encoding, gzip-corrupted and enormous-line files, and byte
soup between valid lines. Every bad line is reported by its number, the good lines around it are read, nothing
raises (a corrupt .gz ends the reading with one Problem naming the line and the byte offsets), and memory stays
bounded: a line is held whole only up to max_line_bytes (MAX_LINE_BYTES, 64 MiB, by default); a longer one costs
at most that (in a buffer up to 1.125 x as big) plus a 16 KiB read chunk, however long it is.

Each file is read by both readers: chaos.replay.iter_log, and the load's chaos.load.replay.log.log_entries (what
`chaos replay` and a replay workload send from)."""

import gzip
import json
import random
import socket
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.load.replay.log import log_entries, scan_replay
from chaos.load.replay.opts import ReplayOptions
from chaos.replay import MAX_LINE_BYTES, Item, Problem, Scrubber, detect_format, iter_log

MiB = 1 << 20
AZURE = b"TIMESTAMP,ContextTokens,GeneratedTokens\n"
FUZZ = settings(max_examples=150, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def good(n: int) -> bytes:
    """A valid request for line n: its prompt names the line, so a line read under another number shows."""
    return json.dumps({"timestamp": 1000 + n, "prompt": f"line {n} café"}, ensure_ascii=False).encode()


def gz(data: bytes) -> bytes:
    return gzip.compress(data, mtime=0)  # the same bytes on every run


def lines(*rows: bytes, end: bytes = b"\n") -> bytes:
    return b"".join(r + end for r in rows)


def azure_row(n: int) -> bytes:
    return b"2023-11-16 18:15:%02d.6805900,%d,%d" % (n % 60, 10 + n, 1 + n % 7)


def write(tmp_path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def read(path, **kw) -> tuple[dict, dict]:
    """iter_log's results as ({line: prompt}, {line: why}); one result a line at most, in file order. Nothing
    may raise: an exception fails the test."""
    items, problems, last = {}, {}, 0
    for g in iter_log(path, **kw):
        assert g.line_no > last or (isinstance(g, Problem) and g.line_no == last and g.line_no in problems), g
        last = g.line_no
        if isinstance(g, Item):
            items[g.line_no] = g.body.get("prompt")
        else:
            assert isinstance(g, Problem) and g.why and len(g.why) < 400, g
            problems[g.line_no] = g.why  # a CSV's header search may give a second Problem on its last line
    return items, problems


def load(path, options=None) -> tuple[dict, dict]:
    """The load's reading of the same file (log_entries), in the same shape."""
    items, problems, last = {}, {}, 0
    for line, e, error in log_entries(str(path), options):
        assert line > last, line
        last = line
        if error:
            assert e is None and error.startswith(f"{path}:{line}: ") and len(error) < 400 + len(str(path)), error
            problems[line] = error.removeprefix(f"{path}:{line}: ")
        else:
            items[line] = e.get("prompt")
    return items, problems


READERS = pytest.mark.parametrize("reader", [read, load], ids=["iter_log", "log_entries"])


def prompts(*ns: int) -> dict:
    return {n: f"line {n} café" for n in ns}


def peak_of(fn) -> tuple[object, int]:
    """fn()'s result and the peak of the Python allocations made while it ran (tracemalloc)."""
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# -- truncated ------------------------------------------------------------------------------------------------


@READERS
def test_jsonl_cut_mid_line(tmp_path, reader):
    p = write(tmp_path, "cut.jsonl", lines(good(1), good(2), good(3)) + good(4)[:17])
    items, problems = reader(p)
    assert items == prompts(1, 2, 3) and list(problems) == [4]


@pytest.mark.parametrize("cut", [b"2023-11-16 18:15:4", b"2023-11-16 18:15:46.6805900,3", b"2023-11-16 18:15:46.68"])
def test_csv_cut_mid_row(tmp_path, cut):
    p = write(tmp_path, "azure.csv", AZURE + lines(*(azure_row(n) for n in range(2, 7))) + cut)
    for reader in (read, load):
        items, problems = reader(p)
        assert list(items) == [2, 3, 4, 5, 6] and list(problems) == [7], problems


def test_csv_rows_before_the_header_and_a_stray_quote(tmp_path):
    p = write(tmp_path, "trace.csv", lines(b"\x00\xff junk, 1", b"", AZURE.strip(), azure_row(4),
                                           b'2023-11-16 18:15:46.6805900,"12,3', azure_row(6)))
    for reader in (read, load):
        items, problems = reader(p)  # the header is found on line 3; a quote left open spoils line 5 only
        assert list(items) == [4, 6] and list(problems) == [1, 5], problems
    assert "not the CSV header" in read(p)[1][1]
    with pytest.raises(ValueError, match="lacks the burstgpt columns"):
        list(iter_log(p, fmt="burstgpt"))  # the wrong fmt for a header of the other trace: refused up front


def _many(n: int) -> bytes:
    return lines(*(good(i) for i in range(1, n + 1)))


@pytest.mark.parametrize("keep", [0.3, 0.7, 0.97, 1, 5, 10], ids=["30%", "70%", "97%", "1-byte", "in-header",
                                                                   "header-only"])
@READERS
def test_gzip_cut_short_stops_at_the_line_where_it_ends(tmp_path, reader, keep):
    whole = gz(_many(3000))
    size = int(len(whole) * keep) if isinstance(keep, float) else keep
    p = write(tmp_path, "cut.jsonl.gz", whole[:size])
    items, problems = reader(p)
    k = len(items)
    assert items == prompts(*range(1, k + 1))  # every line before the cut, in order, exactly
    assert list(problems) == [k + 1], problems  # then one Problem where the stream ends, and nothing after
    assert "gzip stream ends early" in problems[k + 1] and f"of the file's {size} compressed bytes" in problems[k + 1]
    assert (k > 0) == isinstance(keep, float)


def test_gzip_csv_cut_short(tmp_path):
    whole = gz(AZURE + lines(*(azure_row(n) for n in range(2, 3002))))
    p = write(tmp_path, "trace.csv.gz", whole[:len(whole) // 2])
    for reader in (read, load):
        items, problems = reader(p)
        k = len(items)
        assert list(items) == list(range(2, k + 2)) and list(problems) == [k + 2]
        assert "ends early" in problems[k + 2]


@pytest.mark.parametrize("data", [b"", b"\n", b"\n\n  \n", b" \r\n\t\r\n\r\r\x0b\x0c\n", b"\xef\xbb\xbf\n"],
                         ids=["empty", "newline", "blank", "crlf-cr-blank", "bom-only"])
def test_empty_and_blank_files_read_as_nothing(tmp_path, data):
    p = write(tmp_path, "x.jsonl", data)
    assert read(p) == ({}, {}) and load(p) == ({}, {})
    with pytest.raises(ValueError, match="no line to tell the format from"):
        detect_format(p)  # documented: nothing to tell the format from
    with pytest.raises(ValueError, match="no requests"):
        scan_replay(str(p))  # what a replay workload and `chaos replay` then say (exit 2)


# -- mixed encodings ------------------------------------------------------------------------------------------


def test_mixed_encodings_line_by_line(tmp_path):
    rows = [
        b"\xef\xbb\xbf" + good(1),  # 1 a UTF-8 BOM at the start of the file
        good(2),
        '{"prompt": "Latin-1 café"}'.encode("latin-1"),  # 3 not UTF-8
        good(4),
        b"\xff\xfe" + good(5).decode().encode("utf-16-le"),  # 5 one line of UTF-16 with its BOM: json reads it
        good(6).decode().encode("utf-16-le"),  # 6 and without (json tells it by its NULs)
        b'{"prompt": "lone \xc3 byte"}',  # 7 a lone invalid byte
        b'{"prompt": "a NUL \x00 in a string"}',  # 8
        b"\x00\x00\x00\x00",  # 9 NULs only
        b"\x00" + good(10),  # 10 a NUL before the JSON
        good(11) + b"\r",  # 11 CRLF
        good(12),
        b"\xed\xa0\x80" + good(13),  # 13 an encoded surrogate (CESU)
        b"\xef\xbb\xbf" + good(14),  # 14 a BOM mid-file (two files concatenated): read
    ]
    body = b"".join(r + b"\n" for r in rows[:-2]) + rows[-2] + b"\r" + rows[-1]  # a CR line end, no end at the end
    p = write(tmp_path, "mixed.jsonl", body)
    for reader in (read, load):
        items, problems = reader(p)
        assert items == prompts(1, 2, 4, 5, 6, 11, 12, 14), (reader, items)
        assert sorted(problems) == [3, 7, 8, 9, 10, 13], (reader, problems)
        assert not any("café" in w or "lone" in w for w in problems.values())  # the content is never quoted
    _, problems = read(p)
    assert f"invalid UTF-8 at byte {rows[2].index(b'caf') + 3}" in problems[3] and "invalid UTF-8" in problems[7]


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-8-sig"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_a_whole_file_in_utf16_or_utf32_is_read(tmp_path, encoding, end):
    """A BOM says the encoding; without one, the NULs of ASCII text in UTF-16/32 do (Windows tools write both)."""
    text = "".join(good(n).decode() + end for n in (1, 2)) + '{"prompt": "emoji 🙂 and 日本"}' + end
    p = write(tmp_path, "wide.jsonl", text.encode(encoding))
    for reader in (read, load):
        items, problems = reader(p)
        assert items == {**prompts(1, 2), 3: "emoji 🙂 and 日本"} and problems == {}, (reader, problems)


def test_an_invalid_sequence_in_a_utf16_file_spoils_its_line_only(tmp_path):
    def le(s: str) -> bytes:
        return s.encode("utf-16-le")

    data = (b"\xff\xfe" + le(good(1).decode() + "\n") + le('{"prompt": "x') + b"\x00\xd8"  # a lone high surrogate
            + le('y"}\n') + le(good(3).decode() + "\n") + le(good(4).decode()) + b"\x7b")  # and an odd last byte
    p = write(tmp_path, "bad16.jsonl", data)
    for reader in (read, load):
        items, problems = reader(p)
        assert items == prompts(1, 3) and sorted(problems) == [2, 4], (reader, problems)
    assert "invalid UTF-16-LE text" in read(p)[1][2]


def test_a_utf16_csv_trace_and_latin1_in_a_trace(tmp_path):
    p = write(tmp_path, "trace.csv", (AZURE + lines(azure_row(2), azure_row(3))).decode().encode("utf-16"))
    assert list(read(p)[0]) == [2, 3]
    header = b"TIMESTAMP,ContextTokens,GeneratedTokens,Note\n"
    q = write(tmp_path, "latin.csv", header + lines(azure_row(2) + b",caf\xe9", b"2023-11-16 18:15:46,1\xe9,3",
                                                    azure_row(4) + b",\x00\xff"))
    items, problems = read(q)
    assert list(items) == [2, 4] and list(problems) == [3]  # an invalid byte spoils only the field it is in


# -- gzip corrupted -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("at", [0.3, 0.45, 0.5, 0.6, 0.75])
def test_flipped_bytes_in_a_gz_stop_the_reading_with_one_problem(tmp_path, at):
    b = bytearray(gz(_many(3000)))
    i = int(len(b) * at)
    b[i:i + 3] = bytes(x ^ 0x5A for x in b[i:i + 3])
    p = write(tmp_path, "flip.jsonl.gz", bytes(b))
    for reader in (read, load):
        items, problems = reader(p)
        stop = max(problems)
        assert "gzip" in problems[stop] and "compressed bytes read" in problems[stop]
        assert stop > max(items) and items[1] == prompts(1)[1]  # the lines before the damage are read
        assert [n for n in problems if "gzip" in problems[n]] == [stop]


@pytest.mark.parametrize("field,message", [(-8, "CRC check failed"), (-4, "Incorrect length")])
def test_a_bad_crc_or_length_is_reported_after_the_last_line(tmp_path, field, message):
    b = bytearray(gz(_many(50)))
    b[field] ^= 0x01
    p = write(tmp_path, "crc.jsonl.gz", bytes(b))
    for reader in (read, load):
        items, problems = reader(p)
        assert items == prompts(*range(1, 51)) and list(problems) == [51]
        assert message in problems[51] and "the lines read before may be corrupt too" in problems[51]


@READERS
def test_gzip_by_its_magic_not_its_name(tmp_path, reader):
    plain = write(tmp_path, "plain.jsonl.gz", _many(3))  # named .gz, not gzip: read as it is
    assert reader(plain) == (prompts(1, 2, 3), {})
    hidden = write(tmp_path, "log.txt", gz(_many(3)))  # gzip without the name: gunzipped
    assert reader(hidden) == (prompts(1, 2, 3), {})


def test_garbage_named_gz(tmp_path):
    noise = random.Random(7).randbytes(4096)
    p = write(tmp_path, "noise.jsonl.gz", b"GARBAGE" + noise)
    with pytest.raises(ValueError, match="cannot tell the format.*named .gz, it does not start as gzip does"):
        list(iter_log(p))  # documented: auto-detection refuses a file with no JSON and no CSV header
    items, problems = read(p, fmt="jsonl")
    assert items == {} and problems and min(problems) == 1
    assert load(p)[0] == {} and len(load(p)[1]) == len(problems)
    q = write(tmp_path, "magic.jsonl.gz", b"\x1f\x8b" + noise)  # gzip's magic, then garbage
    for reader in (read, load):
        items, problems = reader(q)
        assert items == {} and list(problems) == [1] and "gzip data is corrupt" in problems[1]


@READERS
def test_concatenated_members_are_one_stream(tmp_path, reader):
    data = _many(6)
    cut = data.index(b"line 4") + 2  # a member ends mid-line
    p = write(tmp_path, "cat.jsonl.gz", gz(data[:cut]) + gz(data[cut:]) + gz(b""))
    assert reader(p) == (prompts(*range(1, 7)), {})
    q = write(tmp_path, "tail.jsonl.gz", gz(_many(4)) + b"\x00\x00trailing junk")
    items, problems = reader(q)
    assert items == prompts(1, 2, 3, 4) and list(problems) == [5] and "gzip data is corrupt" in problems[5]


# -- enormous lines -------------------------------------------------------------------------------------------


def _with_big_line(path: Path, size: int, valid: bool = False) -> None:
    """Line 1 good, line 2 `size` bytes without a newline in it (a JSON body if valid), line 3 good, no end."""
    block = b"x" * MiB
    with open(path, "wb") as f:
        f.write(good(1) + b"\n")
        rest = size
        if valid:
            f.write(b'{"prompt": "')
            rest -= len(b'{"prompt": ""}')
        while rest > 0:
            f.write(block[:rest])
            rest -= MiB
        f.write(b'"}\n' if valid else b"\n")
        f.write(good(3))


def test_a_64_mb_line_over_the_limit_is_skipped_in_bounded_memory(tmp_path):
    p = tmp_path / "big.jsonl"
    _with_big_line(p, 64_000_000)
    try:
        (items, problems), peak = peak_of(lambda: read(p, max_line_bytes=MiB))
        assert items == prompts(1, 3) and problems == {2: f"line longer than {MiB} bytes, skipped"}
        assert peak < 2 * MiB, peak  # the limit and a read chunk, not the 64 MB line (measured: 1.1 MiB)
        p.write_bytes(b"{" * 64_000_000)  # the whole file one line, never ended
        (items, problems), peak = peak_of(lambda: read(p, fmt="jsonl", max_line_bytes=MiB))
        assert items == {} and list(problems) == [1] and peak < 2 * MiB, peak
    finally:
        p.unlink()


def test_a_line_over_the_default_limit_costs_the_limit_not_the_line(tmp_path):
    p = tmp_path / "over.jsonl"
    _with_big_line(p, MAX_LINE_BYTES + MiB)
    try:
        for reader in (read, load):
            (items, problems), peak = peak_of(lambda: reader(p))
            assert items == prompts(1, 3) and list(problems) == [2] and "longer than 67108864 bytes" in problems[2]
            assert peak < 1.125 * MAX_LINE_BYTES + MiB, (reader, peak)  # the limit, as it grew (measured: 67 MiB)
    finally:
        p.unlink()


def test_a_64_mb_body_within_the_limit_is_read(tmp_path):
    p = tmp_path / "body.jsonl"
    _with_big_line(p, 64_000_000, valid=True)
    try:
        got, peak = peak_of(lambda: [(g.line_no, len(g.body["prompt"])) for g in iter_log(p)])
        assert got == [(1, len("line 1 café")), (2, 64_000_000 - len(b'{"prompt": ""}')), (3, len("line 3 café"))]
        assert peak < 3.5 * 64_000_000, peak  # the line, its text and the parsed prompt (measured: 189 MiB, 3.1x)
    finally:
        p.unlink()


def test_enormous_csv_rows(tmp_path):
    p = tmp_path / "big.csv"
    p.write_bytes(AZURE + azure_row(2) + b"\n" + azure_row(3) + b"," + b"9" * (8 * MiB) + b"\n" + azure_row(4))
    try:
        items, problems = read(p)
        assert list(items) == [2, 4] and list(problems) == [3] and "field larger than field limit" in problems[3]
        (items, problems), peak = peak_of(lambda: read(p, max_line_bytes=MiB))
        assert list(items) == [2, 4] and "longer than" in problems[3] and peak < 2 * MiB, peak
    finally:
        p.unlink()


# -- values that would blow up later --------------------------------------------------------------------------


def _nested(levels: int, inner) -> dict:
    """inner inside levels arrays-in-objects: 2 x levels + 1 levels deep."""
    for _ in range(levels):
        inner = {"x": [inner]}
    return inner


def test_deep_nesting_huge_numbers_and_huge_fields_are_problems(tmp_path):
    rows = [
        b"[" * 100_000,  # 1 deeper than json can go: a RecursionError inside json
        b"[" * 300 + b"]" * 300,  # 2 deeper than MAX_DEPTH (256)
        json.dumps({"prompt": "p", "meta": _nested(200, 1)}).encode(),  # 3 402 levels: json reads it, too deep
        b'{"prompt": "p", "timestamp": 1' + b"0" * 400 + b"}",  # 4 a time 10^400 s away
        b'{"prompt": "p", "timestamp": "' + b"T" * MiB + b'"}',  # 5 a 1 MB time string
        b'{"prompt": "p", "timestamp": 1e400}',  # 6 inf
        good(7),
    ]
    p = write(tmp_path, "deep.jsonl", lines(*rows))
    items, problems = read(p)
    assert list(items) == [7] and sorted(problems) == [1, 2, 3, 4, 5, 6]
    assert "nested too deeply" in problems[1] and "nested too deeply (more than 256 levels)" in problems[3]
    assert "out of range" in problems[4] and "not an ISO date-time" in problems[5] and len(problems[5]) < 200
    items, problems = load(p)  # the load's own JSONL path checks a body's fields, not its times or depth
    assert {1, 2} <= set(problems) and 7 in items
    # 242 levels with an e-mail at the bottom: read, and scrubbed without a RecursionError, by both readers
    deep = {"prompt": "p", "meta": _nested(120, {"note": "mail ann@example.com"})}
    q = write(tmp_path, "nest.jsonl", lines(json.dumps(deep).encode(), good(2)))
    scrubber = Scrubber()
    items, problems = read(q, scrubber=scrubber)
    assert list(items) == [1, 2] and problems == {} and scrubber.report()["email"] == 1
    items, problems = load(q, ReplayOptions(scrub=True))
    assert list(items) == [1, 2] and problems == {}


def test_trace_counts_out_of_range_are_problems(tmp_path):
    p = write(tmp_path, "a.csv", AZURE + lines(azure_row(2), b"2023-11-16 18:15:46,1000000000,5",
                                                b"2023-11-16 18:15:46,1e400,5", b"2023-11-16 18:15:46,nan,5",
                                                b"2023-11-16 18:15:46,1" + b"0" * 5000 + b",5", azure_row(7)))
    items, problems = read(p)
    assert list(items) == [2, 7] and sorted(problems) == [3, 4, 5, 6]
    assert "over the 16777216 tokens" in problems[3] and all(len(w) < 200 for w in problems.values())
    m = write(tmp_path, "m.jsonl", lines(b'{"timestamp": 1, "input_length": 1e400, "output_length": 2}',
                                         b'{"timestamp": 2, "input_length": 99999999999, "output_length": 2}',
                                         b'{"timestamp": 3, "input_length": 5, "output_length": 2, "hash_ids": [1]}'))
    items, problems = read(m)
    assert list(items) == [3] and sorted(problems) == [1, 2]


# -- byte soup (hypothesis) -----------------------------------------------------------------------------------

SOUP = st.binary(max_size=48).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b""))
ENDS = st.sampled_from([b"\n", b"\r\n", b"\r"])
ROWS = st.lists(st.tuples(st.one_of(st.none(), SOUP), ENDS), min_size=1, max_size=25)  # None: a valid line


def _soup_file(rows) -> tuple[bytes, set, set]:
    """The file (line 1 valid: the soup never sits where the encoding is told), its valid lines, its soup lines
    that are not blank."""
    out, valid, soup = [good(1) + b"\n"], {1}, set()
    for n, (row, end) in enumerate(rows, 2):
        if row == b"" and end == b"\n" and out[-1].endswith(b"\r"):
            end = b"\r\n"  # an empty line: after a CR, a LF alone would only make that CR a CRLF
        if row is None:
            out.append(good(n) + end)
            valid.add(n)
        else:
            out.append(row + end)
            if row and not row.isspace():
                soup.add(n)
    return b"".join(out), valid, soup


@FUZZ
@given(rows=ROWS, last_end=st.booleans())
def test_byte_soup_between_valid_lines(rows, last_end):
    data, valid, soup = _soup_file(rows)
    if not last_end:
        data = data.rstrip(b"\r\n")
    with tempfile.TemporaryDirectory() as d:
        p = write(Path(d), "soup.jsonl", data)
        for reader in (read, load):
            items, problems = reader(p)
            assert {n: items[n] for n in valid} == prompts(*valid)  # every valid line, at its own number
            assert set(items) | set(problems) == valid | soup  # each soup line: one result at its number
            assert not set(problems) & valid


@FUZZ
@given(rows=ROWS, cut=st.floats(0.0, 1.0), flip=st.one_of(st.none(), st.integers(0, 10 ** 6)))
def test_byte_soup_in_a_damaged_gz(rows, cut, flip):
    data, valid, soup = _soup_file(rows)
    z = bytearray(gz(data))
    if flip is None:
        z = z[:int(len(z) * cut)]
    else:
        z[flip % len(z)] ^= 1 << (flip % 8)
    with tempfile.TemporaryDirectory() as d:
        p = write(Path(d), "soup.jsonl.gz", bytes(z))
        if flip is not None and flip % len(z) < 2:  # gzip's magic damaged: not gzip, read as it is, binary
            try:
                read(p)
            except ValueError as err:  # documented: auto-detection refuses a file without a JSON line
                assert "named .gz, it does not start as gzip does" in str(err)
            assert read(p, fmt="jsonl")[0] == {}
            return
        for reader in (read, load):
            items, problems = reader(p)  # never raises; results in line order
            stop = max(problems, default=None)
            if flip is None and stop is not None and "gzip" in problems[stop]:
                before = {n for n in valid | soup if n < stop}  # everything before the cut, exactly
                assert {n: items[n] for n in valid if n < stop} == prompts(*(n for n in valid if n < stop))
                assert set(items) | set(problems) == before | {stop}


@settings(max_examples=60, derandomize=True, deadline=None, database=None)
@given(rows=st.lists(st.one_of(st.none(), SOUP), max_size=15))
def test_byte_soup_in_a_csv_trace(rows):
    out, valid = [AZURE], set()
    for n, row in enumerate(rows, 2):
        out.append((azure_row(n) if row is None else row) + b"\n")
        if row is None:
            valid.add(n)
    with tempfile.TemporaryDirectory() as d:
        p = write(Path(d), "soup.csv", b"".join(out))
        items, problems = read(p)
        assert valid <= set(items) and not set(problems) & valid


# -- chaos replay ---------------------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


def test_chaos_replay_on_hostile_files_fails_cleanly(tmp_path):
    """Against a URL where nothing listens (no server is started): exit 2, a one-line error, no traceback."""
    url = f"http://127.0.0.1:{_closed_port()}"
    bad = write(tmp_path, "bad.jsonl", lines(b'{"prompt": ', b"\xff\xfe\x00", b"[" * 5000) + b'{"messages": [')
    b = bytearray(gz(_many(2000)))
    b[len(b) // 2] ^= 0xFF
    flipped = write(tmp_path, "flip.jsonl.gz", bytes(b))
    errors = []
    for log, extra in [(bad, ["--fast"]), (flipped, ["--fast"]), (flipped, [])]:
        p = subprocess.run([sys.executable, "-m", "chaos", "replay", str(log), url, "--out", str(tmp_path / "out"),
                            "--interval", "0", *extra], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (log, extra, p.stdout, p.stderr)  # 2: the replay could not start
        assert "Traceback" not in p.stdout + p.stderr and p.stderr.startswith("error: "), p.stderr
        errors.append(p.stderr)
    # every line bad: the lines are named, and why the first is bad
    assert f"no request in it can be sent (unreadable lines 1, 2, 3, 4; the first: {bad}:1: not JSON" in errors[0]
    assert "cannot reach the target" in errors[1] and "cannot reach the target" in errors[2]
