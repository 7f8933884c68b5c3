"""One root error and a few meaningful subclasses; messages say what, which value, what to do."""

from __future__ import annotations


class ArthexError(Exception):
    """Root of every error arthex raises on purpose."""


class InvalidInputError(ArthexError, ValueError):
    """An argument was rejected before anything was written."""


class InvalidNameError(InvalidInputError):
    """A name that becomes a path segment is not a safe one."""


class NotRegisteredError(ArthexError, RuntimeError):
    """A model needs a backend for this call; `await model.register(backend)` first."""


class UnsupportedCapability(ArthexError, NotImplementedError):
    """The backend cannot do what was asked. It never silently does nothing instead."""

    def __init__(self, capability: str, backend: str, hint: str = "") -> None:
        self.capability = str(capability)  # a Capability's value, not the enum's repr
        self.backend = backend
        message = f"{backend} does not support {self.capability!r}"
        super().__init__(f"{message}. {hint}".strip() if hint else message)


class BaseModelChangedError(InvalidInputError):
    """A run that has trained was registered with another base model than the one it was
    trained from. Raised before anything in the run directory changes."""

    def __init__(self, run: object, recorded: str, given: str) -> None:
        super().__init__(
            f"run {run} was trained from base model {recorded!r}, not {given!r}: a trained run "
            f"keeps its base model; to train {given!r}, start a new run under another name "
            "(TrainableModel(..., run_name='<new name>'))"
        )
        self.recorded = recorded
        self.given = given


class CorruptDataError(ArthexError):
    """A file on disk cannot be read as what it claims to be."""


class BackendError(ArthexError, RuntimeError):
    """A training backend failed, or disagreed with the frontend about the state of a run."""


class TooManyExceptionsError(ArthexError):
    """More rollouts failed while gathering than `max_exceptions` allows."""


class MissingExtraError(ArthexError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(
            f'{package} is not installed; install it with: pip install "arthex[{extra}]"'
        )
        self.package = package
        self.extra = extra


class NotInArthexError(ArthexError, ImportError):
    """An ART module or name (under `arthex.art`) that arthex does not implement; the one-line
    message says what to use instead. An `ImportError`, so `from arthex.art.x import name`
    shows that line rather than a bare "cannot import name"."""


class RunBusyError(ArthexError, RuntimeError):
    """Another trainer holds the run's lease; the message names the holder (pid, host, since).

    Raised before anything is written. Loggers never need the lease; a lease whose holder is
    dead is taken over instead."""
