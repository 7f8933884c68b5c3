"""Placeholder: filled in below."""

from typing import Any


class OpenEnvEnvironment:
    pass


def from_openenv(*args: Any, **kwargs: Any) -> OpenEnvEnvironment:
    raise NotImplementedError
