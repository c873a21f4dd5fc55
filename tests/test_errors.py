"""chaos/errors.py: one base error, a few kinds by what the user must do, and one table of exit codes."""

from __future__ import annotations

import contextlib
import io

import pytest

from chaos.errors import (EXIT_CODES, ChaosError, Finding, InputError, Interrupted, ServiceError, SetupError,
                          counts_as, exit_code, handled, render, report)

KINDS = (InputError, SetupError, Interrupted, ServiceError, Finding)


def test_the_kinds_derive_from_the_base_and_the_table_gives_the_documented_codes():
    assert all(issubclass(k, ChaosError) for k in KINDS)
    # chaos run's documented codes (docs/experiments.md): 2 invalid input or setup failure, 130 interrupted
    assert EXIT_CODES == {InputError: 2, SetupError: 2, Interrupted: 130}
    assert exit_code(ServiceError("x")) is None and exit_code(Finding) is None and exit_code(ValueError()) is None

    class Deep(InputError, ValueError):
        pass

    assert exit_code(Deep("x")) == 2 and exit_code(Deep) == 2  # the nearest kind, an instance or a class


def test_a_message_with_a_hint_prints_both():
    e = SetupError("no Toxiproxy API at http://127.0.0.1:8474", hint="start toxiproxy-server, or drop toxiproxy.url")
    assert str(e) == e.message == "no Toxiproxy API at http://127.0.0.1:8474"  # the hint is not in the message
    assert render(e) == "error: no Toxiproxy API at http://127.0.0.1:8474\n" \
                        "hint: start toxiproxy-server, or drop toxiproxy.url"
    assert render(InputError("bad --var")) == "error: bad --var"
    err = io.StringIO()
    assert report(e, err) == 2
    assert err.getvalue() == render(e) + "\n"


def test_a_bare_error_reads_as_before():
    assert Interrupted().args == () and str(Interrupted()) == "" and repr(Interrupted()) == "Interrupted()"
    assert InputError("x").args == ("x",) and InputError("x").hint is None


def test_handled_prints_and_returns_the_tables_code_and_keeps_a_codeless_errors_traceback():
    @handled
    def command(error):
        raise error

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert command(InputError("bad file")) == 2
        assert command(Interrupted("stopped")) == 130
    assert err.getvalue() == "error: bad file\nerror: stopped\n"
    with pytest.raises(ServiceError):
        command(ServiceError("a 503 for a client"))  # never an exit code: a bug, with its traceback
    with pytest.raises(ValueError):
        command(ValueError("not ours"))

    @handled(stream="stdout", prefix="chaos proxy llm")
    def on_stdout():
        raise SetupError("cannot listen")

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert on_stdout() == 2
    assert out.getvalue() == "chaos proxy llm: cannot listen\n"


def test_counts_as_gives_a_builtin_error_a_kind_and_keeps_a_kind_that_has_a_code():
    with pytest.raises(InputError) as e:
        with counts_as(InputError, ValueError):
            raise ValueError("--hold '0s': hold each level at least 1 s")
    assert str(e.value) == "--hold '0s': hold each level at least 1 s" and isinstance(e.value.__cause__, ValueError)

    class Rule(InputError, ValueError):
        pass

    class Dead(ServiceError, RuntimeError):
        pass

    with pytest.raises(Rule):
        with counts_as(SetupError, ValueError):
            raise Rule("a rule")  # an InputError already: it stays one
    with pytest.raises(SetupError):
        with counts_as(SetupError, RuntimeError):
            raise Dead("the engine has stopped")  # no code of its own: the RuntimeError it is counts
    with pytest.raises(KeyError):
        with counts_as(InputError, ValueError):
            raise KeyError("not listed")
