"""Scrubber: redacts secrets and personal data from request bodies and headers before anything is stored
or sent. Each value is replaced by a typed placeholder ("[email]"); report() counts them per kind, never
keeping a value.

Digit runs are classified by checks, not by shape alone, to keep false positives (order numbers, dates)
down: an ID-card number must carry its ISO 7064 check character, a card number must pass Luhn.
Boundaries are ASCII: "手机13800138000" has a phone number in it, though re counts CJK letters as word characters.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter

KINDS = ("authorization", "api_key", "cookie", "secret", "bearer", "email", "ipv6", "ipv4", "id_card", "card",
         "phone")

# Header names whose whole value is a credential (compared lower-case).
SECRET_HEADERS = {
    "authorization": "authorization", "proxy-authorization": "authorization",
    "api-key": "api_key", "x-api-key": "api_key", "openai-api-key": "api_key", "x-goog-api-key": "api_key",
    "cookie": "cookie", "set-cookie": "cookie",
}
# Body keys whose value is a credential whatever it looks like.
_SECRET_KEY = re.compile(r"(?i)^(api[-_]?key|x-api-key|authorization|access[-_]?token|refresh[-_]?token|"
                         r"password|passwd|secret|client[-_]?secret|cookie)$")

_BEARER = re.compile(r"(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*")
# OpenAI-style keys: sk-..., sk-proj-..., sk-ant-... (Anthropic), at least 16 characters after the dash.
_SK = re.compile(r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_\-]{16,}")
_EMAIL = re.compile(r"(?<![0-9A-Za-z_.+-])[A-Za-z0-9](?:[A-Za-z0-9._%+-]{0,63})@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}"
                    r"[A-Za-z0-9])?\.)+[A-Za-z]{2,24}(?![0-9A-Za-z_-])")
_IPV6 = re.compile(r"(?<![0-9A-Za-z_:.])((?:[0-9A-Fa-f]{0,4}:){2,7}(?:[0-9A-Fa-f]{0,4}|\d{1,3}(?:\.\d{1,3}){3})"
                   r"(?:%[0-9A-Za-z]+)?)(?![0-9A-Za-z_:])")
_IPV4 = re.compile(r"(?<![0-9A-Za-z_.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   r"(?!\.?\d)(?![0-9A-Za-z_])")
_ID_CARD = re.compile(r"(?<![0-9A-Za-z_])\d{17}[\dXx](?![0-9A-Za-z_])")
# 13-19 digits, optionally grouped by single spaces or dashes (4-4-4-4, 4-6-5, ...).
_CARD = re.compile(r"(?<![0-9A-Za-z_+\-])\d(?:[ \-]?\d){12,18}(?![0-9A-Za-z_])")
_PHONE = re.compile(
    r"(?<![0-9A-Za-z_+])(?:"
    r"\+\d{1,3}(?:[ .\-]?\(?\d{1,4}\)?){1,5}"  # international: +44 20 7946 0958, +86 138 0013 8000
    r"|\(\d{2,5}\)[ .\-]?\d{3,4}[ .\-]?\d{3,4}"  # (555) 123-4567, (020) 7946 0958
    r"|\d{3}[.\-]\d{3}[.\-]\d{4}"  # 555-123-4567, 555.123.4567
    r"|\d{3} \d{3} \d{4}"  # 555 123 4567
    r"|0\d{1,4}[ \-]\d{3,4}[ \-]?\d{3,4}"  # national trunk prefix: 020 7946 0958, 030-1234567, 07700 900123
    r"|1[3-9]\d{9}"  # Chinese mobile: 13800138000
    r")(?![0-9A-Za-z_])")

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def id_card_ok(s: str) -> bool:
    """GB 11643 check character of an 18-character resident ID number."""
    total = sum(int(c) * w for c, w in zip(s[:17], _ID_WEIGHTS))
    return _ID_CHECK[total % 11] == s[17].upper()


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, c in enumerate(reversed(digits)):
        d = int(c)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


class Scrubber:
    """Redacts every string of a body (recursively, dict keys kept) and the credential headers.

    kinds: the kinds to redact (default all of KINDS). The same Scrubber accumulates counts over everything it
    scrubs; report() returns them.
    """

    __slots__ = ("kinds", "_counts")

    def __init__(self, kinds=None):
        kinds = tuple(KINDS if kinds is None else kinds)
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown scrub kinds {unknown}; the kinds are {list(KINDS)}")
        self.kinds = frozenset(kinds)
        self._counts: Counter = Counter()

    def report(self) -> dict[str, int]:
        """Redactions so far per kind (only kinds that occurred), plus 'total'. Counts, never values."""
        out = {k: self._counts[k] for k in KINDS if self._counts[k]}
        out["total"] = sum(out.values())
        return out

    def text(self, s: str) -> str:
        if not s:
            return s
        k = self.kinds
        if "bearer" in k:
            s = self._sub(_BEARER, s, "bearer")
        if "api_key" in k:
            s = self._sub(_SK, s, "api_key")
        if "email" in k:
            s = self._sub(_EMAIL, s, "email")
        if "ipv6" in k and ":" in s:
            s = self._ipv6(s)
        if "ipv4" in k and "." in s:
            s = self._sub(_IPV4, s, "ipv4")
        if "id_card" in k:
            s = self._sub(_ID_CARD, s, "id_card", check=id_card_ok)
        if "card" in k:
            s = self._sub(_CARD, s, "card", check=lambda v: luhn_ok(re.sub(r"\D", "", v)))
        if "phone" in k:
            s = self._sub(_PHONE, s, "phone", check=_phone_ok)
        return s

    def value(self, v, key: str | None = None):
        """Any JSON value, scrubbed; a new object (the input is left as it was)."""
        if isinstance(v, str):
            if key is not None and "secret" in self.kinds and _SECRET_KEY.match(key) and v:
                self._counts["secret"] += 1
                return "[secret]"
            return self.text(v)
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


def _phone_ok(v: str) -> bool:
    n = sum(c.isdigit() for c in v)
    return 7 <= n <= 15
