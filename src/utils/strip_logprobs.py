"""ART's small helpers with no arthex name of their own: `strip_logprobs`."""

from __future__ import annotations

import copy
import logging
from typing import Any

logger = logging.getLogger("arthex.art")

__all__ = ["strip_logprobs"]


def strip_logprobs(value: Any) -> Any:
    """A copy of `value` without logprobs, to keep stored data small: every `logprobs` key of
    a dict dropped, every `logprobs` attribute of an object set to None, through lists,
    tuples, dicts and objects' attributes. `value` itself is untouched; one that cannot be
    copied is returned as it is (with a warning), as ART does."""
    try:
        copied = copy.deepcopy(value)
    except Exception as error:  # whatever deepcopy raises: ART's contract is not to fail
        logger.warning(
            "strip_logprobs could not copy %s (%s); returned unchanged", type(value).__name__, error
        )
        return value
    return _strip(copied)


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _strip(item) for key, item in value.items() if key != "logprobs"}
    if isinstance(value, tuple):
        return tuple(_strip(item) for item in value)
    if isinstance(value, list):
        return [_strip(item) for item in value]
    attributes = getattr(value, "__dict__", None)
    if attributes is None:
        return value
    # The copy is ours, so its attributes are rewritten in place (a pydantic model keeps its
    # type, and a Choice keeps being a Choice with `logprobs=None`).
    for key, item in list(attributes.items()):
        setattr(value, key, None if key == "logprobs" else _strip(item))
    return value
