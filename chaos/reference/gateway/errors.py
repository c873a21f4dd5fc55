"""Every error the gateway itself emits, in OpenAI's shape: `{"error": {message, type, param, code}}` with the
right status, the request id and `x-served-by: <gateway>`.

Handlers raise GatewayError; app.Gateway.handle turns it (and a malformed request, and an unknown route or
method) into that answer. Anything else that escapes a handler is a bug of ours: logged, answered 500 in the
same shape, and the gateway serves on.
"""

from __future__ import annotations

import logging

from ...common import error_type_for, openai_error, retry_after_headers
from ...errors import ServiceError
from .call import Reply

log = logging.getLogger("chaos.gateway")


class GatewayError(ServiceError):
    def __init__(self, status: int, message: str, code: str, type_: str | None = None,
                 param: str | None = None, retry_after: float | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.type = type_ or error_type_for(status)
        self.retry_after = retry_after
        self.headers = headers or {}  # what the answer must carry besides: a 405's Allow


def error_body(message: str, code: str, type_: str = "server_error", param: str | None = None) -> dict:
    return openai_error(message, type_, code, param)


def error_reply(e: GatewayError, headers: dict) -> Reply:
    h = {**headers, **e.headers}
    if e.retry_after is not None:
        h.update(retry_after_headers(e.retry_after))
    return Reply.json(error_body(e.message, e.code, e.type, e.param), e.status, h)
