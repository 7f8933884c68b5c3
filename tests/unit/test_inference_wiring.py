"""What the inference package promises without running a model: lazy imports, engine
choice, the vLLM engine's wiring, and the OpenAI wire shapes."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from arthex.adapters.inference import SamplingParams, make_engine
from arthex.adapters.inference.chat_wire import (
    LOGPROB_FLOOR,
    build_response,
    parse_request,
    parse_tool_calls,
)
from arthex.adapters.inference.engine import Sample, UnknownModelError
from arthex.adapters.inference.select import pick_engine_kind
from arthex.adapters.inference.vllm_args import VllmSettings
from arthex.adapters.inference.vllm_engine import VllmEngine, to_sample
from arthex.core.errors import BackendError, InvalidInputError, MissingExtraError

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_importing_the_package_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, arthex.adapters.inference as m; "
        "m.SamplingParams(); "
        "heavy = [n for n in ('torch', 'transformers', 'fastapi', 'uvicorn', 'vllm') "
        "if n in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_engine_choice_is_explicit_or_automatic() -> None:
    assert pick_engine_kind("torch") == "torch"
    assert pick_engine_kind("vllm") == "vllm"
    with pytest.raises(InvalidInputError, match="engine kind"):
        pick_engine_kind("tpu")  # type: ignore[arg-type]
    if not HAS_VLLM:
        assert pick_engine_kind("auto") == "torch"
    engine = make_engine("some/model", "torch", max_batch_size=4)
    assert type(engine).__name__ == "TorchEngine"
    assert not isinstance(engine, VllmEngine) and engine.max_batch_size == 4
    vllm_engine = make_engine("some/model", "vllm", settings=VllmSettings(max_loras=2))
    assert isinstance(vllm_engine, VllmEngine)
    assert vllm_engine.engine_kwargs()["max_loras"] == 2


@pytest.mark.skipif(HAS_VLLM, reason="checks the message shown when vllm is missing")
def test_vllm_engine_without_vllm_names_the_extra() -> None:
    engine = VllmEngine("some/model", VllmSettings(gpu_memory_utilization=0.3, enforce_eager=True))
    assert engine.engine_kwargs()["enforce_eager"] is True
    assert engine.served_models() == []
    with pytest.raises(MissingExtraError, match=r'pip install (-e )?"[^"]*\[vllm\]"'):
        engine.engine_args()
    with pytest.raises(MissingExtraError) as raised:
        asyncio.run(engine.load("agent@0", None))
    assert (raised.value.package, raised.value.extra) == ("vllm", "vllm")
    with pytest.raises(UnknownModelError):
        asyncio.run(engine.sample("agent", [1, 2], 1, SamplingParams()))
    with pytest.raises(InvalidInputError, match="gpu_memory_utilization"):
        VllmSettings(gpu_memory_utilization=1.5)


@dataclass
class _Logprob:  # the shape of vllm.sequence.Logprob
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class _Completion:  # the shape of vllm.outputs.CompletionOutput
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]] | None
    finish_reason: str | None


def test_vllm_outputs_become_samples_with_the_sampled_tokens_logprob() -> None:
    completion = _Completion(
        index=0,
        token_ids=[5, 9],
        logprobs=[
            {5: _Logprob(-0.5, 1), 7: _Logprob(-1.5, 2)},
            {9: _Logprob(-4.0, 7), 3: _Logprob(-0.1, 1), 4: _Logprob(-2.0, 2)},
        ],
        finish_reason="stop",
    )
    sample = to_sample(completion, top_logprobs=2)
    assert sample == Sample(
        token_ids=(5, 9),
        logprobs=(-0.5, -4.0),
        top_logprobs=(((5, -0.5), (7, -1.5)), ((3, -0.1), (4, -2.0))),
        finish_reason="stop",
    )
    for reason in ("length", "abort", "repetition"):
        completion.finish_reason = reason
        assert to_sample(completion, top_logprobs=0).finish_reason == reason
    completion.finish_reason = "error"
    with pytest.raises(BackendError, match="'error'"):
        to_sample(completion, top_logprobs=0)
    completion.finish_reason = "stop"
    completion.logprobs = None
    with pytest.raises(Exception, match="logprobs"):
        to_sample(completion, top_logprobs=0)


class _ByteEngine:
    """A SamplingEngine over raw bytes (token id = byte value), for the wire shapes only."""

    def served_models(self) -> list[str]:
        return ["m"]

    def render_chat(
        self,
        model: str,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int]:
        return list(json.dumps([list(messages), tools]).encode())

    def decode(self, model: str, token_ids: Sequence[int]) -> str:
        return bytes(token_ids).decode("utf-8", errors="replace")

    def token_text(self, model: str, token_id: int) -> str:
        return self.decode(model, [token_id])

    async def sample(
        self, model: str, prompt_token_ids: Sequence[int], n: int, params: SamplingParams
    ) -> list[Sample]:
        raise NotImplementedError

    async def close(self) -> None:
        return None


def test_response_shape_truncates_at_stop_and_floors_infinite_logprobs() -> None:
    request = parse_request(
        json.dumps(
            {
                "model": "m",
                "messages": [{"role": "user", "content": "hi"}],
                "logprobs": True,
                "top_logprobs": 1,
                "stop": "##",
            }
        ).encode()
    )
    params = request.sampling_params(default_max_tokens=50)
    assert params == SamplingParams(max_tokens=50, stop=("##",), top_logprobs=1)
    text = b"ok##"
    sample = Sample(
        token_ids=tuple(text),
        logprobs=(-1.0, -2.0, -3.0, float("-inf")),
        top_logprobs=tuple(((t, -0.5),) for t in text),
        finish_reason="stop",
    )
    body = build_response(_ByteEngine(), request, [1, 2], [sample], params)
    (choice,) = body["choices"]
    assert choice["message"] == {"role": "assistant", "content": "ok"}
    assert choice["finish_reason"] == "stop"
    assert choice["prompt_token_ids"] == [1, 2] == body["prompt_token_ids"]
    assert choice["token_ids"] == list(text)
    content = choice["logprobs"]["content"]
    assert [entry["token"] for entry in content] == [f"token_id:{t}" for t in text]
    assert content[-1]["logprob"] == LOGPROB_FLOOR
    assert content[0]["bytes"] == [ord("o")]
    assert content[0]["top_logprobs"] == [
        {"token": "token_id:111", "logprob": -0.5, "bytes": [111]}
    ]
    assert body["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
    json.dumps(body, allow_nan=False)


def test_tool_calls_in_the_text_become_openai_tool_calls() -> None:
    text = 'Let me add.\n<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>'
    content, calls = parse_tool_calls(text)
    assert content == "Let me add."
    assert len(calls) == 1
    assert calls[0]["type"] == "function"
    assert calls[0]["function"] == {"name": "add", "arguments": '{"a": 1}'}
    assert calls[0]["id"].startswith("call_")
    broken = "<tool_call>{not json}</tool_call>"
    assert parse_tool_calls(broken) == (broken, [])
    assert parse_tool_calls("<tool_call>{}</tool_call>") == ("<tool_call>{}</tool_call>", [])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"\xff\xfe", "not valid JSON"),
        (b'"text"', "JSON object"),
        (b'{"model": "m", "messages": [{"role": "user"}], "n": 0}', "n"),
        (b'{"model": "m", "messages": [{"role": "user"}], "seed": true}', "seed"),
        (b'{"model": "m", "messages": [{"role": "user"}], "top_p": 0}', "top_p"),
        (b'{"model": "m", "messages": [{"role": "user"}], "stop": [""]}', "stop"),
        (b'{"model": "m", "messages": [{"role": "user"}], "presence_penalty": 1}', "presence"),
        (b'{"model": "m", "messages": "hi"}', "messages"),
    ],
)
def test_malformed_requests_are_rejected_with_the_field_named(body: bytes, fragment: str) -> None:
    with pytest.raises(InvalidInputError, match=fragment):
        parse_request(body)


@pytest.mark.parametrize("reason", ["abort", "repetition", "length"])
def test_finish_reasons_beyond_stop_reach_the_client_as_they_are(reason: str) -> None:
    request = parse_request(
        json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": "#"}
        ).encode()
    )
    params = request.sampling_params(default_max_tokens=50)
    text = b"ab#c"
    sample = Sample(
        token_ids=tuple(text),
        logprobs=(-1.0,) * len(text),
        top_logprobs=((),) * len(text),
        finish_reason=reason,  # type: ignore[arg-type]
    )
    (choice,) = build_response(_ByteEngine(), request, [1], [sample], params)["choices"]
    assert choice["finish_reason"] == reason
    assert choice["message"]["content"] == "ab#c"  # only a stop finish is cut at the stop


def test_the_vllm_engine_refuses_n_above_the_servers_limit_as_the_torch_engine_does() -> None:
    from arthex.adapters.inference.served_names import MAX_SAMPLES_PER_REQUEST

    engine = VllmEngine("some/model")
    for n in (0, MAX_SAMPLES_PER_REQUEST + 1, True):
        with pytest.raises(
            InvalidInputError, match=rf"n must be in 1\.\.{MAX_SAMPLES_PER_REQUEST}"
        ):
            asyncio.run(engine.sample("agent", [1, 2], n, SamplingParams()))


@pytest.mark.parametrize("reason", ["abort", "repetition"])
def test_a_trajectory_read_back_keeps_a_vllm_finish_reason(reason: str) -> None:
    from arthex.core.trajectories import Trajectory

    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "ok"},
        "finish_reason": reason,
        "logprobs": None,
    }
    written = json.dumps({"messages_and_choices": [{"role": "user", "content": "hi"}, choice]})
    read = Trajectory.model_validate_json(written).messages_and_choices[-1]
    assert not isinstance(read, dict) and read.finish_reason == reason
    with pytest.raises(ValueError, match="finish_reason"):
        Trajectory(messages_and_choices=[{**choice, "finish_reason": "bogus"}])
