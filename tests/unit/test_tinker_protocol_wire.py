"""The Tinker server's request validation (wire.py, errors.py): each request body built by the
pinned tinker SDK's own serializers (the same calls its resources make), each reply read back
by the SDK's own deserializers, and each refusal a 400 that names what was wrong."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
tinker = pytest.importorskip("tinker")

from tinker import types  # noqa: E402
from tinker._compat import model_dump  # noqa: E402
from tinker.proto import tinker_public_pb2 as pb  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from arthex.apps.server.tinker_protocol.compute import AdamSettings  # noqa: E402
from arthex.apps.server.tinker_protocol.errors import HttpError, checkpoint_name  # noqa: E402
from arthex.apps.server.tinker_protocol.sampling import SampledRow  # noqa: E402
from arthex.apps.server.tinker_protocol.wire import (  # noqa: E402
    PROTO,
    Reply,
    adam_settings,
    check_adam_config,
    decode_forward_backward,
    encode_forward_backward,
    encode_sample,
    failure,
    json_body,
    prompt_tokens,
    sample_settings,
)


def sdk_json(request: Any) -> dict[str, Any]:
    """A JSON body as the SDK's resources send it."""
    body: dict[str, Any] = model_dump(request, exclude_unset=False, exclude_none=True, mode="json")
    return body


def refused(call: Any, *args: Any) -> str:
    """The message of the 400 `call(*args)` answers."""
    with pytest.raises(HttpError) as caught:
        call(*args)
    assert caught.value.status == 400
    return str(caught.value)


# --- replies ----------------------------------------------------------------------------


def test_a_json_reply_is_the_payload_as_json_with_status_200_unless_told() -> None:
    reply = Reply.json({"request_id": "r1", "model_id": "m"})
    assert (reply.status, reply.content_type) == (200, "application/json")
    assert json.loads(reply.body) == {"request_id": "r1", "model_id": "m"}
    assert Reply.json({"detail": "gone"}, 404).status == 404
    assert Reply(200, b"x", PROTO).content_type == "application/x-protobuf"


def test_a_failed_promise_is_what_the_sdk_reads_as_a_failure_of_its_category() -> None:
    # The SDK's future takes a JSON result with an "error" key as failed, and its
    # "category" as a RequestErrorCategory (api_future_impl.py).
    reply = failure("datum 0 has an empty model_input", "user")
    assert reply.status == 200
    assert json.loads(reply.body) == {
        "error": "datum 0 has an empty model_input",
        "category": "user",
    }
    assert types.RequestErrorCategory(json.loads(reply.body)["category"]).value == "user"


# --- JSON bodies ------------------------------------------------------------------------


def test_an_empty_body_is_an_empty_object_and_an_object_is_read_as_sent() -> None:
    assert json_body(b"") == {}
    body = sdk_json(types.SamplingParams(max_tokens=4))
    assert json_body(json.dumps(body).encode()) == body


def test_a_body_that_is_not_json_or_not_an_object_is_refused() -> None:
    assert refused(json_body, b"{not json").startswith("the body is not JSON: ")
    assert refused(json_body, b"[1, 2]") == "the body must be a JSON object"
    assert refused(json_body, b'"text"') == "the body must be a JSON object"


# --- optimizer --------------------------------------------------------------------------


def test_create_model_accepts_the_sdks_default_optimizer_config_and_none() -> None:
    body = sdk_json(
        types.CreateModelRequest(
            session_id="s", model_seq_id=0, base_model="b", lora_config=types.LoraConfig(rank=4)
        )
    )
    assert body["optimizer_config"] == {"type": "adamw"}
    check_adam_config(body["optimizer_config"])
    check_adam_config(None)
    check_adam_config({})  # no type: AdamW, as the SDK's default


@pytest.mark.parametrize("config", [{"type": "dimuon"}, {"type": "adam"}, "adamw", ["adamw"]])
def test_an_optimizer_other_than_adamw_is_refused_naming_it(config: object) -> None:
    message = refused(check_adam_config, config)
    assert message == f"the tinker emulator runs AdamW only, got optimizer {config!r}"


