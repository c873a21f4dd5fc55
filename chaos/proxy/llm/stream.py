"""SSE events, parsed only when a stream fault applies, and the effects on them."""

from __future__ import annotations

import json
import re

from ...errors import ServiceError
from .base import Effect, Params, Run

_SEP = re.compile(rb"\r?\n\r?\n")


class Event:
    """One SSE event: its bytes as sent (blank line included) and, on demand, its data and JSON."""

    __slots__ = ("raw", "_data", "_obj")

    def __init__(self, raw: bytes):
        self.raw = raw
        self._data: str | None = None
        self._obj = ...

    @classmethod
    def of(cls, obj) -> Event:
        ev = cls(b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n")
        ev._obj = obj
        return ev

    @property
    def data(self) -> str:
        if self._data is None:
            lines = self.raw.decode("utf-8", "replace").splitlines()
            self._data = "\n".join(ln[5:].lstrip(" ") for ln in lines if ln.startswith("data:"))
        return self._data

    @property
    def obj(self):
        if self._obj is ...:
            try:
                self._obj = json.loads(self.data) if self.data and self.data != "[DONE]" else None
            except ValueError:
                self._obj = None
        return self._obj

    @property
    def is_done(self) -> bool:
        return self.data == "[DONE]"

    @property
    def is_token(self) -> bool:
        """A chunk that carries generated text (content, legacy text or tool-call arguments)."""
        obj = self.obj
        if not isinstance(obj, dict):
            return False
        for ch in obj.get("choices") or ():
            if not isinstance(ch, dict):
                continue
            d = ch.get("delta") if isinstance(ch.get("delta"), dict) else {}
            if d.get("content") or ch.get("text") or d.get("tool_calls"):
                return True
        return False

    @property
    def has_usage(self) -> bool:
        return isinstance(self.obj, dict) and bool(self.obj.get("usage"))


def split_events(buf: bytes) -> tuple[list[Event], bytes]:
    """The complete events in buf, and what is left of the next one."""
    out, start = [], 0
    for m in _SEP.finditer(buf):
        out.append(Event(buf[start:m.end()]))
        start = m.end()
    return out, buf[start:]


class StreamEnd(ServiceError):
    """Stop relaying: mode 'end' (end the body properly), 'cut' (same, the rest dropped) or 'reset' (RST)."""

    def __init__(self, mode: str, events: list[Event] = ()):
        super().__init__(mode)
        self.mode, self.events = mode, list(events)


class StreamCtx:
    """Per stream: tokens = token chunks already seen from the upstream before the current one."""

    __slots__ = ("tokens",)

    def __init__(self):
        self.tokens = 0


class StreamEffect(Effect):
    kind = "stream"

    async def on_head(self, run: Run) -> None:
        """Before the response head goes to the client."""

    async def on_event(self, run: Run, sx: StreamCtx, ev: Event) -> list[Event]:
        return [ev]

    def on_end(self, run: Run, sx: StreamCtx) -> list[Event]:
        return []


class _AfterTokens(StreamEffect):
    """Acts once, on the first token chunk after after_tokens of them went by."""

    def configure(self, p: Params) -> None:
        self.after = p.int_("after_tokens", 0, 0)

    def due(self, run: Run, sx: StreamCtx, ev: Event) -> bool:
        if run.state.get("fired") or not ev.is_token or sx.tokens < self.after:
            return False
        run.state["fired"] = True
        return True


class FirstTokenDelay(StreamEffect):
    name = "first_token_delay"
    help = "delay the first token: delay_s (1.0), where before_headers|after_headers"

    def configure(self, p: Params) -> None:
        self.delay_s = p.num("delay_s", 1.0, 0, 86400)
        self.where = p.choice("where", "after_headers", ("before_headers", "after_headers"))

    async def on_head(self, run: Run) -> None:
        if self.where == "before_headers":
            run.detail = f"held the response head {self.delay_s:g}s"
            await run.rule.sleep(self.delay_s)

    async def on_event(self, run, sx, ev):
        if self.where == "after_headers" and ev.is_token and not run.state.get("fired"):
            run.state["fired"] = True
            run.detail = f"delayed the first token {self.delay_s:g}s"
            await run.rule.sleep(self.delay_s)
        return [ev]


class TokenDelay(StreamEffect):
    name = "token_delay"
    help = "delay every event: delay_s (0.05), jitter_s (0: uniform extra 0..jitter_s); order kept"

    def configure(self, p: Params) -> None:
        self.delay_s = p.num("delay_s", 0.05, 0, 3600)
        self.jitter_s = p.num("jitter_s", 0.0, 0, 3600)

    async def on_event(self, run, sx, ev):
        n = run.state["n"] = run.state.get("n", 0) + 1
        await run.rule.sleep(self.delay_s + (run.rule.rng.random() * self.jitter_s if self.jitter_s else 0))
        run.detail = f"delayed {n} events by {self.delay_s:g}s" + (f" + up to {self.jitter_s:g}s" if self.jitter_s else "")
        return [ev]


class Stall(_AfterTokens):
    name = "stall"
    help = "after after_tokens N (0), stop sending for for_s T (5), then go on"

    def configure(self, p: Params) -> None:
        super().configure(p)
        self.for_s = p.num("for_s", 5.0, 0, 86400)

    async def on_event(self, run, sx, ev):
        if self.due(run, sx, ev):
            run.detail = f"stalling {self.for_s:g}s after {sx.tokens} tokens"
            full = await run.rule.sleep(self.for_s)
            run.detail = f"stalled {self.for_s:g}s after {sx.tokens} tokens" if full else \
                f"stall after {sx.tokens} tokens ended early: rule removed"
        return [ev]


class _End(_AfterTokens):
    """Ends the stream after N tokens; the relay does the ending its name says (StreamEnd)."""

    async def on_event(self, run, sx, ev):
        if self.due(run, sx, ev):
            run.detail = f"{self.name} after {sx.tokens} tokens"
            raise StreamEnd(self.name)
        return [ev]


class Cut(_End):
    name = "cut"
    help = "after after_tokens N (0), end the stream cleanly without the rest or [DONE]"


class Reset(_End):
    name = "reset"
    help = "after after_tokens N (0), reset the connection (RST, SO_LINGER 0)"


class Corrupt(_AfterTokens):
    name = "corrupt"
    help = "after after_tokens N (0), send one chunk whose data is invalid JSON (the chunk cut in half)"

    async def on_event(self, run, sx, ev):
        if self.due(run, sx, ev):
            data = ev.data
            run.detail = f"corrupted the chunk after {sx.tokens} tokens"
            return [Event(b"data: " + data[: max(1, len(data) // 2)].encode() + b"\n\n")]
        return [ev]


class ErrorEvent(_AfterTokens):
    name = "error_event"
    help = "after after_tokens N (0), send data: {\"error\": ...} on the 200, then [DONE] and end: message, code, type"

    def configure(self, p: Params) -> None:
        super().configure(p)
        self.message = p.str_("message", "The server had an error while processing your request.")
        self.code = p.str_("code", None)
        self.type = p.str_("type", "server_error")

    async def on_event(self, run, sx, ev):
        if self.due(run, sx, ev):
            run.detail = f"error event after {sx.tokens} tokens"
            err = {"error": {"message": self.message, "type": self.type, "param": None, "code": self.code}}
            raise StreamEnd("end", [Event.of(err), Event(b"data: [DONE]\n\n")])
        return [ev]


class DropUsage(StreamEffect):
    name = "drop_usage"
    help = "drop the usage chunk (usage removed from a chunk that also carries choices)"

    async def on_event(self, run, sx, ev):
        if not ev.has_usage:
            return [ev]
        obj = dict(ev.obj)
        run.detail = "dropped the usage chunk"
        if obj.get("choices"):
            obj.pop("usage")
            return [Event.of(obj)]
        return []


class DropDone(StreamEffect):
    name = "drop_done"
    help = "drop data: [DONE]; the body still ends properly"

    async def on_event(self, run, sx, ev):
        if ev.is_done:
            run.detail = "dropped [DONE]"
            return []
        return [ev]


class Duplicate(_AfterTokens):
    name = "duplicate"
    help = "after after_tokens N (0), send the next token chunk twice"

    async def on_event(self, run, sx, ev):
        if self.due(run, sx, ev):
            run.detail = f"sent the chunk after {sx.tokens} tokens twice"
            return [ev, ev]
        return [ev]


class Reorder(_AfterTokens):
    name = "reorder"
    help = "after after_tokens N (0), swap the next two token chunks"

    async def on_event(self, run, sx, ev):
        held = run.state.get("held")
        if held is not None:
            run.state["held"] = None
            if ev.is_token:
                run.detail = f"swapped the chunks after {sx.tokens - 1} tokens"
                return [ev, held]
            run.detail = f"nothing to swap after {sx.tokens} tokens"
            return [held, ev]
        if self.due(run, sx, ev):
            run.state["held"] = ev
            return []
        return [ev]

    def on_end(self, run, sx):
        held, run.state["held"] = run.state.get("held"), None
        return [held] if held is not None else []


STREAM_EFFECTS = (FirstTokenDelay, TokenDelay, Stall, Cut, Reset, Corrupt, ErrorEvent, DropUsage, DropDone,
                  Duplicate, Reorder)
