"""Where the memory plan gets a base model's shape when the model is not downloaded: the
plan needs only its `config.json`, never its weights.

In order: a `config.json` path given as the base model; the hub's `config.json` (a few KB,
fetched into memory, not into the Hugging Face cache, which would then look like a
download) when the hub can be reached and `HF_HUB_OFFLINE` is not set; the shapes shipped
with arthex for common models (known_shapes.py).
"""

from __future__ import annotations

import json
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from ...core.errors import InvalidInputError
from .known_shapes import known_shape
from .memory import ModelShape, read_shape

HUB_TIMEOUT_S = 5.0
DEFAULT_ENDPOINT = "https://huggingface.co"


def shape_without_weights(base_model: str) -> tuple[ModelShape, str]:
    """The shape of a base model that is not here, and where it came from (for the line
    that names the model). InvalidInputError naming each place looked in."""
    if base_model.endswith(".json") and os.path.isfile(base_model):
        return read_shape(Path(base_model)), f"planned from {base_model}"
    fetched, why_not = hub_config(base_model)
    if fetched is not None:
        return fetched, "planned from the hub's config.json"
    shipped = known_shape(base_model)
    if shipped is not None:
        return shipped, f"planned from the shape arthex ships for it ({why_not})"
    raise InvalidInputError(
        f"no shape for {base_model!r} to plan memory from: not a folder or config.json here, "
        f"not a model arthex knows, and its hub config.json {why_not}"
    )


def hub_config(repo: str) -> tuple[ModelShape | None, str]:
    """The shape from the hub's `config.json` of `repo`, or None and why not."""
    if _offline():
        return None, "HF_HUB_OFFLINE is set"
    endpoint = _endpoint().rstrip("/")
    url = f"{endpoint}/{repo}/resolve/main/config.json"
    request = urllib.request.Request(url)
    token = os.environ.get("HF_TOKEN")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=HUB_TIMEOUT_S) as response:
            body = response.read(1 << 20)
    except urllib.error.HTTPError as error:
        return None, f"was refused by {endpoint} (HTTP {error.code})"
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return None, f"could not be fetched from {endpoint} ({reason})"
    try:
        json.loads(body)
    except ValueError:
        return None, f"from {endpoint} is not JSON"
    # read_shape reads a file: it fills the fields the config leaves at their defaults
    with tempfile.TemporaryDirectory(prefix="arthex-doctor-") as folder:
        file = Path(folder) / "config.json"
        file.write_bytes(body)
        try:
            return read_shape(file), ""
        except InvalidInputError as error:
            return None, f"from {endpoint} does not describe a dense decoder ({error})"


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _endpoint() -> str:
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT
    return str(constants.ENDPOINT)
