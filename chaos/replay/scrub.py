"""Scrubber: redacts secrets and personal data from request bodies and headers before anything is stored
or sent. Each value is replaced by a typed placeholder ("[email]"); report() counts them per kind, never
keeping a value.

Digit runs are classified by checks, not by shape alone, to keep false positives (order numbers, dates)
down: an ID-card number must carry its ISO 7064 check character, a card number must pass Luhn.
Boundaries are ASCII: "手机13800138000" has a phone number in it, though re counts CJK letters as word characters.

The redactions are those of ReferenceScrubber (tests/replay/scrubref.py), byte for byte and count for count
(tests/replay/test_scrub_equivalence.py); what differs is how little of a string re walks to make them: a stage
runs only where its gate occurs, and the number patterns only on the digit runs that chaos.replay.scrubfast finds
(with Hyperscan where it is installed, the `fast` extra). bench/replay_read.py times both.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter

from . import scrubfast

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

# Each pattern starts with a character (class) and checks the character before it in a lookbehind after that:
# re then skips to candidate characters in C instead of trying every position (~10x faster on prose).
_NB = "0-9A-Za-z_"  # ASCII word characters: the boundaries
_BEARER = re.compile(rf"[Bb](?<![{_NB}][Bb])(?i:earer)\s+[A-Za-z0-9\-._~+/]{{8,}}=*")
# OpenAI-style keys: sk-..., sk-proj-..., sk-ant-... (Anthropic), at least 16 characters after the dash.
_SK = re.compile(rf"sk-(?<![{_NB}]sk-)[A-Za-z0-9_\-]{{16,}}")
# E-mail: found by its "@domain"; the local part is walked back by hand (a pattern starting with a letter
# would be tried at every letter).
_EMAIL_DOMAIN = re.compile(rf"@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{{0,61}}[A-Za-z0-9])?\.)+[A-Za-z]{{2,24}}(?![{_NB}-])")
_EMAIL_LOCAL = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._%+-"
_IPV6_HINT = re.compile(r":[0-9A-Fa-f]{0,4}:")
_IPV6 = re.compile(rf"(?<![{_NB}:.])((?:[0-9A-Fa-f]{{0,4}}:){{2,7}}(?:[0-9A-Fa-f]{{0,4}}|\d{{1,3}}(?:\.\d{{1,3}}){{3}})"
                   rf"(?:%[0-9A-Za-z]+)?)(?![{_NB}:])")
_IPV4 = re.compile(rf"(?<![{_NB}.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){{3}}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
                   rf"(?!\.?\d)(?![{_NB}])")
_ID_CARD = re.compile(rf"\d(?<![{_NB}]\d)\d{{16}}[\dXx](?![{_NB}])")
# 13-19 digits, optionally grouped by single spaces or dashes (4-4-4-4, 4-6-5, ...).
_CARD = re.compile(rf"\d(?<![{_NB}+\-]\d)(?:[ \-]?\d){{12,18}}(?![{_NB}])")
_PHONES = (
    # international: +44 20 7946 0958, +86 138 0013 8000
    re.compile(rf"\+(?<![{_NB}+]\+)\d{{1,3}}(?:[ .\-]?\(?\d{{1,4}}\)?){{1,5}}(?![{_NB}])"),
    # (555) 123-4567, (020) 7946 0958
    re.compile(rf"\((?<![{_NB}]\()\d{{2,5}}\)[ .\-]?\d{{3,4}}[ .\-]?\d{{3,4}}(?![{_NB}])"),
    re.compile(rf"\d(?<![{_NB}+]\d)(?:"
               r"\d{2}[.\-]\d{3}[.\-]\d{4}"  # 555-123-4567, 555.123.4567
               r"|\d{2} \d{3} \d{4}"  # 555 123 4567
               r"|(?<=0)\d{1,4}[ \-]\d{3,4}[ \-]?\d{3,4}"  # trunk prefix 0: 020 7946 0958, 030-1234567
               r"|(?<=1)[3-9]\d{9}"  # Chinese mobile: 13800138000
               rf")(?![{_NB}])"),
)

# A run of digits and the separators numbers are written with. Every IPv4 address, ID-card, card and phone
# number lies in one run (give or take a "+" or "(" before it and a ")" or "X" after it), so the number patterns
# run on the runs with enough digits, not on the whole text: prose is scanned once, in C.
_RUN = re.compile(r"[0-9](?:(?:[ ()\-.+]{0,3}[0-9]){6,}|[0-9]{0,2}(?:\.[0-9]{1,3}){3})")  # 7+ digits, or IPv4
_RUN_CONTEXT = 2  # characters kept around a run: a "+" or "(" and the boundary before; ")" or ".5" after
_RUN_CHARS = "0123456789 ()-.+"  # every character a run can hold
# Every run holds a match of _RUN at most this long: its first 7 digits with up to 3 separators between each (25),
# or a whole IPv4 address (15). The hyperscan engine's windows overlap by this much.
_RUN_REACH = 25
# The same runs as finditer finds them, ~3x faster in digit-rich prose ("invoice 2023-11, order 4821"): finditer
# tries _RUN at every digit, and a failed try backtracks. Only the first digit of a group can start a run (a run
# never ends before a digit, and if a digit fails, so does the next in its group): the lookbehind drops the rest
# at once. Any run has 6 more run characters after its first digit: the lookahead drops "4821 asked" in one step.
# Separators and digits are disjoint classes, so the possessive quantifiers give up nothing _RUN would use.
_RUN_FAST = re.compile(r"[0-9](?<![0-9][0-9])(?=[ ()\-.+0-9]{6})"
                       r"(?:(?:[ ()\-.+]{0,3}+[0-9]){6,}+|[0-9]{0,2}+(?:\.[0-9]{1,3}+){3})")
# The literal gates of the text stages, tested exactly as the reference tests them (a looser gate would redact
# what it never did: "BeArEr x..." opens none and stays). They are read off the string once, before the stages: a
# redaction only puts "[kind]" in, which opens no gate, and a gate it closes only runs a stage that finds nothing
# (each stage's pattern holds its gate). The IPv6 gate, a regex, is tested where the reference tests it.
_GATES = (("bearer", "earer"), ("bearer", "EARER"), ("api_key", "sk-"))

_NUMBER_KINDS = frozenset({"ipv4", "id_card", "card", "phone"})
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
    scrubs; report() returns them. engine: how digit runs and gates are found, "auto" (Hyperscan where it is
    installed), "hyperscan" or "python"; the redactions are the same whichever (chaos.replay.scrubfast).
    """

    __slots__ = ("kinds", "_counts", "_finder")

    def __init__(self, kinds=None, *, engine: str = "auto"):
        kinds = tuple(KINDS if kinds is None else kinds)
        unknown = sorted(set(kinds) - set(KINDS))
        if unknown:
            raise ValueError(f"unknown scrub kinds {unknown}; the kinds are {list(KINDS)}")
        self.kinds = frozenset(kinds)
        self._counts: Counter = Counter()
        self._finder = scrubfast.finder(engine, _GATES, _RUN, _RUN_FAST, _RUN_CHARS, _RUN_REACH)

    @property
    def engine(self) -> str:
        """The engine in use: "hyperscan" or "python"."""
        return self._finder.name

    def report(self) -> dict[str, int]:
        """Redactions so far per kind (only kinds that occurred), plus 'total'. Counts, never values."""
        out = {k: self._counts[k] for k in KINDS if self._counts[k]}
        out["total"] = sum(out.values())
        return out

    def text(self, s: str) -> str:
        if not s or (len(s) < scrubfast.SHORT and not _ANY_GATE.search(s)):
            return s  # (not tried on long text: it would stop at every "e" and "s"; the engine's scans tell there)
        k = self.kinds
        gates = self._finder.gates(s) & k if k & _GATED else ()
        if "bearer" in gates:
            s = self._sub(_BEARER, s, "bearer")
        if "api_key" in gates:
            s = self._sub(_SK, s, "api_key")
        if "email" in k and "@" in s:
            s = self._email(s)
        if "ipv6" in k and ":" in s and _IPV6_HINT.search(s):  # (":" first: a search in C for one character)
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
        """The number patterns on each run of digits, with _RUN_CONTEXT characters around it."""
        out, done = [], 0
        for a, b in self._finder.runs(s):
            start, end = max(a - _RUN_CONTEXT, done), min(b + _RUN_CONTEXT, len(s))
            seg = self._number_segment(s[start:end])
            out += (s[done:start], seg)
            done = end
        if not out:
            return s
        out.append(s[done:])
        return "".join(out)

    def _number_segment(self, s: str) -> str:
        # A pattern that cannot match the segment is not run: each skip below names what its pattern needs.
        k = self.kinds
        digits = sum(map(str.isdecimal, s))  # what \d matches; a redaction only removes digits: an upper bound
        if "ipv4" in k and "." in s:
            s = self._sub(_IPV4, s, "ipv4")
        if "id_card" in k and digits >= 17:  # 17 digits and a check character
            s = self._sub(_ID_CARD, s, "id_card", check=id_card_ok)
        if "card" in k and digits >= 13:  # 13 to 19 digits
            s = self._sub(_CARD, s, "card", check=_card_ok)
        if "phone" not in k:
            return s
        for pattern, needs in _PHONE_NEEDS:
            if digits < 7:  # _phone_ok wants 7 to 15
                break
            if needs in s:
                t = self._sub(pattern, s, "phone", check=_phone_digits_ok)
                if t != s:  # a phone redacted: fewer digits left for the next pattern
                    s, digits = t, sum(map(str.isdecimal, t))
        return s

    def _email(self, s: str) -> str:
        out, done = [], 0
        for m in _EMAIL_DOMAIN.finditer(s, s.find("@")):  # a match starts at an "@": none before the first
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


_GATED = frozenset(name for name, _ in _GATES)
# Something at least one stage needs: a digit (runs), "@" (e-mail), ":" (the IPv6 gate) or another gate. Most short
# strings (roles, model names, stop words) hold none, and one search says so before any stage is set up.
_ANY_GATE = re.compile(r"[0-9@:]|earer|EARER|sk-")
# Each phone pattern with a character it cannot match without ("" for the last: any digits).
_PHONE_NEEDS = tuple(zip(_PHONES, ("+", "(", "")))


def _phone_digits_ok(v: str) -> bool:
    """_phone_ok (same count), counted in C: map instead of a generator."""
    return 7 <= sum(map(str.isdigit, v)) <= 15


def _card_ok(v: str) -> bool:
    return luhn_ok(re.sub(r"\D", "", v))


def _phone_ok(v: str) -> bool:
    n = sum(c.isdigit() for c in v)
    return 7 <= n <= 15