def test_optim_step_reads_the_sdks_adam_params() -> None:
    params = types.AdamParams(
        learning_rate=3e-4, beta1=0.8, beta2=0.99, eps=1e-8, weight_decay=0.01, grad_clip_norm=1.5
    )
    body = sdk_json(types.OptimStepRequest(optim_params=params, model_id="m", seq_id=2))
    assert "adam_params" in body  # the key the SDK sends them under
    assert adam_settings(body) == AdamSettings(
        learning_rate=3e-4, beta1=0.8, beta2=0.99, eps=1e-8, weight_decay=0.01, grad_clip_norm=1.5
    )


def test_adam_params_under_optim_params_with_a_type_and_as_strings_are_read() -> None:
    body = {"optim_params": {"type": "adam", "learning_rate": "0.5", "beta1": 0}}
    settings = adam_settings(body)
    assert settings == AdamSettings(learning_rate=0.5, beta1=0.0)
    assert isinstance(settings.beta1, float)
    assert adam_settings({"adam_params": {"type": "adamw"}}) == AdamSettings()
    # an empty adam_params is not a choice: the other key is read
    assert adam_settings({"adam_params": {}, "optim_params": {"eps": 1}}) == AdamSettings(eps=1.0)


def test_an_optimizer_family_the_emulator_does_not_run_is_refused() -> None:
    body = sdk_json(
        types.OptimStepRequest(
            optim_params=types.DimuonParams(learning_rate=1e-3), model_id="m", seq_id=1
        )
    )
    assert "optimizer_params" in body  # the SDK's key for other families
    wanted = "the tinker emulator runs AdamW only; pass AdamParams"
    assert refused(adam_settings, body) == wanted
    assert refused(adam_settings, {"adam_params": {"type": "sgd", "learning_rate": 1}}) == wanted
    assert refused(adam_settings, {"adam_params": [0.1]}) == wanted
    assert refused(adam_settings, {}) == wanted


def test_adam_params_that_are_not_numbers_or_not_adams_are_refused() -> None:
    message = refused(adam_settings, {"adam_params": {"learning_rate": "fast"}})
    assert message.startswith("bad adam_params: ") and "fast" in message
    message = refused(adam_settings, {"adam_params": {"momentum": 0.9}})
    assert message.startswith("bad adam_params: ") and "momentum" in message
    message = refused(adam_settings, {"adam_params": {"beta1": None}})
    assert message.startswith("bad adam_params: ")


# --- forward_backward -------------------------------------------------------------------


def datum(tokens: list[int], **inputs: Any) -> types.Datum:
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens),
        loss_fn_inputs={
            name: types.TensorData.from_numpy(np.asarray(v)) for name, v in inputs.items()
        },
    )


def fb_request(
    data: list[types.Datum],
    loss_fn: types.LossFnType = "importance_sampling",
    config: dict[str, Any] | None = None,
    *,
    seq_id: int = 3,
) -> pb.ForwardBackwardRequest:
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=data, loss_fn=loss_fn, loss_fn_config=config
        ),
        model_id="run-1",
        seq_id=seq_id,
    )
    return forward_backward_request_to_proto(request)


def test_forward_backward_is_decoded_from_the_sdks_protobuf() -> None:
    first = datum(
        [5, 6, 7],
        target_tokens=np.array([6, 7, 8], np.int64),
        logprobs=np.array([-0.5, -1.25, -2.0], np.float32),
        advantages=np.array([1.0, 0.0, -1.0], np.float32),
    )
    second = datum(
        [9],
        target_tokens=np.array([2], np.int64),
        logprobs=np.array([-3.0], np.float32),
        advantages=np.array([0.5], np.float32),
    )
    body = fb_request([first, second], config={"clip_low_threshold": 0.7}).SerializeToString()
    decoded = decode_forward_backward(body, {})
    assert (decoded.model_id, decoded.seq_id, decoded.loss_fn) == (
        "run-1",
        3,
        "importance_sampling",
    )
    assert decoded.config == {"clip_low_threshold": pytest.approx(0.7)}
    assert decoded.forward_only is False
    assert [d.tokens for d in decoded.data] == [[5, 6, 7], [9]]
    inputs = decoded.data[0].inputs
    assert inputs["target_tokens"].dtype == torch.int64
    assert inputs["target_tokens"].tolist() == [6, 7, 8]
    assert inputs["logprobs"].dtype == torch.float32
    assert inputs["logprobs"].tolist() == [-0.5, -1.25, -2.0]
    assert inputs["advantages"].tolist() == [1.0, 0.0, -1.0]
    assert decoded.data[1].inputs["target_tokens"].tolist() == [2]


