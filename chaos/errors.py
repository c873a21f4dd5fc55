"""The toolkit's errors: one base, a few kinds named by what the user must do, and the one table that gives each
kind its exit code.

    ChaosError              a message, and an optional hint (what to do)
    ├── InputError     2    fix the experiment, target or suite file, or the command's arguments
    ├── SetupError     2    fix what the work needs: a target that would not start or answer, a missing tool, a
    │                       port or a lock another holds
    ├── Interrupted  130    nothing to fix: a signal stopped the work, and what it had started was rolled back
    ├── ServiceError   -    answered to a client by the toolkit's own servers and proxies (an HTTP status, an
    │                       error body, a cut stream); it never ends a command
    └── Finding        -    what the target under test did (a request timed out, a /metrics that is not
                            Prometheus, a run that did not pass), recorded where the results go; it never ends a
                            command either

Every error class of the toolkit derives from one of the five kinds. A class that was a ValueError or a
RuntimeError before the tree stays one too (class SpecError(InputError, ValueError)), so that every `except
ValueError` written before still catches what it caught.

Exit codes 1, 3 and 4 are verdicts (verification failed, aborted, not judged), not errors: no class has them.

Every package may import this module, the bundled server (chaos.reference) and chaos.http1 included: it imports
nothing of the toolkit, so the server still lifts out with chaos.common, chaos.http1 and this file. The table is
documented in docs/experiments.md ("Errors and their exit codes"), which a test holds to it.
"""

from __future__ import annotations

import contextlib
import functools
import sys


class ChaosError(Exception):
    """The base of every error of the toolkit. message: what went wrong; hint: what to do about it, when the
    message does not already say it."""

    def __init__(self, message: str = "", *, hint: str | None = None):
        # No message, no args: an error raised bare reads (and pickles) as it did before the tree.
        super().__init__(*((message,) if message else ()))
        self.message, self.hint = message, hint

    def lines(self) -> list[str]:
        """The message as the lines the command line prints, each after 'error: '."""
        return [self.message]


class InputError(ChaosError):
    """A file or an argument the toolkit cannot take: fix it (the message names it, and where)."""


class SetupError(ChaosError):
    """What the work needs is not there: a target that would not start or answer, a missing tool, a port or a
    lock another holds. Fix that (or wait for it), then run again."""


class Interrupted(ChaosError):
    """A signal (Ctrl-C, SIGTERM) stopped the work; what it had started was rolled back."""


class ServiceError(ChaosError):
    """Raised inside the toolkit's servers and proxies and turned there into what their client sees: an HTTP
    status with an error body, or a stream cut short. It never reaches the command line."""


class Finding(ChaosError):
    """Something the target under test did (a request that timed out, a /metrics that is not Prometheus, a run
    that did not pass): recorded where the results go, as a finding, not a failure of the toolkit."""


# The one table of exit codes for errors. A class not under a key here (a ServiceError, a Finding) has no code:
# one that reaches the command line is a bug of ours, and keeps its traceback.
EXIT_CODES: dict[type[ChaosError], int] = {InputError: 2, SetupError: 2, Interrupted: 130}


def exit_code(error: BaseException | type) -> int | None:
    """The exit code of an error (or an error class) from EXIT_CODES, by its nearest kind; None when it has none."""
    cls = error if isinstance(error, type) else type(error)
    return next((EXIT_CODES[c] for c in cls.__mro__ if c in EXIT_CODES), None)


def render(error: ChaosError, prefix: str = "error") -> str:
    """What the command line prints for an error: each line of it after PREFIX, then its hint."""
    text = "\n".join(f"{prefix}: {line}" for line in error.lines())
    return text + (f"\nhint: {error.hint}" if error.hint else "")


def report(error: ChaosError, stream=None, prefix: str = "error") -> int:
    """Print an error as the command line does (on stderr unless stream is given) and return its exit code. An
    error without one is raised again: it is a bug, and its traceback is what to see."""
    code = exit_code(error)
    if code is None:
        raise error
    print(render(error, prefix), file=stream or sys.stderr, flush=True)
    return code


def handled(func=None, *, stream: str = "stderr", prefix: str = "error"):
    """A command's function whose ChaosErrors end it as EXIT_CODES says: printed (report), and their code returned.
    stream names sys's stream at the time of the call (`chaos selftest hostile` says everything on stdout), so
    that a test's redirect of it is seen."""
    def wrap(f):
        @functools.wraps(f)
        def command(*args, **kwargs):
            try:
                return f(*args, **kwargs)
            except ChaosError as e:
                if exit_code(e) is None:
                    raise
                return report(e, getattr(sys, stream), prefix)
        return command
    return wrap if func is None else wrap(func)


@contextlib.contextmanager
def counts_as(kind: type[ChaosError], *types: type[BaseException]):
    """Within: an exception of these types (a ValueError of a parser, an OSError of a file the user named) is an
    error of this kind, with its own text as the message. An error that already has a kind with an exit code
    keeps it (an SLOError is a ValueError and an InputError); a ServiceError that is also a RuntimeError, say,
    counts as the kind given, as the RuntimeError it also is did before."""
    try:
        yield
    except types as e:
        if isinstance(e, ChaosError) and exit_code(e) is not None:
            raise
        raise kind(str(e)) from e
