"""ART's train result classes, `Verbosity`, `SFTMetricLoggingConfig` and
`LocalServingUnavailableError` under arthex, checked against ART 0.5.23's definitions as
written in its art/types.py and art/errors.py (fields, defaults, what compares), and on
arthex's own objects: a backend without more to say returns the plain TrainResult, and the
inference server that cannot listen raises the serving error."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any, cast, get_args

import attrs
import pytest

import arthex
import arthex.art as art
from arthex.adapters.inference.engine import SamplingEngine
from arthex.adapters.inference.http_server import InferenceServer
from arthex.adapters.serverless import ServerlessBackend
from arthex.art import errors, types
from arthex.core.errors import BackendError, NotInArthexError
from arthex.core.identity import RunRef
from arthex.testing.builders import make_group
from arthex.testing.fakes.backend import InMemoryBackend


def test_the_result_classes_have_arts_fields_and_defaults() -> None:
    local = types.LocalTrainResult(3, {"loss/train": 0.5})
    assert (local.step, dict(local.metrics)) == (3, {"loss/train": 0.5})
    assert (local.checkpoint_path, local.checkpoint_ready) == (None, None)
    assert [f.name for f in attrs.fields(types.LocalTrainResult)] == [
        "step", "metrics", "checkpoint_path", "checkpoint_ready",
    ]  # fmt: skip
    served = types.ServerlessTrainResult(5, {}, artifact_name="me/proj/agent:step5")
    assert [f.name for f in attrs.fields(types.ServerlessTrainResult)][2:] == ["artifact_name"]
    assert served.artifact_name == "me/proj/agent:step5"
    for result in (local, served):
        assert isinstance(result, arthex.TrainResult) and isinstance(result, types.TrainResult)
    assert art.LocalTrainResult is types.LocalTrainResult
    assert art.ServerlessTrainResult is types.ServerlessTrainResult


def test_the_readiness_signal_is_left_out_of_equality_and_repr_as_in_art() -> None:
    async def ready() -> None:
        return None

    signal = ready()
    try:
        waiting = types.LocalTrainResult(1, {}, "/runs/c/0001", checkpoint_ready=signal)
        assert waiting == types.LocalTrainResult(1, {}, "/runs/c/0001")
        assert "checkpoint_ready" not in repr(waiting) and "/runs/c/0001" in repr(waiting)
    finally:
        signal.close()


def test_a_backend_with_nothing_more_to_say_returns_the_plain_result(tmp_path: Path) -> None:
    async def main() -> object:
        backend = InMemoryBackend()
        model = arthex.TrainableModel(
            name="agent", project="p", base_model="any", base_path=str(tmp_path),
            report_metrics=[],
        )  # fmt: skip
        await model.register(backend)
        try:
            return await backend.train(model, [make_group((0.0, 1.0))])
        finally:
            await backend.close()

    result = asyncio.run(main())
    assert type(result) is arthex.TrainResult


def test_the_serverless_result_has_no_artifact_name_before_the_server_named_the_owner() -> None:
    backend = ServerlessBackend("http://127.0.0.1:9/v1", api_key="ak-test")
    run = RunRef(project="proj", name="agent")
    result = backend.train_result(run, arthex.TrainResult(step=2, metrics={"loss": 1.0}))
    assert type(result) is types.ServerlessTrainResult
    assert (result.step, dict(result.metrics), result.artifact_name) == (2, {"loss": 1.0}, None)


def test_verbosity_and_the_sft_metric_logging_shape_are_arts() -> None:
    assert get_args(types.Verbosity) == (0, 1, 2)
    shape = types.SFTMetricLoggingConfig
    assert shape.__annotations__.keys() == {"enabled", "target_training_step"}
    assert shape.__total__ is False and shape.__required_keys__ == frozenset()
    config: Any = shape(enabled=True, target_training_step=4)
    assert config == {"enabled": True, "target_training_step": 4}


def test_local_serving_unavailable_is_raised_when_the_inference_server_cannot_listen() -> None:
    unavailable = errors.LocalServingUnavailableError
    assert unavailable is art.LocalServingUnavailableError
    assert issubclass(unavailable, BackendError) and issubclass(unavailable, RuntimeError)
    engine = cast(SamplingEngine, object())  # the server fails to bind before it serves
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = InferenceServer(engine, api_key="k", port=port)
        with pytest.raises(unavailable, match=f"cannot listen on 127.0.0.1:{port}"):
            asyncio.run(server.start())


def test_the_vllm_metrics_timeout_stays_refused_saying_why() -> None:
    refused = "ArtVllmMetricsTimeoutError"
    with pytest.raises(NotInArthexError, match="does not scrape vLLM's metrics endpoint"):
        getattr(errors, refused)