def test_forward_only_and_a_chunked_prompt_are_decoded() -> None:
    chunks = [types.EncodedTextChunk(tokens=[1, 2]), types.EncodedTextChunk(tokens=[3])]
    one = types.Datum(
        model_input=types.ModelInput(chunks=chunks),
        loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array([2, 3, 4]))},
    )
    message = fb_request([one], "cross_entropy")
    message.forward_only = True
    decoded = decode_forward_backward(message.SerializeToString(), {})
    assert decoded.forward_only is True
    assert decoded.data[0].tokens == [1, 2, 3]
    assert decoded.config == {}


def test_a_zstd_body_is_decompressed_when_its_content_encoding_says_so() -> None:
    import zstandard

    # Long enough for zstd to compress (a short body is stored raw inside the frame, which a
    # protobuf parser may still read through).
    tokens = [4, 5] * 300
    body = fb_request([datum(tokens, target_tokens=np.array([*tokens[1:], 6]))], "cross_entropy")
    plain = body.SerializeToString()
    compressed = zstandard.ZstdCompressor().compress(plain)
    assert len(compressed) < len(plain) // 4
    # the SDK sends "Content-Encoding: zstd"; the server lower-cases header names
    zstd = decode_forward_backward(compressed, {"content-encoding": "zstd"})
    assert zstd.data[0].tokens == tokens
    assert (
        decode_forward_backward(compressed, {"content-encoding": "ZSTD"}).data[0].tokens == tokens
    )
    # none said: the body is read as it came
    assert decode_forward_backward(plain, {"content-type": PROTO}).data[0].tokens == tokens


def test_the_v2_config_wins_and_its_text_values_are_not_numbers() -> None:
    message = fb_request(
        [datum([1], target_tokens=np.array([2]))], "ppo", {"beta": 0.25, "mode": "x"}
    )
    assert message.loss_fn_config_v2["mode"].text == "x"  # the SDK writes strings to v2 only
    message.loss_fn_config["beta"] = 9.0  # an older value under the legacy key
    message.loss_fn_config["clip_high_threshold"] = 1.5  # only in the legacy map
    decoded = decode_forward_backward(message.SerializeToString(), {})
    assert decoded.config == {"beta": 0.25, "clip_high_threshold": 1.5}
    assert all(type(value) is float for value in decoded.config.values())


def test_a_body_that_is_not_a_forward_backward_request_is_refused() -> None:
    message = refused(decode_forward_backward, b"\xff\xff\xff", {})
    assert message.startswith("the body is not a ForwardBackwardRequest: ")


def test_a_chunk_other_than_encoded_text_is_refused_naming_its_datum() -> None:
    image = types.Datum(
        model_input=types.ModelInput(chunks=[types.ImageChunk(data=b"\x89PNG", format="png")]),
        loss_fn_inputs={"target_tokens": types.TensorData.from_numpy(np.array([1]))},
    )
    body = fb_request([datum([1], target_tokens=np.array([2])), image]).SerializeToString()
    assert refused(decode_forward_backward, body, {}) == (
        "datum 1: only encoded_text chunks are supported"
    )


def proto_with_tensor(tensor: pb.Tensor, name: str = "weights") -> bytes:
    message = fb_request([datum([1, 2], target_tokens=np.array([2, 3]))], "cross_entropy")
    message.data[0].loss_fn_inputs[name].CopyFrom(tensor)
    body: bytes = message.SerializeToString()
    return body


