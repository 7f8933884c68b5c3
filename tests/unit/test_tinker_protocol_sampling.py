"""Tinker's sampler runs on the inference engine's decode code: greedy tokens, their logprobs
and the prompt's logprobs are a plain transformers forward's; top-k, stop tokens and seeds
behave as Tinker documents them; several samplers' adapters live in one peft model over the
base's own weights, and each samples as its own adapter."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

if TYPE_CHECKING:
    import torch

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from arthex.apps.server.tinker_protocol.base_model import BaseModel, LoraSettings  # noqa: E402
from arthex.apps.server.tinker_protocol.compute import AdamSettings, TrainingRun  # noqa: E402
from arthex.apps.server.tinker_protocol.errors import UserError  # noqa: E402
from arthex.apps.server.tinker_protocol.losses import DatumIn  # noqa: E402
from arthex.apps.server.tinker_protocol.sampling import (  # noqa: E402
    SampleRequest,
    SampleSettings,
    decode_rows,
    sample,
    sample_batch,
)
from arthex.apps.server.tinker_protocol.wire import Reply  # noqa: E402

PROMPT = [5, 17, 42, 99, 7]
STEPS = 6


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> BaseModel:
    from arthex.testing.tiny_model import tiny_model

    return BaseModel(tiny_model(tmp_path_factory.getbasetemp() / "tiny-model"))


def trained_adapter(base: BaseModel, seed: int) -> dict[str, Any]:
    """A LoRA adapter that is not zero: one step of cross-entropy towards random targets."""
    run = TrainingRun(base, LoraSettings(rank=4, seed=seed))
    generator = np.random.default_rng(seed)
    tokens = generator.integers(0, base.vocab_size, 12).tolist()
    targets = torch.tensor(generator.integers(0, base.vocab_size, 12))
    datum = DatumIn(tokens=tokens, inputs={"target_tokens": targets, "weights": torch.ones(12)})
    run.forward_backward([datum], "cross_entropy", {}, forward_only=False)
    run.optim_step(AdamSettings(learning_rate=0.1))
    return run.adapter()


def plain_model(base: BaseModel, adapter: dict[str, Any]) -> Any:
    """The oracle's model: a fresh peft model of its own with the adapter."""
    from peft import set_peft_model_state_dict

    model = base.lora_model(LoraSettings(rank=4, seed=123))
    set_peft_model_state_dict(model, adapter)
    return model


def plain_greedy(model: Any, prompt: list[int], steps: int) -> tuple[list[int], list[float]]:
    """Greedy decoding by full forwards over the whole sequence, no cache."""
    tokens, logprobs = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(input_ids=torch.tensor([tokens])).logits[0, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            token = int(logp.argmax())
            tokens.append(token)
            logprobs.append(float(logp[token]))
    return tokens[len(prompt) :], logprobs


def plain_prompt_logprobs(model: Any, prompt: list[int]) -> list[float]:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt])).logits[0].float()
    logp = torch.log_softmax(logits[:-1], dim=-1)
    return [math.nan, *logp.gather(-1, torch.tensor(prompt[1:])[:, None]).squeeze(-1).tolist()]


def test_greedy_tokens_and_logprobs_are_a_plain_forwards(base: BaseModel) -> None:
    adapter = trained_adapter(base, 1)
    lora = LoraSettings(rank=4, seed=1)
    settings = SampleSettings(max_tokens=STEPS, temperature=0.0, stop_at_end_token=False)
    module = base.sampler_module(lora, adapter)
    rows, prompt_lps = sample(base, module, PROMPT, 2, settings, topk=3, prompt_logprobs=True)
    oracle = plain_model(base, adapter)
    want_tokens, want_lps = plain_greedy(oracle, PROMPT, STEPS)
    for row in rows:
        assert row.tokens == want_tokens
        np.testing.assert_allclose(row.logprobs, want_lps, atol=1e-5)
        assert row.stop_reason == "length"
        assert row.topk is not None and len(row.topk) == STEPS
        assert [top[0][0] for top in row.topk] == want_tokens  # the greedy pick is the top one
    assert prompt_lps is not None
    np.testing.assert_allclose(prompt_lps, plain_prompt_logprobs(oracle, PROMPT), atol=1e-5)


def test_top_k_one_is_greedy_and_a_stop_token_ends_the_row(base: BaseModel) -> None:
    want_tokens, _ = plain_greedy(base.module, PROMPT, STEPS)
    top1 = SampleSettings(max_tokens=STEPS, top_k=1, seed=4, stop_at_end_token=False)
    rows, _ = sample(base, base.module, PROMPT, 3, top1)
    assert [row.tokens for row in rows] == [want_tokens] * 3
    stop_at = want_tokens[2]
    stopping = SampleSettings(max_tokens=STEPS, temperature=0.0, stop_tokens=(stop_at,))
    (row,), _ = sample(base, base.module, PROMPT, 1, stopping)
    assert row.tokens == want_tokens[: want_tokens.index(stop_at) + 1]
    assert row.stop_reason == "stop"


