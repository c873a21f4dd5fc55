"""Public production traces without text: Azure LLM inference (CSV), BurstGPT (CSV), Mooncake (JSONL).

Each parser yields (stamp, Item) with offset_s left None (the reader sets it) or a Problem, one per row.
The body is synthesised (synth.PromptSynth): exact token counts, Mooncake's shared prefixes as shared text.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

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


def _count(value: str, name: str) -> int:
    try:
        n = int(value.strip())
    except ValueError:
        # Some exports write counts as floats ("374.0"); a real fraction is an error.
        f = float(value)
        if f != int(f):
            raise ValueError(f"{name} is {value!r}, not a whole number of tokens") from None
        n = int(f)
    if n < 0:
        raise ValueError(f"{name} is {n}, a negative token count")
    return n


def iter_csv_trace(text: io.TextIOBase, kind: str, synth: PromptSynth) -> Iterator[tuple | Problem]:
    rows = csv.reader(text)
    try:
        header = next(rows)
    except StopIteration:
        return
    except csv.Error as err:
        yield Problem(1, f"the CSV header cannot be read ({err})", kind)
        return
    header = [h.strip() for h in header]
    found = csv_kind(header)
    if found != kind:
        want = AZURE_COLUMNS if kind == "azure" else BURSTGPT_COLUMNS
        raise ValueError(f"the CSV header {header} lacks the {kind} columns {list(want)}; "
                         "pass the right fmt or fix the header")
    cols = AZURE_COLUMNS if kind == "azure" else BURSTGPT_COLUMNS
    t_i, in_i, out_i = (header.index(c) for c in cols)
    need = max(t_i, in_i, out_i) + 1
    last = rows.line_num
    while True:
        start = last + 1
        try:
            row = next(rows)
        except StopIteration:
            return
        except csv.Error as err:
            last = rows.line_num
            yield Problem(start, f"not a CSV row ({err})", kind)
            continue
        last = rows.line_num
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) < need:
            yield Problem(start, f"{len(row)} fields, {need} needed ({', '.join(cols)})", kind)
            continue
        try:
            if kind == "azure":
                stamp = parse_iso(row[t_i])  # 7 fractional digits, no zone: UTC
            else:
                stamp = parse_time(row[t_i].strip(), "s")
            n_in = _count(row[in_i], cols[1])
            n_out = _count(row[out_i], cols[2])
        except ValueError as err:
            yield Problem(start, str(err), kind)
            continue
        body = synth.body(n_in, n_out, key=start)
        # BurstGPT logs a failed request with 0 response tokens; Azure has no failures in it.
        failed = kind == "burstgpt" and n_out == 0
        yield stamp, Item(start, None, synth.endpoint, body, n_in, n_out, failed=failed, fmt=kind)


def mooncake_item(line_no: int, e, synth: PromptSynth) -> tuple | Problem:
    if not isinstance(e, dict):
        return Problem(line_no, f"a Mooncake line is a JSON object, not {type(e).__name__}", "mooncake")
    try:
        n_in = _count(str(e["input_length"]), "input_length")
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