def test_a_tensor_of_another_dtype_or_sparse_is_refused_naming_it() -> None:
    bf16 = pb.Tensor(dtype=pb.DTYPE_BFLOAT16, dense=b"\x00\x00\x00\x00")
    assert refused(decode_forward_backward, proto_with_tensor(bf16), {}) == (
        "datum 0: loss_fn_inputs['weights'] has an unsupported dtype"
    )
    int32 = pb.Tensor(dtype=pb.DTYPE_INT32, dense=b"\x00" * 8)
    assert "unsupported dtype" in refused(decode_forward_backward, proto_with_tensor(int32), {})
    sparse = types.TensorData(data=[1.0, 2.0], dtype="float32", shape=[2])
    sparse_proto = pb.Tensor(dtype=pb.DTYPE_FLOAT32)
    sparse_proto.sparse_csr.values = np.asarray(sparse.data, np.float32).tobytes()
    assert refused(decode_forward_backward, proto_with_tensor(sparse_proto), {}) == (
        "datum 0: loss_fn_inputs['weights'] must be dense"
    )
    nothing = pb.Tensor(dtype=pb.DTYPE_FLOAT32)  # neither dense nor sparse
    assert "must be dense" in refused(decode_forward_backward, proto_with_tensor(nothing), {})


def test_a_tensor_is_shaped_as_sent_and_a_shape_that_does_not_fit_is_refused() -> None:
    square = np.arange(4, dtype=np.float32).reshape(2, 2)
    tensor = pb.Tensor(dtype=pb.DTYPE_FLOAT32, dense=square.tobytes(), shape=[2, 2])
    decoded = decode_forward_backward(proto_with_tensor(tensor), {})
    assert decoded.data[0].inputs["weights"].tolist() == [[0.0, 1.0], [2.0, 3.0]]
    flat = pb.Tensor(dtype=pb.DTYPE_FLOAT32, dense=square.tobytes())  # no shape: as it comes
    assert decode_forward_backward(proto_with_tensor(flat), {}).data[0].inputs[
        "weights"
    ].tolist() == [0.0, 1.0, 2.0, 3.0]
    wrong = pb.Tensor(dtype=pb.DTYPE_FLOAT32, dense=square.tobytes(), shape=[3])
    message = refused(decode_forward_backward, proto_with_tensor(wrong), {})
    assert message.startswith("datum 0: loss_fn_inputs['weights']: ")
    assert "size 4" in message and "(3,)" in message


def test_a_decoded_tensor_is_writable_and_its_own() -> None:
    tensor = pb.Tensor(dtype=pb.DTYPE_INT64, dense=np.array([7, 8], np.int64).tobytes())
    decoded = decode_forward_backward(proto_with_tensor(tensor, "target_tokens"), {})
    targets = decoded.data[0].inputs["target_tokens"]
    targets[0] = 1  # a tensor over the body's bytes would be read-only
    assert targets.tolist() == [1, 8]


def test_forward_backward_outputs_are_what_the_sdk_reads_per_datum() -> None:
    outputs = [[-0.5, -1.5, -2.25], [-4.0]]
    reply = encode_forward_backward(outputs, 8.25)
    assert (reply.status, reply.content_type) == (200, "application/x-protobuf")
    read = deserialize_forward_backward_output(reply.body)
    assert read.loss_fn_output_type == "ArrayRecord"
    assert read.metrics == {"loss:sum": 8.25}
    assert len(read.loss_fn_outputs) == 2
    assert [o["logprobs"].data for o in read.loss_fn_outputs] == outputs
    assert {o["logprobs"].dtype for o in read.loss_fn_outputs} == {"float32"}
    # the batched field as sent: float32 data, and each datum's start as a byte offset into it
    field = pb.ForwardBackwardOutput.FromString(reply.body).loss_fn_outputs[0].fields["logprobs"]
    assert np.frombuffer(field.offsets, np.int64).tolist() == [0, 12, 16]
    assert len(field.data) == 16