def test_a_seed_repeats_its_samples(base: BaseModel) -> None:
    settings = SampleSettings(max_tokens=8, seed=11, stop_at_end_token=False)
    first, _ = sample(base, base.module, PROMPT, 4, settings)
    again, _ = sample(base, base.module, PROMPT, 4, settings)
    assert [r.tokens for r in first] == [r.tokens for r in again]
    assert len({tuple(r.tokens) for r in first}) > 1  # each row its own stream


def test_bad_sampling_params_are_the_users_error(base: BaseModel) -> None:
    with pytest.raises(UserError, match="top_p"):
        sample(base, base.module, PROMPT, 1, SampleSettings(max_tokens=2, top_p=0.0))


def test_samplers_share_one_peft_model_over_the_base_weights(base: BaseModel) -> None:
    one, two = trained_adapter(base, 2), trained_adapter(base, 3)
    lora_one, lora_two = LoraSettings(rank=4, seed=2), LoraSettings(rank=4, seed=3)
    settings = SampleSettings(max_tokens=STEPS, temperature=0.0, stop_at_end_token=False)
    module_one = base.sampler_module(lora_one, one)
    module_two = base.sampler_module(lora_two, two)
    assert module_one is module_two
    base_storage = {p.untyped_storage().data_ptr() for p in base.module.parameters()}
    assert base_storage <= {p.untyped_storage().data_ptr() for p in module_one.parameters()}
    # Sampling the first adapter after the second was loaded still samples the first.
    rows, _ = sample(base, base.sampler_module(lora_one, one), PROMPT, 1, settings)
    assert rows[0].tokens == plain_greedy(plain_model(base, one), PROMPT, STEPS)[0]
    rows, _ = sample(base, base.sampler_module(lora_two, two), PROMPT, 1, settings)
    assert rows[0].tokens == plain_greedy(plain_model(base, two), PROMPT, STEPS)[0]


def test_several_adapters_and_the_base_sample_in_one_batch(base: BaseModel) -> None:
    one, two = trained_adapter(base, 4), trained_adapter(base, 5)
    greedy = SampleSettings(max_tokens=STEPS, temperature=0.0, stop_at_end_token=False)
    prompts = [PROMPT, [9, 3, *PROMPT, 11], PROMPT[:3]]  # unequal: the batch is left-padded
    names = [
        base.sampler_adapter(LoraSettings(rank=4, seed=4), one),
        base.sampler_adapter(LoraSettings(rank=4, seed=5), two),
        None,
    ]
    requests = [
        SampleRequest(prompt, 2, greedy, prompt_logprobs=True, adapter=name)
        for prompt, name in zip(prompts, names)
    ]
    results = sample_batch(base, base.sampler_model, [(r, decode_rows(base, r)) for r in requests])
    oracles = [plain_model(base, one), plain_model(base, two), base.module]
    wanted = []
    for prompt, oracle, (rows, prompt_lps) in zip(prompts, oracles, results):
        want_tokens, want_lps = plain_greedy(oracle, prompt, STEPS)
        wanted.append(want_tokens)
        for row in rows:
            assert row.tokens == want_tokens
            np.testing.assert_allclose(row.logprobs, want_lps, atol=1e-5)
        assert prompt_lps is not None
        np.testing.assert_allclose(prompt_lps, plain_prompt_logprobs(oracle, prompt), atol=1e-5)
    assert len({tuple(tokens) for tokens in wanted}) > 1  # the adapters really differ


def test_waiting_asample_requests_are_sampled_as_one_batch(base: BaseModel, tmp_path: Path) -> None:
    import tinker.proto.tinker_public_pb2 as pb

    from arthex.apps.server.tinker_protocol.served import ServedModels
    from arthex.apps.server.tinker_protocol.service import TinkerService

    models = ServedModels()
    models.add("tiny", base)
    service = TinkerService(models, tmp_path, client_config={}, long_poll_s=10.0)

    def post(route: str, payload: dict[str, Any]) -> Any:
        return service.handle("POST", f"/api/v1/{route}", {}, json.dumps(payload).encode())

    calls: list[int] = []
    hook = base.module.register_forward_hook(lambda *_: calls.append(1))
    release = threading.Event()
    try:
        # Hold the compute thread so the requests wait together, as under load.
        service._futures.submit(lambda: (release.wait(10), Reply.json({}))[1], lane="hold")
        prompts = [PROMPT, [9, 3, *PROMPT, 11], PROMPT[:3]]
        ids: list[str] = []
        for prompt in prompts:
            chunk = {"type": "encoded_text", "tokens": prompt}
            body = {
                "base_model": "tiny",
                "prompt": {"chunks": [chunk]},
                "num_samples": 1,
                "sampling_params": {"max_tokens": STEPS, "temperature": 0.0, "stop": []},
                "seq_id": len(ids),
            }
            ids.append(json.loads(post("asample", body).body)["request_id"])
        release.set()
        replies = [post("retrieve_future", {"request_id": request_id}) for request_id in ids]
    finally:
        hook.remove()
        service.close()
    # One batch: a prefill and a step per further token, not that for each request.
    assert len(calls) == STEPS
    for prompt, reply in zip(prompts, replies):
        answer = pb.SampleResponse.FromString(reply.body)
        tokens = np.frombuffer(answer.sequences[0].tokens, np.int32).tolist()
        assert tokens == plain_greedy(base.module, prompt, STEPS)[0]
