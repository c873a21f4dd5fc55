"""Per-request text assembly: incremental UTF-8 decoding and stop strings."""

from __future__ import annotations

from ..tokenizer import IncrementalDecoder


class TextStream:
    """Accumulates decoded text; holds back a tail that could still become a stop string."""

    __slots__ = ("_decoder", "text", "emitted", "stop", "_hold")

    def __init__(self, stop: tuple[str, ...] = ()):
        self._decoder = IncrementalDecoder()
        self.text = ""
        self.emitted = 0
        self.stop = stop
        self._hold = max((len(s) for s in stop), default=1) - 1

    def append(self, token_id: int) -> bool:
        """Add a token's text; True when a stop string appeared (the text is cut before it)."""
        if not self.stop:  # the common case, on every token of every step
            self.text += self._decoder.feed(token_id)
            return False
        before = len(self.text)
        self.text += self._decoder.feed(token_id)
        for s in self.stop:
            idx = self.text.find(s, max(0, before - len(s) + 1))
            if idx != -1:
                self.text = self.text[:idx]
                return True
        return False

    def finish(self) -> None:
        self.text += self._decoder.flush()

    def take(self, final: bool) -> str:
        """Text not handed out yet; all of it when final."""
        end = len(self.text) if final else max(self.emitted, len(self.text) - self._hold)
        delta = self.text[self.emitted:end]
        self.emitted = end
        return delta
