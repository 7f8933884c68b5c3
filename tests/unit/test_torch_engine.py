"""The torch engine on the tiny model: what it samples, what it reports, how it batches."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from arthex.adapters.inference.engine import Sample, SamplingParams, UnknownModelError
from arthex.adapters.inference.torch_engine import TorchEngine
from arthex.core.errors import BackendError, CorruptDataError, InvalidInputError
from arthex.testing.tiny_model import tiny_model

T = TypeVar("T")
MESSAGES = [{"role": "user", "content": "Count from one to ten."}]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def with_engine(model_dir: str, body: Callable[[TorchEngine], Awaitable[T]], **kwargs: Any) -> T:
    async def main() -> T:
        engine = TorchEngine(model_dir, **kwargs)
        try:
            await engine.load("base", None)
            return await body(engine)
        finally:
            await engine.close()

    return asyncio.run(main())


def reference_logprobs(
    model: Any, prompt: Sequence[int], completion: Sequence[int]
) -> tuple[list[float], Any]:
    """log_softmax of one plain forward pass, at each completion token; and the full rows."""
    import torch

    ids = torch.tensor([[*prompt, *completion]])
    with torch.no_grad():
        rows = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    start = len(prompt) - 1
    picked = [rows[start + k, token].item() for k, token in enumerate(completion)]
    return picked, rows[start : start + len(completion)]


def load_model(path: str) -> Any:
    from transformers import AutoModelForCausalLM

    model: Any = AutoModelForCausalLM.from_pretrained(path)
    return model.eval()


def test_logprobs_are_the_raw_distribution_at_the_sampled_tokens(model_dir: str) -> None:
    params = SamplingParams(max_tokens=24, temperature=0.7, top_p=0.9, seed=5, top_logprobs=3)

    async def body(engine: TorchEngine) -> tuple[list[int], list[Sample]]:
        prompt = engine.render_chat("base", MESSAGES, None)
        return prompt, await engine.sample("base", prompt, 2, params)

    prompt, samples = with_engine(model_dir, body)
    model = load_model(model_dir)
    assert len(samples) == 2
    for sample in samples:
        assert len(sample.token_ids) == len(sample.logprobs) == len(sample.top_logprobs)
        expected, rows = reference_logprobs(model, prompt, sample.token_ids)
        assert sample.logprobs == pytest.approx(expected, abs=1e-4)
        for position, top in enumerate(sample.top_logprobs):
            assert len(top) == 3
            values, ids = rows[position].topk(3)
            assert [token for token, _ in top] == ids.tolist()
            assert [value for _, value in top] == pytest.approx(values.tolist(), abs=1e-4)


def test_a_seed_makes_sampling_reproducible(model_dir: str) -> None:
    async def body(engine: TorchEngine) -> list[list[Sample]]:
        prompt = engine.render_chat("base", MESSAGES, None)
        runs = []
        for seed in (11, 11, 12):
            params = SamplingParams(max_tokens=16, seed=seed)
            runs.append(await engine.sample("base", prompt, 3, params))
        return runs

    first, again, other = with_engine(model_dir, body)
    assert first == again
    assert first != other
    assert len({sample.token_ids for sample in first}) == 3  # n samples are independent


def test_greedy_follows_the_argmax_and_max_tokens_bounds_the_length(model_dir: str) -> None:
    async def body(engine: TorchEngine) -> tuple[list[int], Sample]:
        prompt = engine.render_chat("base", MESSAGES, None)
        params = SamplingParams(max_tokens=7, temperature=0.0)
        return prompt, (await engine.sample("base", prompt, 1, params))[0]

    prompt, sample = with_engine(model_dir, body)
    _, rows = reference_logprobs(load_model(model_dir), prompt, sample.token_ids)
    assert list(sample.token_ids) == rows.argmax(dim=-1).tolist()
    assert len(sample.token_ids) == 7
    assert sample.finish_reason == "length"


def test_stop_strings_end_the_sample_at_the_token_that_completes_them(model_dir: str) -> None:
    async def body(engine: TorchEngine) -> tuple[Sample, Sample, str]:
        prompt = engine.render_chat("base", [{"role": "user", "content": "hi"}], None)
        free = (await engine.sample("base", prompt, 1, SamplingParams(40, temperature=0.0)))[0]
        text = engine.decode("base", free.token_ids)
        stop = text[2:4]
        assert len(stop) == 2, f"the greedy text is too short for this test: {text!r}"
        params = SamplingParams(40, temperature=0.0, stop=(stop,))
        stopped = (await engine.sample("base", prompt, 1, params))[0]
        assert stop in engine.decode("base", stopped.token_ids)
        assert stop not in engine.decode("base", stopped.token_ids[:-1])
        return free, stopped, stop

    free, stopped, _ = with_engine(model_dir, body)
    assert stopped.finish_reason == "stop"
    assert len(stopped.token_ids) < len(free.token_ids)
    assert stopped.token_ids == free.token_ids[: len(stopped.token_ids)]


def test_concurrent_calls_run_as_one_batch_with_the_same_results(model_dir: str) -> None:
    params = [SamplingParams(max_tokens=5 + i, temperature=0.9, seed=i) for i in range(8)]
    prompts_text = [f"Question number {i}: what is {i} plus {i}?" for i in range(8)]

    async def body(engine: TorchEngine) -> tuple[list[list[Sample]], list[list[Sample]], int]:
        prompts = [
            engine.render_chat("base", [{"role": "user", "content": text}], None)
            for text in prompts_text
        ]
        alone = [await engine.sample("base", p, 1, s) for p, s in zip(prompts, params)]
        before = (engine.batches_run, engine.rows_run)
        together = await asyncio.gather(
            *(engine.sample("base", p, 1, s) for p, s in zip(prompts, params))
        )
        assert engine.rows_run - before[1] == 8
        return alone, list(together), engine.batches_run - before[0]

    alone, together, batches = with_engine(model_dir, body)
    assert batches == 1
    for single, batched, p in zip(alone, together, params):
        assert batched[0].token_ids == single[0].token_ids
        assert len(batched[0].token_ids) == p.max_tokens
        assert batched[0].logprobs == pytest.approx(single[0].logprobs, abs=1e-4)


def test_max_batch_size_splits_rows_into_several_batches(model_dir: str) -> None:
    async def body(engine: TorchEngine) -> tuple[int, list[list[Sample]]]:
        prompt = engine.render_chat("base", MESSAGES, None)
        before = engine.batches_run
        results = await asyncio.gather(
            *(
                engine.sample("base", prompt, 3, SamplingParams(max_tokens=3, seed=i))
                for i in range(3)
            )
        )
        return engine.batches_run - before, list(results)

    batches, results = with_engine(model_dir, body, max_batch_size=4)
    assert batches == 3  # 9 rows, at most 4 per batch
    assert [len(samples) for samples in results] == [3, 3, 3]


def perturbed_checkpoint(model_dir: str, folder: Path) -> Any:
    """The tiny model with noise on every weight, saved as a full-weights checkpoint in
    `folder`; returns the model, to compute reference logprobs with."""
    import torch
    from safetensors.torch import save_model

    changed = load_model(model_dir)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    folder.mkdir()
    save_model(changed, str(folder / "model.safetensors"))
    return changed


def test_full_weight_checkpoints_and_aliases_serve_their_own_weights(
    model_dir: str, tmp_path: Path
) -> None:
    changed = perturbed_checkpoint(model_dir, tmp_path / "step1")

    async def body(engine: TorchEngine) -> tuple[list[int], dict[str, Sample]]:
        await engine.load("agent@1", str(tmp_path / "step1"))
        engine.alias("agent", "agent@1")
        assert engine.served_models() == ["agent", "agent@1", "base"]
        prompt = engine.render_chat("agent", MESSAGES, None)
        params = SamplingParams(max_tokens=8, seed=3)
        out = {
            name: (await engine.sample(name, prompt, 1, params))[0] for name in ("agent", "base")
        }
        await engine.unload("agent@1")
        assert engine.served_models() == ["base"]
        assert not engine.is_served("agent")
        with pytest.raises(UnknownModelError):
            await engine.sample("agent", prompt, 1, params)
        return prompt, out

    prompt, out = with_engine(model_dir, body)
    step1, _ = reference_logprobs(changed, prompt, out["agent"].token_ids)
    base, _ = reference_logprobs(load_model(model_dir), prompt, out["agent"].token_ids)
    assert out["agent"].logprobs == pytest.approx(step1, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(step1, base)) > 1e-3


def test_lora_adapters_share_the_base_and_leave_it_untouched(
    model_dir: str, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model

    adapters = {}
    for seed in (1, 2):
        import torch

        torch.manual_seed(seed)
        peft_model = get_peft_model(
            load_model(model_dir),
            LoraConfig(
                r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
            ),
        )
        peft_model.save_pretrained(str(tmp_path / f"lora{seed}"))
        adapters[seed] = peft_model.eval()

    async def body(engine: TorchEngine) -> tuple[list[int], dict[str, Sample]]:
        prompt = engine.render_chat("base", MESSAGES, None)
        params = SamplingParams(max_tokens=6, seed=9)
        await engine.load("agent@1", str(tmp_path / "lora1"))
        await engine.load("agent@2", str(tmp_path / "lora2"))
        out = {}
        for name in ("agent@1", "agent@2", "base"):
            out[name] = (await engine.sample(name, prompt, 1, params))[0]
        await engine.unload("agent@1")
        await engine.unload("agent@2")  # the last adapter: peft keeps it until the next
        out["base-after"] = (await engine.sample("base", prompt, 1, params))[0]
        await engine.load("agent@3", str(tmp_path / "lora1"))
        out["agent@3"] = (await engine.sample("agent@3", prompt, 1, params))[0]
        return prompt, out

    prompt, out = with_engine(model_dir, body)
    base_model = load_model(model_dir)
    for name, reference in (("agent@1", adapters[1]), ("agent@2", adapters[2])):
        expected, _ = reference_logprobs(reference, prompt, out[name].token_ids)
        assert out[name].logprobs == pytest.approx(expected, abs=1e-4)
    for name in ("base", "base-after"):
        expected, _ = reference_logprobs(base_model, prompt, out[name].token_ids)
        assert out[name].logprobs == pytest.approx(expected, abs=1e-4)
    assert out["agent@3"] == out["agent@1"]
    assert out["agent@1"].logprobs != out["agent@2"].logprobs


def test_bad_requests_are_refused_with_a_clear_error(model_dir: str, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    async def body(engine: TorchEngine) -> None:
        params = SamplingParams(max_tokens=2)
        with pytest.raises(UnknownModelError, match="'nope' is not served"):
            await engine.sample("nope", [1, 2], 1, params)
        with pytest.raises(KeyError):
            engine.render_chat("nope", MESSAGES, None)
        with pytest.raises(InvalidInputError, match="outside the vocabulary"):
            await engine.sample("base", [1, 10**6], 1, params)
        with pytest.raises(InvalidInputError, match="context"):
            await engine.sample("base", [1] * 2000, 1, params)
        with pytest.raises(InvalidInputError, match="empty"):
            await engine.sample("base", [], 1, params)
        with pytest.raises(InvalidInputError, match="n must be"):
            await engine.sample("base", [1], 0, params)
        with pytest.raises(InvalidInputError, match="neither a LoRA adapter"):
            await engine.load("x", str(tmp_path))
        (tmp_path / "lora").mkdir()
        (tmp_path / "lora" / "adapter_config.json").write_text("{broken")
        with pytest.raises(CorruptDataError, match="LoRA adapter"):
            await engine.load("x", str(tmp_path / "lora"))
        (tmp_path / "full").mkdir()
        save_file({"not.a.weight": torch.zeros(2)}, str(tmp_path / "full" / "model.safetensors"))
        with pytest.raises(CorruptDataError, match="do not fit"):
            await engine.load("x", str(tmp_path / "full"))
        with pytest.raises(UnknownModelError):
            engine.alias("a", "missing")
        assert engine.served_models() == ["base"]

    with_engine(model_dir, body)
    with pytest.raises(InvalidInputError):
        SamplingParams(top_p=0)
    with pytest.raises(InvalidInputError):
        SamplingParams(max_tokens=0)
    with pytest.raises(InvalidInputError):
        SamplingParams(top_logprobs=21)
    assert SamplingParams(stop="\n").stop == ("\n",)


def test_a_closed_engine_refuses_work(model_dir: str) -> None:
    async def main() -> None:
        engine = TorchEngine(model_dir)
        await engine.load("base", None)
        prompt = engine.render_chat("base", MESSAGES, None)
        await engine.close()
        with pytest.raises((BackendError, UnknownModelError)):
            await engine.sample("base", prompt, 1, SamplingParams(max_tokens=2))
        with pytest.raises(BackendError, match="closed"):
            await engine.start()

    asyncio.run(main())


def test_unload_lets_accepted_requests_finish_and_refuses_new_ones(model_dir: str) -> None:
    async def body(engine: TorchEngine) -> Sample:
        await engine.load("old", None)
        prompt = engine.render_chat("old", MESSAGES, None)
        accepted = asyncio.ensure_future(
            engine.sample("old", prompt, 1, SamplingParams(max_tokens=20, seed=1))
        )
        await asyncio.sleep(0)  # the request is queued
        unloading = asyncio.ensure_future(engine.unload("old"))
        await asyncio.sleep(0)
        assert not engine.is_served("old")
        with pytest.raises(UnknownModelError):
            await engine.sample("old", prompt, 1, SamplingParams(max_tokens=2))
        sample = (await accepted)[0]
        await unloading
        return sample

    sample = with_engine(model_dir, body)
    assert len(sample.token_ids) > 0


def test_an_engine_keeps_serving_across_event_loops(model_dir: str) -> None:
    engine = TorchEngine(model_dir)
    params = SamplingParams(max_tokens=4, seed=2)

    async def first() -> list[Sample]:
        await engine.load("base", None)
        return await engine.sample("base", engine.render_chat("base", MESSAGES, None), 1, params)

    async def second() -> list[Sample]:
        try:
            prompt = engine.render_chat("base", MESSAGES, None)
            together = await asyncio.gather(
                *(engine.sample("base", prompt, 1, params) for _ in range(2))
            )
            return [samples[0] for samples in together]
        finally:
            await engine.close()

    before = asyncio.run(first())
    after = asyncio.run(second())
    for sample in after:
        assert sample.token_ids == before[0].token_ids
        assert sample.logprobs == pytest.approx(before[0].logprobs, abs=1e-4)


def test_samples_follow_the_tempered_distribution_and_stay_in_the_nucleus(
    model_dir: str,
) -> None:
    import torch

    async def body(engine: TorchEngine) -> tuple[list[int], list[Sample], list[Sample]]:
        prompt = engine.render_chat("base", MESSAGES, None)
        tempered = await engine.sample(
            "base", prompt, 256, SamplingParams(max_tokens=1, temperature=0.2, seed=0)
        )
        nucleus = await engine.sample(
            "base", prompt, 16, SamplingParams(max_tokens=6, top_p=0.05, seed=0)
        )
        return prompt, tempered, nucleus

    prompt, tempered, nucleus = with_engine(model_dir, body)
    model = load_model(model_dir)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1].float()
    expected = torch.softmax(logits / 0.2, dim=-1)
    counts = torch.bincount(
        torch.tensor([s.token_ids[0] for s in tempered]), minlength=expected.numel()
    )
    for token in expected.topk(3).indices.tolist():
        p = expected[token].item()
        sigma = (p * (1 - p) / 256) ** 0.5
        assert abs(counts[token].item() / 256 - p) <= 4 * sigma + 1e-3, (token, p)
    for sample in nucleus:
        _, rows = reference_logprobs(model, prompt, sample.token_ids)
        for position, token in enumerate(sample.token_ids):
            probs = rows[position].exp()
            ordered, ids = probs.sort(descending=True)
            inside = ids[(ordered.cumsum(0) - ordered) < 0.05].tolist()
            assert token in inside


def test_moving_an_alias_lets_requests_in_flight_finish_on_the_weights_they_started_on(
    model_dir: str, tmp_path: Path
) -> None:
    """What a backend does when a step becomes durable: load `agent@1`, move `agent` onto
    it. A request that started on `agent` before the move ends on step 0's weights; the next
    one gets step 1's. No request waits for the move and none sees a mix."""
    changed = perturbed_checkpoint(model_dir, tmp_path / "step1")
    params = SamplingParams(max_tokens=12, seed=5)

    async def body(engine: TorchEngine) -> tuple[list[int], Sample, Sample]:
        await engine.load("agent@0", None)
        engine.alias("agent", "agent@0")
        prompt = engine.render_chat("agent", MESSAGES, None)
        started = asyncio.ensure_future(engine.sample("agent", prompt, 1, params))
        await asyncio.sleep(0)  # the request has resolved its weights and is queued
        await engine.load("agent@1", str(tmp_path / "step1"))
        engine.alias("agent", "agent@1")
        after = (await engine.sample("agent", prompt, 1, params))[0]
        return prompt, (await started)[0], after

    prompt, in_flight, after = with_engine(model_dir, body)
    base, _ = reference_logprobs(load_model(model_dir), prompt, in_flight.token_ids)
    assert in_flight.logprobs == pytest.approx(base, abs=1e-4)
    step1, _ = reference_logprobs(changed, prompt, after.token_ids)
    assert after.logprobs == pytest.approx(step1, abs=1e-4)
    if in_flight.token_ids == after.token_ids:
        assert max(abs(a - b) for a, b in zip(in_flight.logprobs, after.logprobs)) > 1e-3
