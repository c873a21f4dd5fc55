"""The load's setup error, in a module of its own so that every part of the load can raise it without importing
the driver (which imports those parts)."""

from __future__ import annotations

from ..errors import SetupError


class LoadError(SetupError, RuntimeError):
    """A setup problem with a message that says what to do."""
