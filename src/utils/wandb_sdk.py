"""ART's thin doors into the wandb SDK (`art.utils.wandb_sdk`): each function imports the part
of wandb it calls when it is called, so importing this module costs nothing and a missing SDK
is an error naming `pip install "arthex[wandb]"` at the first call, not at import.

Each passes its arguments to the SDK unchanged: `api` builds `wandb.Api`, `artifact` a
`wandb.Artifact`, `init` starts a run (`wandb.init`), `login` is `wandb.login`, `settings`
builds `wandb.Settings`, and `comm_error_type` is the exception wandb raises when its server
cannot answer (`wandb.errors.CommError`). Type checkers see the SDK's own callables, so
their parameters and return types are checked; at run time each is a door that imports the
SDK on first call.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..core.errors import MissingExtraError

__all__ = ["api", "artifact", "comm_error_type", "init", "login", "settings"]


def _sdk(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingExtraError("wandb", "wandb") from error


if TYPE_CHECKING:  # type checkers and IDEs see the SDK's own names, parameters and types
    from wandb.apis.public import Api as api
    from wandb.sdk.artifacts.artifact import Artifact as artifact
    from wandb.sdk.wandb_init import init as init
    from wandb.sdk.wandb_login import login as login
    from wandb.sdk.wandb_settings import Settings as settings
else:

    def api(*args: Any, **kwargs: Any) -> Any:
        """`wandb.Api(...)`: W&B's public API (it checks the key with the server)."""
        return _sdk("wandb.apis.public").Api(*args, **kwargs)

    def artifact(*args: Any, **kwargs: Any) -> Any:
        """`wandb.Artifact(...)`: a new artifact to add files to and log."""
        return _sdk("wandb.sdk.artifacts.artifact").Artifact(*args, **kwargs)

    def init(*args: Any, **kwargs: Any) -> Any:
        """`wandb.init(...)`: start (or resume) a run."""
        return _sdk("wandb.sdk.wandb_init").init(*args, **kwargs)

    def login(*args: Any, **kwargs: Any) -> Any:
        """`wandb.login(...)`."""
        return _sdk("wandb.sdk.wandb_login").login(*args, **kwargs)

    def settings(*args: Any, **kwargs: Any) -> Any:
        """`wandb.Settings(...)`."""
        return _sdk("wandb.sdk.wandb_settings").Settings(*args, **kwargs)


def comm_error_type() -> type[Exception]:
    """`wandb.errors.CommError`, the error of a request W&B's server did not answer."""
    error: type[Exception] = _sdk("wandb.errors").CommError
    return error
