"""Public production traces without text: Azure LLM inference (CSV), BurstGPT (CSV), Mooncake (JSONL).

Each parser yields (stamp, Item) with offset_s left None (the reader sets it) or a Problem, one per row.
The body is synthesised (synth.PromptSynth): exact token counts, Mooncake's shared prefixes as shared text.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator

from .model import Item, Problem
from .synth import PromptSynth
from .times import parse_iso, parse_time

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def csv_kind(header: list[str]) -> str | None:
    names = {h.strip() for h in header}
    if all(c in names for c in AZURE_COLUMNS):
        return "azure"
    if all(c in names for c in BURSTGPT_COLUMNS):
        return "burstgpt"
    return None


MAX_PROMPT_TOKENS = 1 << 24  # the longest prompt synthesised (16 Mi tokens, a 16 MB text): a row's count is bounded
_HEADER_LINES = 50  # non-blank lines searched for the CSV header (as detect_format does)


def _show(value, most: int = 40) -> str:
    """A field's value for a Problem: short (a hostile field may be megabytes)."""
    text = repr(value)
    return text if len(text) <= most else text[:most - 3] + "..."


def _count(value: str, name: str, most: int | None = None) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        # Some exports write counts as floats ("374.0"); a real fraction, inf or nan is an error.
        try:
            f = float(value)
            n = int(f)
        except (ValueError, OverflowError):
            raise ValueError(f"{name} is {_show(value)}, not a number of tokens") from None
        if f != n:
            raise ValueError(f"{name} is {_show(value)}, not a whole number of tokens") from None
    if n < 0:
        raise ValueError(f"{name} is {n}, a negative token count")
    if most is not None and n > most:
        raise ValueError(f"{name} is {n}, over the {most} tokens a synthesised prompt may have")
    return n


def iter_csv_trace(lines: Iterable[tuple[int, str | Problem]], kind: str, synth: PromptSynth
                   ) -> Iterator[tuple | Problem]:
    """(stamp, Item) or Problem per row of a CSV trace, from (line number, text) pairs (a Problem in place of
    the text passes through). One row per line: the traces quote no newlines, so a stray quote spoils its own
    line only. The header is the first line with the kind's columns, in the first 50 non-blank lines (the lines
    before it are Problems; without one, a Problem stops the reading). ValueError for a header of the other
    kind: the wrong fmt."""
    cols = AZURE_COLUMNS if kind == "azure" else BURSTGPT_COLUMNS
    index = None  # (time, input, output) columns, once the header is read
    need = seen = 0
    for line_no, text in lines:
        if isinstance(text, Problem):
            yield text
            continue
        if not text.strip():
            continue
        try:
            row = next(csv.reader([text]), [])
        except csv.Error as err:
            row, error = None, err
        if index is None:
            seen += 1
            header = [h.strip() for h in row] if row is not None else []
            found = csv_kind(header)
            if found == kind:
                index = tuple(header.index(c) for c in cols)
                need = max(index) + 1
                continue
            if found is not None:
                raise ValueError(f"the CSV header {_show(header, 200)} lacks the {kind} columns {list(cols)}; "
                                 "pass the right fmt or fix the header")
            why = f"the CSV header cannot be read ({error})" if row is None else "not the CSV header"
            yield Problem(line_no, f"{why} (the {kind} columns are {', '.join(cols)})", kind)
            if seen >= _HEADER_LINES:
                yield Problem(line_no, f"no {kind} CSV header in the first {seen} lines: reading stopped", kind)
                return
            continue
        if row is None:
            yield Problem(line_no, f"not a CSV row ({error})", kind)
            continue
        if all(not c.strip() for c in row):
            continue
        if len(row) < need:
            yield Problem(line_no, f"{len(row)} fields, {need} needed ({', '.join(cols)})", kind)
            continue
        t_i, in_i, out_i = index
        try:
            if kind == "azure":
                stamp = parse_iso(row[t_i])  # 7 fractional digits, no zone: UTC
            else:
                stamp = parse_time(row[t_i].strip(), "s")
            n_in = _count(row[in_i], cols[1], MAX_PROMPT_TOKENS)
            n_out = _count(row[out_i], cols[2])
        except ValueError as err:
            yield Problem(line_no, str(err), kind)
            continue
        body = synth.body(n_in, n_out, key=line_no)
        # BurstGPT logs a failed request with 0 response tokens; Azure has no failures in it.
        failed = kind == "burstgpt" and n_out == 0
        yield stamp, Item(line_no, None, synth.endpoint, body, n_in, n_out, failed=failed, fmt=kind)


def mooncake_item(line_no: int, e, synth: PromptSynth) -> tuple | Problem:
    if not isinstance(e, dict):
        return Problem(line_no, f"a Mooncake line is a JSON object, not {type(e).__name__}", "mooncake")
    try:
        n_in = _count(str(e["input_length"]), "input_length", MAX_PROMPT_TOKENS)
        n_out = _count(str(e["output_length"]), "output_length")
        ids = e.get("hash_ids") or []
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ValueError("hash_ids must be a list of integers")
        stamp = parse_time(e["timestamp"], "ms") if e.get("timestamp") is not None else None
    except KeyError as err:
        return Problem(line_no, f"no {err.args[0]!r} field (Mooncake lines have timestamp, input_length, "
                                "output_length, hash_ids)", "mooncake")
    except (ValueError, TypeError) as err:
        return Problem(line_no, str(err), "mooncake")
    body = synth.body(n_in, n_out, key=line_no, hash_ids=ids)
    return stamp, Item(line_no, None, synth.endpoint, body, n_in, n_out, hash_ids=ids, fmt="mooncake")


def is_mooncake(e) -> bool:
    return isinstance(e, dict) and ("hash_ids" in e or ("input_length" in e and "output_length" in e))
