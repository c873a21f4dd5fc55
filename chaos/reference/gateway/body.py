"""A request body at the edge: bounded in size and in time, and checked as far as the gateway needs it.

The size is decided from Content-Length before a byte is read (413 at once, nothing forwarded; the rest the
client sends is read and dropped for a while, http1.server.linger, so that it can read the answer) and, for a
chunked body, from each chunk's size line before that chunk is read: at most max_body bytes are ever held. A body
must arrive within body_timeout_s of its head (a trickling client gets 408 and its connection closed).

Only the envelope is the gateway's business: a JSON Content-Type, a JSON object, not nested past what the
parser can take. Fields stay with the replica, which knows its limits. Bodies over inspect_max are not parsed
here at all (a 32 MB array of numbers would cost the gateway hundreds of MB and block its loop for a
second): they are forwarded as bytes, the replica validates them, and they bypass the answer cache.
"""

from __future__ import annotations

import json

from ...http1.server import read_whole
from ...http1.wire import HTTPError
from ..serving import json_content_type_error
from .call import Call
from .errors import GatewayError


async def read_body(call: Call, limit: int, timeout: float) -> bytes:
    """The whole body, after the cheap refusal that needs none of it (Content-Type); its 413 says what a
    replica's says. HTTPError for a 408 or bad chunked framing: the connection closes after the answer."""
    if (why := json_content_type_error(call.head.get("content-type", ""))) is not None:
        raise GatewayError(400, why, "invalid_content_type")
    if "100-continue" in call.head.tokens("expect") and not (call.framing[0] == "length" and call.framing[1] > limit):
        call.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # the client waits for it before sending the body
    try:
        raw = await read_whole(call.reader, call.framing, limit, timeout, "--body-timeout")
    except HTTPError as e:
        if e.status == 413:
            raise GatewayError(413, f"{e} Send a smaller request.", "request_too_large") from None
        raise
    call.body_read = True
    return raw or b""


def parse_envelope(raw: bytes, inspect_max: int) -> dict | None:
    """The body as a dict, None when it is too big to inspect here; GatewayError (400) when it is no JSON
    object. The messages and codes are the replica's own, so a client sees the same answer either way."""
    if len(raw) > inspect_max:
        return None
    try:
        body = json.loads(raw)
    except RecursionError:
        raise GatewayError(400, "The request body is nested too deeply to parse", "invalid_json") from None
    except ValueError as e:  # UnicodeDecodeError is one
        raise GatewayError(400, f"The request body is not valid JSON: {str(e)[:200]}", "invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayError(400, "The request body must be a JSON object", "invalid_json")
    return body
