"""What client and server agree on: paths, event names, the error body, metric encoding.

Both ends import this module and nothing heavier, so the wire format has one definition. It
is the hosted serverless training API's, as ART 0.5.23's `ServerlessBackend` client speaks
it: a base URL ending in `/v1`, the `/preview/...` paths below it, models named for
inference `wandb-artifact:///{entity}/{project}/{name}[:step{N}]` at the same base URL, and
training events whose `data` is flat (a gradient step's metrics are its data).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

API_PREFIX = "/v1"  # a base URL ends here; the paths below are under it
DEFAULT_BASE_URL = "https://api.training.wandb.ai/v1"  # the hosted service ART's client uses
MODELS_PATH = "/preview/models"
JOBS_PATH = "/preview/training-jobs"
SFT_JOBS_PATH = "/preview/sft-training-jobs"  # its jobs' events are read under JOBS_PATH
BACKEND_PATH = "/preview/backend"

TRAINING_STARTED = "training_started"
GRADIENT_STEP = "gradient_step"
TRAINING_ENDED = "training_ended"
TRAINING_FAILED = "training_failed"
TERMINAL_EVENTS = frozenset({TRAINING_ENDED, TRAINING_FAILED})

# Error `type`s in the body; the client maps statuses, and these where a status is shared.
AUTHENTICATION_ERROR = "authentication_error"
NOT_FOUND = "not_found"
INVALID_REQUEST = "invalid_request"
MODEL_BUSY = "model_busy"  # a job of this model is running
RUN_BUSY = "run_busy"  # another client holds the model's trainer lease
REQUEST_TOO_LARGE = "request_too_large"
HEADERS_TOO_LARGE = "request_headers_too_large"
RATE_LIMITED = "rate_limit_exceeded"  # refused before acting: safe to retry, even a POST
QUOTA_EXCEEDED = "insufficient_quota"
STORAGE_EXCEEDED = "insufficient_storage"
UNSUPPORTED_CAPABILITY = "unsupported_capability"
INTERNAL_ERROR = "internal_error"

# Server-made identifiers; a path segment that does not match is a 404 before any lookup.
MODEL_ID = re.compile(r"m[0-9a-f]{24}")
JOB_ID = re.compile(r"j[0-9a-f]{24}")
# Numbers in URLs and headers are ASCII digits: str.isdigit() also says yes to '١٢' and '²',
# and int() refuses the second.
COUNT = re.compile(r"[0-9]{1,18}")


def api_base(url: str) -> str:
    """A server's base URL as clients use it: ending in `/v1` (added to a bare root)."""
    url = url.rstrip("/")
    return url if url.endswith(API_PREFIX) else url + API_PREFIX


def checkpoint_id(model_id: str, step: int) -> str:
    """A checkpoint's id, the cursor of a checkpoint page."""
    return f"{model_id}-step{step}"


def parse_count(text: str) -> int | None:
    """A non-negative integer written in ASCII digits, else None."""
    return int(text) if COUNT.fullmatch(text) is not None else None


def error_body(status: int, message: str, kind: str, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape, so OpenAI clients of the proxy read our errors too."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def error_message(payload: object) -> tuple[str, str, str | None]:
    """(message, type, param) of an error body; tolerant of bodies that are not ours."""
    if isinstance(payload, Mapping):
        error = payload.get("error", payload)
        if isinstance(error, Mapping):
            message = error.get("message") or error.get("detail")
            kind = error.get("type")
            param = error.get("param")
            return (
                str(message) if message is not None else "",
                str(kind) if kind is not None else "",
                str(param) if param is not None else None,
            )
        if isinstance(error, str):
            return error, "", None
    return "", "", None


def encode_metrics(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """JSON has no NaN or infinity: non-finite values travel as null."""
    encoded: dict[str, float | None] = {}
    for key, value in metrics.items():
        number = float(value)
        encoded[str(key)] = number if math.isfinite(number) else None
    return encoded


def decode_metrics(payload: object) -> dict[str, float]:
    """The inverse of `encode_metrics`; null comes back as NaN, so every value is a float."""
    if not isinstance(payload, Mapping):
        return {}
    return {
        str(key): float("nan") if value is None else float(value)
        for key, value in payload.items()
        if value is None or (isinstance(value, int | float) and not isinstance(value, bool))
    }


# The train options a job's `experimental_config` carries by name (every one of them, null for
# "not set", as ART's client sends them); any other key is a TrainConfig field of arthex's,
# where null is a value.
TRAIN_OPTIONS = frozenset(
    {
        "advantage_balance", "allow_training_without_logprobs", "epsilon", "epsilon_high",
        "importance_sampling_level", "kimi_k2_tau", "kl_penalty_coef",
        "kl_penalty_reference_step", "kl_penalty_source", "kl_penalty_step_lag",
        "kl_ref_adapter_path", "learning_rate", "logprob_calculation_chunk_size", "loss_fn",
        "mask_prob_ratio", "max_negative_advantage_importance_sampling_weight",
        "normalize_advantages", "num_trajectories_learning_rate_multiplier_power",
        "packed_sequence_length", "plot_tensors", "ppo", "precalculate_logprobs",
        "scale_learning_rate_by_reward_std_dev", "scale_rewards", "truncated_importance_sampling",
    }
)  # fmt: skip

# Inference names: the hosted service serves a model's latest step as
# `wandb-artifact:///{entity}/{project}/{name}` and one step with `:step{N}` appended.
ARTIFACT_SCHEME = "wandb-artifact:///"
_ARTIFACT = re.compile(r"wandb-artifact:///([^/]+)/([^/]+)/([^/:]+)(?::step([0-9]{1,18}))?")


def artifact_name(entity: str, project: str, name: str, step: int | None = None) -> str:
    base = f"{ARTIFACT_SCHEME}{entity}/{project}/{name}"
    return base if step is None else f"{base}:step{step}"


def parse_artifact_name(text: str) -> tuple[str, str, str, int | None] | None:
    """(entity, project, name, step or None) of an inference name in the service's form."""
    found = _ARTIFACT.fullmatch(text)
    if found is None:
        return None
    entity, project, name, step = found.groups()
    return entity, project, name, int(step) if step is not None else None


_NON_FINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}


def encode_event_metrics(metrics: Mapping[str, Any]) -> dict[str, float | str]:
    """A gradient step's event data: its metrics, flat. JSON has no NaN or infinity, so
    those travel as the strings "NaN", "Infinity", "-Infinity", which `float()` reads back
    (what ART's client does with each value)."""
    encoded: dict[str, float | str] = {}
    for key, value in metrics.items():
        number = float(value)
        encoded[str(key)] = number if math.isfinite(number) else _NON_FINITE[repr(number)]
    return encoded


def decode_event_metrics(payload: object) -> dict[str, float]:
    """The inverse of `encode_event_metrics`; values that are not numbers are left out."""
    if not isinstance(payload, Mapping):
        return {}
    decoded: dict[str, float] = {}
    for key, value in payload.items():
        if isinstance(value, bool):
            continue
        if isinstance(value, int | float) or value in _NON_FINITE.values():
            decoded[str(key)] = float(value)
    return decoded


def now_iso() -> str:
    return datetime.now(UTC).isoformat()
