"""Scrubber: each kind of secret and personal data is redacted and counted, nothing of it survives, and
ordinary numbers are left alone."""

import json

import pytest

from chaos.replay import Scrubber
from chaos.replay.scrub import id_card_ok, luhn_ok

CASES = {
    "email": ["ann.lee+tag@mail.example.co.uk", "bob@example.com"],
    "phone": ["+1 415 555 2671", "+44 20 7946 0958", "+86 138 0013 8000", "(555) 123-4567", "555-123-4567",
              "020 7946 0958", "13800138000", "+49 30 1234567", "555.867.5309"],
    "id_card": ["11010519491231002X", "440524188001010014"],
    "card": ["4111 1111 1111 1111", "5500-0000-0000-0004", "378282246310005", "6011111111111117"],
    "ipv4": ["192.168.1.20", "8.8.8.8", "10.0.0.1"],
    "ipv6": ["2001:db8::8a2e:370:7334", "fe80::1%eth0", "::1", "2001:0db8:0000:0000:0000:ff00:0042:8329"],
    "bearer": ["Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl"],
    "api_key": ["sk-proj-AbCdEf0123456789xyzXYZ", "sk-ant-api03-ZZZZyyyyXXXXwwww0000"],
}


def digits(s: str) -> str:
    return "".join(c for c in s if c.isdigit())


def test_check_digits():
    assert id_card_ok("11010519491231002X") and not id_card_ok("110105194912310021")
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_kind_is_redacted_and_counted(kind):
    s = Scrubber()
    values = CASES[kind]
    text = "; ".join(f"value {i}: {v} (end)" for i, v in enumerate(values))
    out = s.text(text)
    assert out.count(f"[{kind}]") == len(values), out
    assert s.report() == {kind: len(values), "total": len(values)}, out
    for v in values:
        assert v not in out
        if len(digits(v)) >= 7:
            assert digits(v) not in digits(out)


def test_no_value_survives_anywhere_in_a_body_or_headers():
    every = [v for vs in CASES.values() for v in vs]
    body = {"model": "m", "messages": [{"role": "user", "content": f"my data: {v}, thanks"} for v in every],
            "metadata": {"nested": [[{"note": "cc " + CASES["card"][0]}]], "api_key": "plain-secret-value",
                         "n": 42, "ok": True, "card_as_number": 4111111111111111, "big": 123456789}}
    headers = {"Authorization": "Bearer abcdefgh12345678", "api-key": "azure-key-1234", "X-API-Key": "k9k9k9k9",
               "Cookie": "session=s3cr3t", "X-Forwarded-For": "203.0.113.9", "Content-Type": "application/json"}
    s = Scrubber()
    out_body, out_headers = s.body(body), s.headers(headers)
    dumped = json.dumps([out_body, out_headers], ensure_ascii=False)
    for v in every + ["plain-secret-value", "abcdefgh12345678", "azure-key-1234", "k9k9k9k9", "s3cr3t",
                      "203.0.113.9"]:
        assert v not in dumped, v
    assert out_headers["Content-Type"] == "application/json" and out_body["metadata"]["n"] == 42
    assert out_body["metadata"]["card_as_number"] == "[card]" and out_body["metadata"]["big"] == 123456789
    assert out_headers["Authorization"] == "[authorization]" and out_headers["Cookie"] == "[cookie]"
    assert body["metadata"]["api_key"] == "plain-secret-value"  # the input is left as it was
    r = s.report()
    assert r["authorization"] == 1 and r["api_key"] == 2 + len(CASES["api_key"]) and r["cookie"] == 1
    assert r["secret"] == 1 and r["ipv4"] == len(CASES["ipv4"]) + 1 and r["card"] == len(CASES["card"]) + 2
    assert r["total"] == sum(v for k, v in r.items() if k != "total")
    assert all(isinstance(v, int) for v in r.values())  # counts only, never values


def test_ordinary_text_and_numbers_are_left_alone():
    text = ("dates 2023-11-16 18:17:03, order 12345678, price 3.14, version 1.2.3 and 1.2.3.4.5, time 12:30:45, "
            "std::vector, not a card 4111111111111112, not an ID 110105194912310021, mac 00:1A:2B:3C:4D:5E, "
            "year 2024, zip 94103, a@b")
    s = Scrubber()
    assert s.text(text) == text and s.report() == {"total": 0}


def test_cjk_text_around_values():
    s = Scrubber()
    out = s.text("手机13800138000，邮箱bob@example.com，身份证11010519491231002X")
    assert out == "手机[phone]，邮箱[email]，身份证[id_card]"


def test_kinds_can_be_chosen():
    s = Scrubber(kinds=["email"])
    assert s.text("bob@example.com 8.8.8.8") == "[email] 8.8.8.8"
    with pytest.raises(ValueError, match="unknown scrub kinds"):
        Scrubber(kinds=["passport"])


def test_subclasses_of_json_types_are_walked_as_the_types_json_makes():
    """value() takes json.loads's exact types by type() first; a str, dict, list or int subclass (an OrderedDict, a
    str enum) must come out the same by the isinstance path."""
    from collections import OrderedDict

    class S(str):
        pass

    class I(int):
        pass

    phone, card = "+44 20 7946 0958", 4111111111111111
    plain = {"api_key": "abc", "note": f"call {phone}", "n": [card, -999_999, 999_999, 1.5, True, None], "k": (1,)}
    odd = OrderedDict([(S("api_key"), S("abc")), ("note", S(f"call {phone}")),
                       ("n", [I(card), I(-999_999), I(999_999), 1.5, True, None]), ("k", (1,))])
    a, b = Scrubber(), Scrubber()
    assert a.value(plain) == b.value(odd) == {"api_key": "[secret]", "note": "call [phone]",
                                              "n": ["[card]", -999_999, 999_999, 1.5, True, None], "k": (1,)}
    assert a.report() == b.report() == {"secret": 1, "phone": 1, "card": 1, "total": 3}
