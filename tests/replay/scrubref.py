"""The reference Scrubber: the redaction logic as it was before the fast path (chaos.replay.scrub.Scrubber),
kept unchanged so that the fast one can be checked against it (tests/replay/test_scrub_equivalence.py) and timed
against it (bench/replay_read.py --compare-reference). It shares the patterns and checks of chaos.replay.scrub:
a pattern changed there changes both, and the equivalence still holds.

Every method that decides what is redacted is defined here, none inherited from the fast class, so the fast
path can change without this one moving. Slow on long text (each kind's pattern scans the whole string); do not
use it for reading logs.
"""

from __future__ import annotations

import ipaddress
import re

from chaos.replay.scrub import (_BEARER, _CARD, _EMAIL_DOMAIN, _EMAIL_LOCAL, _ID_CARD, _IPV4, _IPV6, _IPV6_HINT, _NUMBER_KINDS,
                    _PHONES, _RUN, _RUN_CONTEXT, _SECRET_KEY, _SK, SECRET_HEADERS, Scrubber, _phone_ok, id_card_ok,
                    luhn_ok)


class ReferenceScrubber(Scrubber):
    """Same interface and counts as Scrubber (kinds, report()); the redactions made one pattern at a time."""

    __slots__ = ()

    def __init__(self, kinds=None):
        super().__init__(kinds, engine="python")  # (its finder goes unused: no engine to load)

    def text(self, s: str) -> str:
        if not s:
            return s
        k = self.kinds
        if "bearer" in k and ("earer" in s or "EARER" in s):
            s = self._sub(_BEARER, s, "bearer")
        if "api_key" in k and "sk-" in s:
            s = self._sub(_SK, s, "api_key")
        if "email" in k and "@" in s:
            s = self._email(s)
        if "ipv6" in k and _IPV6_HINT.search(s):
            s = self._ipv6(s)
        if k & _NUMBER_KINDS:
            s = self._numbers(s)
        return s

    def value(self, v, key: str | None = None):
        """Any JSON value, scrubbed; a new object (the input is left as it was)."""
        if isinstance(v, str):
            if key is not None and "secret" in self.kinds and _SECRET_KEY.match(key) and v:
                self._counts["secret"] += 1
                return "[secret]"
            return self.text(v)
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1_000_000:
            # A card or phone number logged as a JSON number: redacted to the placeholder string.
            t = str(v)
            r = self.text(t)
            return r if r != t else v
        if isinstance(v, dict):
            return {k: self.value(x, k if isinstance(k, str) else None) for k, x in v.items()}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        return v

    body = value

    def headers(self, headers) -> dict:
        """Headers with credential values replaced and every other value scrubbed as text."""
        out = {}
        for name, v in (headers or {}).items():
            kind = SECRET_HEADERS.get(str(name).lower())
            if kind is not None and kind in self.kinds:
                self._counts[kind] += 1
                out[name] = f"[{kind}]"
            else:
                out[name] = self.value(v)
        return out

    def scrub_item(self, item) -> None:
        """Scrubs an Item's body and headers in place (what iter_log(scrubber=...) calls)."""
        item.body = self.value(item.body)
        if item.headers is not None:
            item.headers = self.headers(item.headers)

    def _sub(self, pattern: re.Pattern, s: str, kind: str, check=None) -> str:
        def repl(m: re.Match) -> str:
            if check is not None and not check(m.group(0)):
                return m.group(0)
            self._counts[kind] += 1
            return f"[{kind}]"
        return pattern.sub(repl, s)

    def _numbers(self, s: str) -> str:
        out, done = [], 0
        for m in _RUN.finditer(s):
            a, b = m.span()
            start, end = max(a - _RUN_CONTEXT, done), min(b + _RUN_CONTEXT, len(s))
            seg = self._number_segment(s[start:end])
            out += (s[done:start], seg)
            done = end
        if not out:
            return s
        out.append(s[done:])
        return "".join(out)

    def _number_segment(self, s: str) -> str:
        k = self.kinds
        if "ipv4" in k and "." in s:
            s = self._sub(_IPV4, s, "ipv4")
        if "id_card" in k:
            s = self._sub(_ID_CARD, s, "id_card", check=id_card_ok)
        if "card" in k:
            s = self._sub(_CARD, s, "card", check=lambda v: luhn_ok(re.sub(r"\D", "", v)))
        if "phone" in k:
            for pattern in _PHONES:
                s = self._sub(pattern, s, "phone", check=_phone_ok)
        return s

    def _email(self, s: str) -> str:
        out, done = [], 0
        for m in _EMAIL_DOMAIN.finditer(s):
            at = m.start()
            chunk = s[max(done, at - 64):at]
            start = at - (len(chunk) - len(chunk.rstrip(_EMAIL_LOCAL)))
            while start < at and not s[start].isalnum():
                start += 1  # a local part starts with a letter or digit
            if start == at:
                continue  # "@example.com" alone: a handle or a decorator, not an address
            out += (s[done:start], "[email]")
            done = m.end()
            self._counts["email"] += 1
        if not out:
            return s
        out.append(s[done:])
        return "".join(out)

    def _ipv6(self, s: str) -> str:
        if "ipv6" not in self.kinds:
            return s

        def repl(m: re.Match) -> str:
            addr = m.group(1)
            try:
                ipaddress.IPv6Address(addr.split("%", 1)[0])
            except ValueError:
                return m.group(0)
            groups = [g for g in re.split(r"[:.]", addr.split("%", 1)[0]) if g]
            if len(groups) < 2 and not addr.startswith("::"):
                return m.group(0)  # "a::" in prose or code is not worth a redaction
            self._counts["ipv6"] += 1
            return "[ipv6]"
        return _IPV6.sub(repl, s)
