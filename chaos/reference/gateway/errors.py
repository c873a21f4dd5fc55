"""Every error the gateway itself emits, in OpenAI's shape, from one middleware.

Handlers raise GatewayError (or let aiohttp raise its HTTP exceptions: unknown route, wrong method); the
middleware turns each into `{"error": {message, type, param, code}}` with the right status, the request id
and `x-served-by: <gateway>`. Anything else that escapes a handler is a bug of ours: logged, answered 500 in the
same shape, and the gateway serves on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

from aiohttp import web

from ...common import error_type_for, openai_error, retry_after_headers
from ..serving import route_error, route_headers

log = logging.getLogger("chaos.gateway")


class GatewayError(Exception):
    def __init__(self, status: int, message: str, code: str, type_: str | None = None,
                 param: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type_ or error_type_for(status)
        self.retry_after = retry_after


def error_body(message: str, code: str, type_: str = "server_error", param: str | None = None) -> dict:
    return openai_error(message, type_, code, param)


def error_response(e: GatewayError, headers: dict) -> web.Response:
    h = dict(headers)
    if e.retry_after is not None:
        h.update(retry_after_headers(e.retry_after))
    return web.json_response(error_body(e.message, e.code, e.type, e.param), status=e.status, headers=h)


def request_id(request: web.Request) -> str:
    rid = request.get("rid")
    if rid is None:
        rid = request["rid"] = request.headers.get("x-request-id") or uuid.uuid4().hex
    return rid


def error_middleware(name: str):
    @web.middleware
    async def errors(request: web.Request, handler):
        extra = {}
        try:
            return await handler(request)
        except GatewayError as e:
            err = e
        except web.HTTPException as e:
            if e.status < 400:
                raise
            err, extra = GatewayError(e.status, *route_error(request, e)), route_headers(e)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as e:
            log.exception("unhandled error on %s %s", request.method, request.path)
            err = GatewayError(500, f"internal error in the gateway: {type(e).__name__}", "internal_error")
        return error_response(err, {"x-request-id": request_id(request), "x-served-by": name, **extra})

    return errors
