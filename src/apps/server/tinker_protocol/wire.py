"""The tinker emulator's wire formats: JSON bodies in, protobuf bodies in and out.

`forward_backward` arrives as a `ForwardBackwardRequest` protobuf (zstd-compressed when the
server asks for it), and the results of `forward_backward` and `asample` must go back as
`ForwardBackwardOutput` / `SampleResponse` protobufs: the SDK refuses JSON for those two. The
schema is the one the pinned SDK ships (`tinker/proto/tinker_public_pb2.py`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs

from .errors import HttpError

if TYPE_CHECKING:  # torch-heavy modules, imported where used so this one stays light
    from .compute import AdamSettings
    from .losses import DatumIn
    from .sampling import SampledRow, SampleSettings

PROTO = "application/x-protobuf"


@attrs.frozen
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"

    @classmethod
    def json(cls, payload: Mapping[str, Any], status: int = 200) -> Reply:
        return cls(status, json.dumps(dict(payload)).encode())


def failure(message: str, category: str) -> Reply:
    """A failed promise: the SDK raises `RequestFailedError(category=...)` for it."""
    return Reply.json({"error": message, "category": category})


def json_body(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise HttpError(400, f"the body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise HttpError(400, "the body must be a JSON object")
    return data


def check_adam_config(config: object) -> None:
    if config is None:
        return
    if not isinstance(config, dict) or config.get("type", "adamw") != "adamw":
        raise HttpError(400, f"the tinker emulator runs AdamW only, got optimizer {config!r}")


def adam_settings(body: Mapping[str, Any]) -> AdamSettings:
    """`OptimStepRequest` sends AdamParams as `adam_params` (other families as
    `optimizer_params`, which the emulator does not run)."""
    from .compute import AdamSettings

    params = body.get("adam_params") or body.get("optim_params")
    if not isinstance(params, dict) or params.get("type", "adamw") not in ("adamw", "adam"):
        raise HttpError(400, "the tinker emulator runs AdamW only; pass AdamParams")
    try:
        return AdamSettings(**{k: float(v) for k, v in params.items() if k != "type"})
    except (TypeError, ValueError) as exc:
        raise HttpError(400, f"bad adam_params: {exc}") from exc


# --- forward_backward -------------------------------------------------------------------


@attrs.frozen
class ForwardBackward:
    model_id: str
    seq_id: int
    loss_fn: str
    config: dict[str, float]
    forward_only: bool
    data: list[DatumIn]


def decode_forward_backward(body: bytes, headers: Mapping[str, str]) -> ForwardBackward:
    import numpy as np
    import torch
    from tinker.proto import tinker_public_pb2 as pb

    from .losses import DatumIn

    if headers.get("content-encoding", "").lower() == "zstd":
        import zstandard

        body = zstandard.ZstdDecompressor().decompress(body)
    request = pb.ForwardBackwardRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:
        raise HttpError(400, f"the body is not a ForwardBackwardRequest: {exc}") from exc
    config = {k: float(v) for k, v in request.loss_fn_config.items()}
    for key, value in request.loss_fn_config_v2.items():  # v2 wins where both are set
        if value.WhichOneof("value") == "number":
            config[key] = float(value.number)
    data = []
    for index, datum in enumerate(request.data):
        tokens: list[int] = []
        for chunk in datum.model_input:
            if chunk.WhichOneof("chunk") != "encoded_text":
                raise HttpError(400, f"datum {index}: only encoded_text chunks are supported")
            tokens.extend(int(t) for t in np.frombuffer(chunk.encoded_text.tokens, np.int32))
        inputs = {
            name: torch.from_numpy(_tensor(name, index, tensor))
            for name, tensor in datum.loss_fn_inputs.items()
        }
        data.append(DatumIn(tokens=tokens, inputs=inputs))
    return ForwardBackward(
        model_id=request.model_id,
        seq_id=int(request.seq_id),
        loss_fn=request.loss_fn,
        config=config,
        forward_only=bool(request.forward_only),
        data=data,
    )


def _tensor(name: str, index: int, message: Any) -> Any:
    import numpy as np
    from tinker.proto import tinker_public_pb2 as pb

    dtypes = {pb.DTYPE_FLOAT32: np.float32, pb.DTYPE_INT64: np.int64}
    if message.dtype not in dtypes:
        raise HttpError(400, f"datum {index}: loss_fn_inputs[{name!r}] has an unsupported dtype")
    if message.WhichOneof("encoding") != "dense":
        raise HttpError(400, f"datum {index}: loss_fn_inputs[{name!r}] must be dense")
    array = np.frombuffer(message.dense, dtype=dtypes[message.dtype]).copy()
    shape = list(message.shape)
    if shape:
        try:
            array = array.reshape(shape)
        except ValueError as exc:
            raise HttpError(400, f"datum {index}: loss_fn_inputs[{name!r}]: {exc}") from exc
    return array


def encode_forward_backward(outputs: Sequence[Any], loss_sum: float) -> Reply:
    """One `ArrayRecord` whose `logprobs` field batches every datum's target logprobs
    (float32 bytes, int64 byte offsets); `loss:sum` uses the `name:reduction` key form the SDK
    merges chunked results by."""
    import numpy as np
    from tinker.proto import tinker_public_pb2 as pb

    reply = pb.ForwardBackwardOutput()
    reply.loss_fn_output_type = "ArrayRecord"
    record = reply.loss_fn_outputs.add()
    record.num_datums = len(outputs)
    arrays = [np.asarray(o, dtype=np.float32) for o in outputs]
    field = record.fields["logprobs"]
    field.data = b"".join(a.tobytes() for a in arrays)
    field.offsets = np.cumsum([0, *(a.nbytes for a in arrays)]).astype(np.int64).tobytes()
    field.dtype = pb.DTYPE_FLOAT32
    reply.metrics["loss:sum"] = loss_sum
    return Reply(200, reply.SerializeToString(), PROTO)


# --- sampling ---------------------------------------------------------------------------


def prompt_tokens(prompt: object) -> list[int]:
    chunks = prompt.get("chunks") if isinstance(prompt, dict) else None
    if not isinstance(chunks, list):
        raise HttpError(400, "prompt must be a ModelInput with chunks")
    tokens: list[int] = []
    for chunk in chunks:
        if not isinstance(chunk, dict) or chunk.get("type", "encoded_text") != "encoded_text":
            raise HttpError(400, "the tinker emulator samples encoded_text chunks only")
        tokens.extend(int(t) for t in chunk.get("tokens", []))
    return tokens


def sample_settings(params: Mapping[str, Any]) -> SampleSettings:
    """Stop strings and stop tokens come on top of the model's end token; `stop=[]` turns
    every stop off, the end token included, as the SDK documents."""
    from .sampling import SampleSettings

    stop = params.get("stop")
    strings: tuple[str, ...] = ()
    tokens: tuple[int, ...] = ()
    if isinstance(stop, str):
        strings = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        strings = tuple(stop)
    elif isinstance(stop, list) and all(isinstance(s, int) for s in stop):
        tokens = tuple(stop)
    elif stop is not None:
        raise HttpError(400, f"stop must be a string, a list of strings or of ints, got {stop!r}")
    return SampleSettings(
        max_tokens=params.get("max_tokens"),
        seed=params.get("seed"),
        temperature=float(params.get("temperature", 1.0)),
        top_k=int(params.get("top_k", -1)),
        top_p=float(params.get("top_p", 1.0)),
        stop_strings=strings,
        stop_tokens=tokens,
        stop_at_end_token=stop != [],
    )


def encode_sample(
    rows: Sequence[SampledRow],
    prompt_logprobs: list[float] | None,
    *,
    topk: int,
    last_n: object,
) -> Reply:
    import numpy as np
    from tinker.proto import tinker_public_pb2 as pb

    reply = pb.SampleResponse()
    for row in rows:
        sequence = reply.sequences.add()
        stopped = row.stop_reason == "stop"
        sequence.stop_reason = pb.STOP_REASON_STOP if stopped else pb.STOP_REASON_LENGTH
        sequence.tokens = np.asarray(row.tokens, np.int32).tobytes()
        sequence.logprobs = np.asarray(row.logprobs, np.float32).tobytes()
        if row.topk is not None:
            top = sequence.topk_sampled_logprobs
            top.k, top.length = topk, len(row.tokens)
            top.token_ids = np.asarray([[t for t, _ in r] for r in row.topk], np.int32).tobytes()
            top.logprobs = np.asarray([[v for _, v in r] for r in row.topk], np.float32).tobytes()
    if prompt_logprobs is not None:
        if isinstance(last_n, int) and last_n > 0:  # only the last N are scored
            cut = max(len(prompt_logprobs) - last_n, 0)
            prompt_logprobs = [math.nan] * cut + prompt_logprobs[cut:]
        reply.prompt_logprobs = np.asarray(prompt_logprobs, np.float32).tobytes()
    return Reply(200, reply.SerializeToString(), PROTO)