def test_no_datum_outputs_is_an_empty_record() -> None:
    read = deserialize_forward_backward_output(encode_forward_backward([], 0.0).body)
    assert read.loss_fn_outputs == [] and read.metrics == {"loss:sum": 0.0}


# --- sampling ---------------------------------------------------------------------------


def test_a_prompt_is_the_tokens_of_its_encoded_text_chunks_in_order() -> None:
    prompt = types.ModelInput(
        chunks=[types.EncodedTextChunk(tokens=[3, 1]), types.EncodedTextChunk(tokens=[4])]
    )
    assert prompt_tokens(sdk_json(prompt)) == [3, 1, 4]
    assert prompt_tokens({"chunks": [{"tokens": [2, 7]}]}) == [2, 7]  # no type: encoded text
    assert prompt_tokens({"chunks": [{"type": "encoded_text"}]}) == []
    assert prompt_tokens({"chunks": []}) == []
    assert prompt_tokens({"chunks": [{"tokens": ["5"]}]}) == [5]


@pytest.mark.parametrize("prompt", [None, [1, 2], {"tokens": [1, 2]}, {"chunks": {"tokens": [1]}}])
def test_a_prompt_that_is_not_a_model_input_is_refused(prompt: object) -> None:
    assert refused(prompt_tokens, prompt) == "prompt must be a ModelInput with chunks"


def test_a_prompt_with_an_image_or_a_bare_chunk_is_refused() -> None:
    image = sdk_json(types.ModelInput(chunks=[types.ImageChunk(data=b"ab", format="png")]))
    wanted = "the tinker emulator samples encoded_text chunks only"
    assert refused(prompt_tokens, image) == wanted
    assert refused(prompt_tokens, {"chunks": [[1, 2]]}) == wanted


def test_sampling_params_as_the_sdk_sends_them() -> None:
    body = sdk_json(
        types.SamplingParams(max_tokens=16, seed=7, temperature=0.5, top_k=20, top_p=0.9)
    )
    settings = sample_settings(body)
    assert (settings.max_tokens, settings.seed) == (16, 7)
    assert (settings.temperature, settings.top_k, settings.top_p) == (0.5, 20, 0.9)
    assert (settings.stop_strings, settings.stop_tokens) == ((), ())
    assert settings.stop_at_end_token is True


def test_sampling_params_left_out_are_the_sdks_defaults() -> None:
    defaults = types.SamplingParams()
    settings = sample_settings({})
    assert settings.max_tokens is None and settings.seed is None
    assert settings.temperature == defaults.temperature == 1.0
    assert settings.top_k == defaults.top_k == -1
    assert settings.top_p == defaults.top_p == 1.0
    assert settings.stop_at_end_token is True
    numbers = sample_settings({"temperature": 0, "top_k": "3", "top_p": "0.5"})
    assert type(numbers.temperature) is float and type(numbers.top_p) is float
    assert (numbers.temperature, numbers.top_k, numbers.top_p) == (0.0, 3, 0.5)


def test_stop_strings_and_stop_tokens_add_to_the_end_token() -> None:
    one = sample_settings(sdk_json(types.SamplingParams(stop="\n\n")))
    assert (one.stop_strings, one.stop_tokens, one.stop_at_end_token) == (("\n\n",), (), True)
    several = sample_settings(sdk_json(types.SamplingParams(stop=["a", "bc"])))
    assert (several.stop_strings, several.stop_tokens) == (("a", "bc"), ())
    assert several.stop_at_end_token is True
    tokens = sample_settings(sdk_json(types.SamplingParams(stop=[13, 2])))
    assert (tokens.stop_strings, tokens.stop_tokens, tokens.stop_at_end_token) == (
        (),
        (13, 2),
        True,
    )


def test_an_empty_stop_list_turns_every_stop_off_the_end_token_included() -> None:
    none = sample_settings(sdk_json(types.SamplingParams(stop=[])))
    assert (none.stop_strings, none.stop_tokens, none.stop_at_end_token) == ((), (), False)


