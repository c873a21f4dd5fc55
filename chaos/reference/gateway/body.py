"""A request body at the edge: bounded in size and in time, and checked as far as the gateway needs it.

The size is decided from Content-Length before a byte is read (413 at once, nothing forwarded; aiohttp then
reads and discards the rest for a few seconds so the client can read the answer) and, for a chunked body,
while reading: at most max_body bytes are ever held. The time a body may take is serving.listen's body
deadline (a trickling client gets 408 and its connection closed).

Only the envelope is the gateway's business: a JSON Content-Type, a JSON object, not nested past what the
parser can take. Fields stay with the replica, which knows its limits. Bodies over inspect_max are not parsed
here at all (a 32 MB array of numbers would cost the gateway hundreds of MB and block its loop for a
second): they are forwarded as bytes, the replica validates them, and they bypass the answer cache.
"""

from __future__ import annotations

import json

from aiohttp import web

from ..serving import BodyTooLarge, json_content_type_error, read_bounded
from .errors import GatewayError


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, after the cheap refusals that need none of it (Content-Type, Content-Length); read as
    the replica reads its own (serving.read_bounded), so a 413 says the same from either."""
    if (why := json_content_type_error(request.headers.get("Content-Type", ""))) is not None:
        raise GatewayError(400, why, "invalid_content_type")
    try:
        return await read_bounded(request, limit)
    except BodyTooLarge as e:
        raise GatewayError(413, f"{e} Send a smaller request.", "request_too_large") from None


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
