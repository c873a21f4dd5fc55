"""A finished output described in a few numbers on its record, so output stability can be judged (chaos/verify/
stability.py) without keeping outputs: a hash to compare repeated answers, the first characters for examples,
whether asked-for JSON parses, how much of it is a closing loop, and how many characters are encoding damage.

Called by the LLM user (chaos.load.judge) once per complete answer. Each measure runs in C over a text of a few
hundred characters (~5 us a record all told, 13 us for 2,000 characters; docs/stability.md), so every answer gets
them, not only probes.
"""

from __future__ import annotations

import hashlib
import json
import re

SHA_HEX = 16  # 64 bits of sha256: two different outputs of one probe collide once in ~10^19
HEAD_CHARS = 80
MAX_UNIT = 64  # the longest loop unit looked for, characters
MIN_REPEATS = 3  # a unit must follow itself this many times to be a loop ("aa" is a word, "aaa" a loop)
# Characters a decoded answer should never hold: U+FFFD (what invalid UTF-8 becomes when the stream is decoded),
# lone surrogates (a JSON \ud800 escape), the noncharacters U+FFFE/U+FFFF, C0 controls but tab, LF and CR, DEL and
# the C1 controls.
_DAMAGE = re.compile("[\ufffd\ufffe\uffff\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
JSON_FORMATS = ("json_object", "json_schema")


def output_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:SHA_HEX]


def garbled(text: str) -> int:
    """Characters of encoding damage (see _DAMAGE)."""
    return len(_DAMAGE.findall(text))


def loop_share(text: str) -> float:
    """The share of text taken by its closing loop: the longest tail made of one unit of 1 to MAX_UNIT characters
    repeated at least MIN_REPEATS times in a row (the tail may end inside a unit: max_tokens cuts a loop anywhere).
    0.0 when the text does not end in one.

    A greedy decoder that falls into a loop stays in it until max_tokens, so a loop is a tail; a repetition that
    stops before the end (a list, a chorus) is not counted. Found with string searches and slice comparisons in C:
    a period p is tried only where the last character recurs p back, and its extent is found by bisection (a tail
    with period p keeps it when shortened)."""
    n = len(text)
    last, best = text[-1:], 0
    low = n - 1 - min(MAX_UNIT, n // MIN_REPEATS)  # the earliest place the last character may recur
    j = text.rfind(last, low, n - 1) if n else -1
    while j >= 0:  # each recurrence of the last character, nearest first: p = n - 1 - j
        p, j = n - 1 - j, text.rfind(last, low, j)
        if text[n - (MIN_REPEATS - 1) * p:] != text[n - MIN_REPEATS * p:n - p]:
            continue
        lo, hi = MIN_REPEATS * p, n  # lo: a tail length with period p; the longest lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if text[n - mid + p:] == text[n - mid:n - p]:
                lo = mid
            else:
                hi = mid - 1
        if lo > best:
            best = lo
            if best == n:
                break
    return round(best / n, 4) if n else 0.0


def asks_json(body: dict, expect_json: bool = False) -> bool:
    rf = body.get("response_format")
    return expect_json or (isinstance(rf, dict) and rf.get("type") in JSON_FORMATS)


def describe_output(rec, text: str, req) -> None:
    """Fill rec's output fields from a complete answer. The head is kept only for generated requests: a replayed
    log's answers may carry its users' data (a replayed request has a source_line)."""
    rec.output_sha = output_sha(text)
    if req.source_line is None:
        rec.output_head = text[:HEAD_CHARS]
    if asks_json(req.body, req.expect_json):
        if rec.error_code == "invalid_json":  # judge.check_json parsed it already
            rec.json_valid = False
        elif req.expect_json:
            rec.json_valid = True
        else:
            try:
                json.loads(text)
                rec.json_valid = True
            except ValueError:
                rec.json_valid = False
    rec.repeat_ngram = loop_share(text)
    rec.garbled = garbled(text)