@pytest.mark.parametrize("stop", [5, ["a", 1], [1.5], {"a": 1}])
def test_a_stop_of_another_shape_is_refused_naming_it(stop: object) -> None:
    assert refused(sample_settings, {"stop": stop}) == (
        f"stop must be a string, a list of strings or of ints, got {stop!r}"
    )


def row(
    tokens: list[int], stop: str, topk: list[list[tuple[int, float]]] | None = None
) -> SampledRow:
    return SampledRow(
        tokens=tokens,
        logprobs=[-0.25 * (i + 1) for i in range(len(tokens))],
        stop_reason=stop,
        topk=topk,
    )


def test_samples_are_what_the_sdk_reads_with_their_stop_reasons() -> None:
    reply = encode_sample([row([4, 9, 2], "stop"), row([8], "length")], None, topk=0, last_n=None)
    assert (reply.status, reply.content_type) == (200, "application/x-protobuf")
    read = deserialize_sample_response(reply.body)
    assert [s.stop_reason for s in read.sequences] == ["stop", "length"]
    assert [s.tokens for s in read.sequences] == [[4, 9, 2], [8]]
    assert [s.logprobs for s in read.sequences] == [[-0.25, -0.5, -0.75], [-0.25]]
    assert read.sequences[0].topk_logprobs is None
    assert read.prompt_logprobs is None


def test_top_k_sampled_logprobs_are_a_tokens_by_k_table() -> None:
    topk = [[(4, -0.1), (5, -2.5)], [(9, -0.2), (1, -3.0)]]
    reply = encode_sample([row([4, 9], "length", topk)], None, topk=2, last_n=None)
    top = deserialize_sample_response(reply.body).sequences[0].topk_logprobs_np
    assert top is not None
    assert top.token_ids.tolist() == [[4, 5], [9, 1]]
    np.testing.assert_allclose(top.logprobs, [[-0.1, -2.5], [-0.2, -3.0]], rtol=1e-6)


def test_prompt_logprobs_are_sent_and_only_the_last_n_scored_when_asked() -> None:
    lps = [math.nan, -1.0, -2.0, -3.0]
    # The SDK reads a position without a logprob (NaN: the first token, or one before the
    # last N when `prompt_logprobs_last_n` is set) as None.
    whole = deserialize_sample_response(encode_sample([], lps, topk=0, last_n=None).body)
    assert whole.prompt_logprobs == [None, -1.0, -2.0, -3.0]
    two = deserialize_sample_response(encode_sample([], lps, topk=0, last_n=2).body)
    assert two.prompt_logprobs == [None, None, -2.0, -3.0]
    three = deserialize_sample_response(encode_sample([], lps[1:], topk=0, last_n=3).body)
    assert three.prompt_logprobs == [-1.0, -2.0, -3.0]
    one = deserialize_sample_response(encode_sample([], lps[1:], topk=0, last_n=1).body)
    assert one.prompt_logprobs == [None, None, -3.0]
    more = deserialize_sample_response(encode_sample([], lps[1:], topk=0, last_n=9).body)
    assert more.prompt_logprobs == [-1.0, -2.0, -3.0]
    for unset in (0, -1, "2", None):  # not a positive int: every position as computed
        read = deserialize_sample_response(encode_sample([], lps[1:], topk=0, last_n=unset).body)
        assert read.prompt_logprobs == [-1.0, -2.0, -3.0]


# --- checkpoint names -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["step-1", "a", "_x", "0", "v1.2_final-3", "x" * 128])
def test_a_checkpoint_name_of_letters_digits_and_dot_dash_underscore_is_kept(name: str) -> None:
    assert checkpoint_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".hidden", "-x", "..", "a/b", "a b", "x" * 129, "é", "a\n", None, 5]
)
def test_a_checkpoint_name_that_could_not_be_a_folder_name_is_refused(name: object) -> None:
    assert refused(checkpoint_name, name) == (
        f"checkpoint name {name!r} must be 1-128 letters, digits, '_', '-' or '.'"
    )
