"""One root error and a few meaningful subclasses; messages say what, which value, what to do."""

from __future__ import annotations

import errno
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.metadata import Distribution


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


class ServingUnavailableError(BackendError):
    """A backend's own inference server cannot serve: it could not listen or start, or a
    saved step could not be loaded into it. Rollouts cannot sample the policy, so training
    that needs them stops here."""


class TooManyExceptionsError(ArthexError):
    """More rollouts failed while gathering than `max_exceptions` allows."""


class MissingExtraError(ArthexError, ImportError):
    """An optional dependency is not installed; the message names the extra to install, with
    the command that installs it the way arthex itself was installed (`install_command`)."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"{package} is not installed; install it with: {install_command(extra)}")
        self.package = package
        self.extra = extra


def require_extra(extra: str, *packages: str) -> None:
    """MissingExtraError naming `extra` for the first of `packages` that is not installed:
    checked where a command or backend starts, before the first of them is imported deep
    inside it (and before anything is written)."""
    import importlib.util

    for package in packages:
        if importlib.util.find_spec(package) is None:
            raise MissingExtraError(package, extra)


class NotInArthexError(ArthexError, ImportError):
    """An ART module or name (under `arthex.art`) that arthex does not implement; the one-line
    message says what to use instead. An `ImportError`, so `from arthex.art.x import name`
    shows that line rather than a bare "cannot import name"."""


def install_command(extra: str, distribution: Distribution | None = None) -> str:
    """The pip command that adds `extra` to this arthex, as it was installed (PEP 610's
    direct_url.json): `pip install -e "DIR[extra]"` for an editable checkout, `pip install
    "DIR[extra]"` for a checkout or file installed as is, `pip install "arthex[extra] @
    git+URL@COMMIT"` from version control, and `pip install "arthex[extra]"` from an index."""
    import json
    from importlib import metadata
    from urllib.parse import unquote, urlsplit

    plain = f'pip install "arthex[{extra}]"'
    if distribution is None:
        try:
            distribution = metadata.distribution("arthex")
        except metadata.PackageNotFoundError:
            return plain
    try:
        origin = json.loads(distribution.read_text("direct_url.json") or "null")
        url = origin["url"]
    except (ValueError, TypeError, KeyError):
        return plain
    if not isinstance(url, str) or not isinstance(origin, dict):
        return plain
    vcs = origin.get("vcs_info")
    if isinstance(vcs, dict) and isinstance(vcs.get("vcs"), str):
        commit = vcs.get("requested_revision") or vcs.get("commit_id")
        at = f"@{commit}" if isinstance(commit, str) else ""
        return f'pip install "arthex[{extra}] @ {vcs["vcs"]}+{url}{at}"'
    parsed = urlsplit(url)
    if parsed.scheme != "file":
        return f'pip install "arthex[{extra}] @ {url}"'
    where = unquote(parsed.path)
    editable = isinstance(origin.get("dir_info"), dict) and origin["dir_info"].get("editable")
    return f'pip install {"-e " if editable else ""}"{where}[{extra}]"'


class RunBusyError(ArthexError, RuntimeError):
    """Another trainer holds the run's lease; the message names the holder (pid, host, since).

    Raised before anything is written. Loggers never need the lease; a lease whose holder is
    dead is taken over instead."""


class DiskFullError(ArthexError, OSError):
    """A write found no space left on its disk (ENOSPC, or a quota: EDQUOT). The one-line
    message names the path, the bytes the write needed and what to free; whatever the write
    had begun is removed, so no reader takes half a file for a whole one. Still an OSError
    (errno ENOSPC), so code that handles a failing disk handles this one too."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.errno = errno.ENOSPC  # str() stays the message: no strerror is set


class StoreUnavailableError(ArthexError, OSError):
    """An object store kept failing (5xx, SlowDown, resets, no answer) for longer than the
    store's retry budget. The one-line message names the operation, the bucket/key and the
    budget; the call can be made again once the store answers."""
