"""What a finished response says, written into its record: tokens, finish, timing, outcome.

Plain functions (no Locust, no gevent) so they are tested on their own; the LLM user in
locustfile.py calls them once a response is read.
"""

from __future__ import annotations

import json

from .clock import Clock
from .outputs import describe_output
from ..records import RequestRecord
from .sse import StreamState, StreamTiming, quantile


def fill_timing(rec: RequestRecord, timing: StreamTiming, clock: Clock) -> None:
    """First-token time and gaps from the monotonic readings of whatever was read of a stream."""
    if timing.first is not None:
        rec.t_first = clock.at(timing.first)
    rec.itl_us, rec.itl_dropped = timing.gaps_us, timing.dropped
    # on the gaps' microsecond grid, so max_itl >= every percentile taken from itl_us
    rec.max_itl = None if timing.max_gap is None else round(timing.max_gap * 1e6) / 1e6
    if timing.gaps_us:
        g = sorted(timing.gaps_us)
        rec.itl_p50, rec.itl_p90, rec.itl_p99 = (quantile(g, q) / 1e6 for q in (.5, .9, .99))


def server_timing(rec: RequestRecord, t) -> None:
    """The reference server's chaos_timing (Unix seconds on its clock): only its own differences are kept, so no
    clock of ours is ever compared with its clock."""
    if not isinstance(t, dict):
        return
    arrival, first, end = (t.get(k) for k in ("arrival", "first_token", "end"))
    num = (int, float)
    if isinstance(arrival, num) and isinstance(first, num):
        rec.server_ttft = first - arrival
    if isinstance(arrival, num) and isinstance(end, num):
        rec.server_e2e = end - arrival


def _usage(rec: RequestRecord, usage, produced_seen: int) -> None:
    if not isinstance(usage, dict):  # a list or a string from a broken server: no counts, not a crash
        usage = {}
    if isinstance(usage.get("prompt_tokens"), int):
        rec.server_input_tokens = usage["prompt_tokens"]
    if isinstance(usage.get("completion_tokens"), int):
        rec.output_tokens, rec.output_tokens_source = usage["completion_tokens"], "usage"
    else:
        rec.output_tokens, rec.output_tokens_source = produced_seen, "stream"


def judge_stream(state: StreamState, rec: RequestRecord, req) -> None:
    rec.chunks = state.content_chunks
    rec.served_by = rec.served_by or state.served_by
    rec.finish_reason = state.finish_reason
    server_timing(rec, state.server_timing)
    _usage(rec, state.usage or {}, state.content_chunks)
    if state.error is not None:
        rec.outcome = "stream_error"
        rec.error_code = str(state.error.get("code") or state.error.get("type") or "error_event")
        rec.error = str(state.error.get("message", ""))[:200]
    elif state.malformed:
        rec.outcome, rec.error_code, rec.error = "stream_error", "malformed_chunk", state.malformed
    elif not state.done:
        rec.outcome, rec.error_code, rec.error = "stream_error", "no_done", "the stream ended without [DONE]"
    elif state.finish_reason is None:
        # 200 and [DONE], yet no choice ever said why it ended: a stream cut short that claims to be whole
        # (llama-cpp-python's server does this to 15 of 16 concurrent streams by default).
        rec.outcome, rec.error_code = "stream_error", "no_finish_reason"
        rec.error = "the stream ended with [DONE] but no finish_reason: cut short by the server"
    elif req.expect_json:
        check_json(state.text, rec)
    if rec.outcome in ("ok", "bad_output"):  # a whole answer: describe it (cut or failed ones are not outputs)
        describe_output(rec, state.text, req)


def judge_plain(payload: bytes, rec: RequestRecord, req) -> None:
    try:
        obj = json.loads(payload)
        choice = obj["choices"][0]
        text = choice["message"]["content"] if "message" in choice else choice["text"]
        finish = choice.get("finish_reason")
        if not isinstance(text, (str, type(None))) or not isinstance(finish, (str, type(None))):
            raise TypeError("content or finish_reason is not a string")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        rec.outcome, rec.error_code, rec.error = "stream_error", "malformed_body", "response body is not a completion"
        return
    _usage(rec, obj.get("usage"), 0)
    rec.finish_reason = finish
    if isinstance(obj.get("system_fingerprint"), str):
        rec.served_by = rec.served_by or obj["system_fingerprint"]
    server_timing(rec, obj.get("chaos_timing"))
    if req.expect_json:
        check_json(text or "", rec)
    describe_output(rec, text or "", req)


def check_json(text: str, rec: RequestRecord) -> None:
    try:
        json.loads(text)
    except ValueError:
        rec.outcome, rec.error_code, rec.error = "bad_output", "invalid_json", "the output is not valid JSON"
