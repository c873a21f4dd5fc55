"""The effects, one small class each, and EFFECTS: name -> class. This module holds the ones that answer instead
of the upstream and the ones on the request; stream.py the SSE ones, content.py the ones on the text."""

from __future__ import annotations

import asyncio
import json
import time

from chaos.common import error_type_for, openai_error, retry_after_headers

from .base import Effect, Params, Run
from .content import CONTENT_EFFECTS
from .stream import STREAM_EFFECTS

STATUSES = (400, 401, 403, 429, 500, 502, 503, 504)
VENDOR_ERRORS = {  # status -> (message, code, param): what a vendor sends in that case
    400: ("This model's maximum context length was exceeded. Please reduce the length of the messages.",
          "context_length_exceeded", "messages"),
    401: ("Incorrect API key provided.", "invalid_api_key", None),
    403: ("You are not allowed to use this model.", "permission_denied", None),
    429: ("Rate limit reached for requests. Please try again later.", "rate_limit_exceeded", None),
    500: ("The server had an error while processing your request.", None, None),
    502: ("Bad gateway.", None, None),
    503: ("The engine is currently overloaded, please try again later.", None, None),
    504: ("Gateway timeout.", None, None),
}


class AnswerEffect(Effect):
    kind = "answer"

    async def answer(self, run: Run, ex) -> None:
        raise NotImplementedError


class Status(AnswerEffect):
    name = "status"
    help = "answer an OpenAI-shaped error: status 429|401|403|400|500|502|503|504, retry_after s (429/503), code, message"

    def configure(self, p: Params) -> None:
        self.status = p.choice("status", 429, STATUSES)
        self.retry_after = p.num("retry_after", None, 0, 86400)
        msg, code, param = VENDOR_ERRORS[self.status]
        self.code = p.str_("code", code)
        self.message = p.str_("message", msg)
        self.param = param

    async def answer(self, run: Run, ex) -> None:
        headers = []
        if self.retry_after is not None and self.status in (429, 503):
            headers = list(retry_after_headers(self.retry_after).items())
        body = openai_error(self.message, error_type_for(self.status), self.code, self.param)
        run.detail = f"answered {self.status}" + (f" retry-after {self.retry_after:g}s" if headers else "")
        await ex.respond(self.status, json.dumps(body).encode(), headers)


class Storm(Status):
    name = "storm"
    help = ("a run of errors then recovery: status (429), length N in a row, recover M pass, repeat true|false, "
            "retry_after, code, message")

    def configure(self, p: Params) -> None:
        super().configure(p)
        self.length = p.int_("length", 3, 1)
        self.recover = p.int_("recover", 1, 1)
        self.repeat = p.bool_("repeat", False)

    def takes(self, rule) -> bool:
        # The storm's own position, counted over the requests that got this far (match, window, probability).
        seen = rule.state.get("storm_seen", 0)
        rule.state["storm_seen"] = seen + 1
        if self.repeat:
            return seen % (self.length + self.recover) < self.length
        return seen < self.length


class Hang(AnswerEffect):
    name = "hang"
    help = "hold the request and send nothing until the client gives up or the rule is removed: max_s (600)"

    def configure(self, p: Params) -> None:
        self.max_s = p.num("max_s", 600, 0, 86400)

    async def answer(self, run: Run, ex) -> None:
        t0 = time.monotonic()
        run.detail = "hung"  # what the log says if the client gives up (this task is cancelled then)
        removed = not await run.rule.sleep(self.max_s)
        run.detail = f"hung {time.monotonic() - t0:.1f}s, then " + ("passed on (rule removed)" if removed else "closed")
        if not removed:
            ex.drop()  # else the request goes on to the upstream after all


class Close(AnswerEffect):
    name = "close"
    help = "close the connection without any response"

    async def answer(self, run: Run, ex) -> None:
        run.detail = "closed without a response"
        ex.drop()


class BadBody(AnswerEffect):
    name = "bad_body"
    help = "a 200 whose body is broken: kind empty|truncated|invalid_json"

    def configure(self, p: Params) -> None:
        self.body_kind = p.choice("kind", "invalid_json", ("empty", "truncated", "invalid_json"))

    async def answer(self, run: Run, ex) -> None:
        whole = json.dumps({"id": "chatcmpl-chaos", "object": "chat.completion", "created": int(time.time()),
                            "model": (ex.request.json() or {}).get("model", "unknown"),
                            "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there."},
                                         "finish_reason": "stop"}]}).encode()
        body = {"empty": b"", "truncated": whole[: len(whole) // 2], "invalid_json": b"{not json"}[self.body_kind]
        run.detail = f"answered 200 with a {self.body_kind} body ({len(body)} bytes)"
        await ex.respond(200, body, [])


class RequestEffect(Effect):
    kind = "request"

    async def before(self, run: Run, ex) -> None:
        """Before anything goes to the upstream."""

    def pace(self, run: Run):
        """None, or a coroutine function send(writer, pieces) that writes the body to the upstream."""
        return None


class Delay(RequestEffect):
    name = "delay"
    help = "wait delay_s before forwarding (a request whose client left meanwhile is dropped, never sent)"

    def configure(self, p: Params) -> None:
        self.delay_s = p.num("delay_s", 1.0, 0, 86400)

    async def before(self, run: Run, ex) -> None:
        t0 = time.monotonic()
        run.detail = f"delaying {self.delay_s:g}s (client left before it was sent)"
        await run.rule.sleep(self.delay_s)
        run.detail = f"delayed {time.monotonic() - t0:.2f}s before forwarding"


class SlowUpload(RequestEffect):
    name = "slow_upload"
    help = "forward the request body to the upstream at rate bytes/s"

    def configure(self, p: Params) -> None:
        self.rate = p.num("rate", 1024, 1, 1e12)

    def pace(self, run: Run):
        async def send(writer: asyncio.StreamWriter, pieces) -> None:
            step = max(1, int(self.rate / 20))  # 20 writes a second: smooth enough, few wakeups
            sent, t0 = 0, time.monotonic()
            async for piece in pieces:
                for i in range(0, len(piece), step):
                    if not run.active:  # removed: the rest goes at full speed
                        writer.write(piece[i:])
                        sent += len(piece) - i
                        break
                    writer.write(piece[i:i + step])
                    await writer.drain()
                    sent += len(piece[i:i + step])
                    wait = t0 + sent / self.rate - time.monotonic()
                    if wait > 0:
                        await asyncio.sleep(wait)
            run.detail = f"uploaded {sent} bytes in {time.monotonic() - t0:.2f}s (rate {self.rate:g} B/s)"
        return send


EFFECTS: dict[str, type[Effect]] = {
    c.name: c for c in (Status, Storm, Hang, Close, BadBody, Delay, SlowUpload, *STREAM_EFFECTS, *CONTENT_EFFECTS)}
