"""LocalBackend on the tiny model, on CPU: training, checkpoints, resume, deletion, serving,
and the learning signal measured through the inference server."""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

from safetensors.torch import load_file

from arthex.adapters.local import LocalBackend
from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError, NotRegisteredError
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.ports.training_backend import InferenceEndpoint
from arthex.testing.builders import synthetic_groups
from arthex.testing.contracts.scenario import openai_client_for, rollout_groups
from arthex.testing.tiny_model import tiny_model

pytestmark = pytest.mark.e2e

T = TypeVar("T")
RUN = RunRef("proj", "agent")
CONFIG = TrainConfig(learning_rate=1e-3)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def spec_for(base_model: str, root: Path, run: RunRef = RUN) -> ModelSpec:
    return ModelSpec(run=run, base_model=base_model, base_path=str(root))


def with_backend(
    backend: LocalBackend,
    spec: ModelSpec,
    body: Callable[[LocalBackend, InferenceEndpoint], Awaitable[T]],
) -> T:
    async def main() -> T:
        try:
            endpoint = await backend.register(spec)
            assert endpoint is not None
            return await body(backend, endpoint)
        finally:
            await backend.close()

    return asyncio.run(main())


async def train(
    backend: LocalBackend,
    groups: list[TrajectoryGroup],
    config: TrainConfig = CONFIG,
    run: RunRef = RUN,
) -> list[dict[str, float]]:
    return [dict(m) async for m in backend.train_steps(run, groups, config)]


def checkpoint(root: Path, step: int, run: RunRef = RUN) -> Path:
    return root / run.project / "models" / run.name / "checkpoints" / f"{step:04d}"


async def served(endpoint: InferenceEndpoint) -> set[str]:
    async with openai_client_for(endpoint) as client:
        return {m.id async for m in client.models.list()}


def same_tensors(a: dict[str, Any], b: dict[str, Any]) -> bool:
    import torch

    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# --- serving and layout --------------------------------------------------------------------


def test_register_saves_step_zero_and_serves_it_with_token_ids(
    base_model: str, tmp_path: Path
) -> None:
    async def body(b: LocalBackend, endpoint: InferenceEndpoint) -> tuple[set[str], Any]:
        async with openai_client_for(endpoint) as client:
            response = await client.chat.completions.create(
                model="agent@0",
                messages=[{"role": "user", "content": "hi"}],
                max_tokens=4,
                logprobs=True,
            )
        return await served(endpoint), response.choices[0]

    names, choice = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert {"agent", "agent@0"} <= names
    extra = choice.model_extra or {}
    assert extra["prompt_token_ids"] and len(extra["token_ids"]) == len(choice.logprobs.content)
    zero = checkpoint(tmp_path, 0)
    assert sorted(p.name for p in zero.iterdir()) == [
        "model.safetensors",
        "optimizer.json",
        "optimizer.safetensors",
        "trainer_state.json",
    ]
    state = json.loads((zero / "trainer_state.json").read_text())
    assert state["step"] == 0 and state["mode"] == "full" and state["base_model"] == base_model
    # step 0 is the base weights
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(base_model).state_dict()
    saved = load_file(str(zero / "model.safetensors"))
    assert same_tensors({k: base[k] for k in saved}, saved)


def test_train_writes_the_next_checkpoint_and_serves_it(base_model: str, tmp_path: Path) -> None:
    async def body(b: LocalBackend, endpoint: InferenceEndpoint) -> Any:
        groups = await rollout_groups(endpoint, "agent")
        metrics = await train(b, groups)
        async with openai_client_for(endpoint) as client:
            prompt: list[Any] = [{"role": "user", "content": "Count to 3."}]
            at = {}
            for name in ("agent@0", "agent@1", "agent"):
                r = await client.chat.completions.create(
                    model=name,
                    messages=prompt,
                    max_tokens=5,
                    temperature=0,
                    logprobs=True,
                )
                at[name] = [t.logprob for t in r.choices[0].logprobs.content]  # type: ignore[union-attr]
        return metrics, await b.get_step(RUN), await served(endpoint), at

    metrics, step, names, logprobs = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert step == 1
    assert {"agent", "agent@0", "agent@1"} <= names
    assert len(metrics) == 1  # default: every row in one optimizer step
    m = metrics[0]
    for key in (
        "loss/train",
        "loss/grad_norm",
        "loss/learning_rate",
        "loss/entropy",
        "loss/importance_ratio_mean",
        "loss/importance_ratio_p95",
        "loss/clipped_token_fraction",
        "data/step_num_tokens",
        "data/step_num_sequences",
        "data/step_num_dropped_too_long",
    ):
        assert key in m and math.isfinite(m[key]), key
    assert m["loss/learning_rate"] == 1e-3
    assert m["data/step_num_sequences"] == 8 and m["data/step_num_groups_trainable"] == 2
    # the sampler's logprobs and the trainer's agree: the first step's ratios are 1
    assert m["loss/importance_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
    assert m["loss/importance_ratio_p99"] == pytest.approx(1.0, abs=1e-4)
    # `agent` is step 1, which differs from step 0
    assert logprobs["agent"] == logprobs["agent@1"] != logprobs["agent@0"]
    one = checkpoint(tmp_path, 1)
    assert json.loads((one / "trainer_state.json").read_text())["step"] == 1
    w0 = load_file(str(checkpoint(tmp_path, 0) / "model.safetensors"))
    w1 = load_file(str(one / "model.safetensors"))
    assert not same_tensors(w0, w1)
    opt = load_file(str(one / "optimizer.safetensors"))
    assert any(k.endswith(".exp_avg_sq") for k in opt) and any(k.endswith(".step") for k in opt)


def test_grad_accumulation_makes_one_step_per_k_rows(base_model: str, tmp_path: Path) -> None:
    async def body(b: LocalBackend, _: InferenceEndpoint) -> list[dict[str, float]]:
        return await train(
            b,
            synthetic_groups(2, 4),
            TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=3),
        )

    metrics = with_backend(LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body)
    assert [m["data/step_num_sequences"] for m in metrics] == [3, 3, 2]
    assert all(m["data/step_num_gradient_steps"] == 3 for m in metrics)


# --- resume --------------------------------------------------------------------------------


def test_restart_resumes_with_the_optimizer_state_bitwise(base_model: str, tmp_path: Path) -> None:
    batches = [synthetic_groups(2, 4, offset=i) for i in range(3)]

    async def first_two(b: LocalBackend, _: InferenceEndpoint) -> None:
        for groups in batches[:2]:
            await train(b, groups)

    async def third(b: LocalBackend, _: InferenceEndpoint) -> tuple[int, bool, bool]:
        step = await b.get_step(RUN)
        live, live_opt = b.training_tensors(RUN)  # the live optimizer, not a file
        saved_opt = load_file(str(checkpoint(resumed, 2) / "optimizer.safetensors"))
        saved_w = load_file(str(checkpoint(resumed, 2) / "model.safetensors"))
        opt_equal = same_tensors(live_opt, saved_opt)
        w_equal = same_tensors(live, {k: saved_w[k] for k in live})
        await train(b, batches[2])
        return step, opt_equal, w_equal

    async def all_three(b: LocalBackend, _: InferenceEndpoint) -> None:
        for groups in batches:
            await train(b, groups)

    resumed, straight = tmp_path / "resumed", tmp_path / "straight"
    with_backend(LocalBackend(full_finetune=True), spec_for(base_model, resumed), first_two)
    step, opt_equal, w_equal = with_backend(LocalBackend(), spec_for(base_model, resumed), third)
    with_backend(LocalBackend(full_finetune=True), spec_for(base_model, straight), all_three)
    assert step == 2 and opt_equal and w_equal
    for name in ("model.safetensors", "optimizer.safetensors"):
        a = load_file(str(checkpoint(resumed, 3) / name))
        b = load_file(str(checkpoint(straight, 3) / name))
        assert same_tensors(a, b), f"{name} differs between resumed and uninterrupted runs"


def test_restart_cleans_temp_folders_and_ignores_incomplete_ones(
    base_model: str, tmp_path: Path
) -> None:
    async def nothing(b: LocalBackend, _: InferenceEndpoint) -> None:
        return None

    async def step_now(b: LocalBackend, _: InferenceEndpoint) -> tuple[int, list[int]]:
        return await b.get_step(RUN), await b.checkpoint_steps(RUN)

    spec = spec_for(base_model, tmp_path)
    with_backend(LocalBackend(full_finetune=True), spec, nothing)
    root = checkpoint(tmp_path, 0).parent
    (root / ".tmp-0001.123.abcd").mkdir()
    (root / ".tmp-0001.123.abcd" / "model.safetensors").write_bytes(b"half")
    (root / "0007").mkdir()  # no trainer_state.json: not a checkpoint
    step, steps = with_backend(LocalBackend(), spec, step_now)
    assert step == 0 and steps == [0]
    assert not list(root.glob(".tmp-*"))


def test_resume_refuses_another_fine_tuning_mode(base_model: str, tmp_path: Path) -> None:
    async def nothing(b: LocalBackend, _: InferenceEndpoint) -> None:
        return None

    spec = spec_for(base_model, tmp_path)
    with_backend(LocalBackend(full_finetune=True), spec, nothing)
    with pytest.raises(InvalidInputError, match="full_finetune=True"):
        with_backend(LocalBackend(full_finetune=False), spec, nothing)


def test_lora_trains_saves_the_adapter_serves_and_resumes(base_model: str, tmp_path: Path) -> None:
    async def one(b: LocalBackend, endpoint: InferenceEndpoint) -> set[str]:
        await train(b, synthetic_groups(2, 4), TrainConfig(learning_rate=1e-2))
        return await served(endpoint)

    async def two(b: LocalBackend, endpoint: InferenceEndpoint) -> tuple[int, bool, set[str]]:
        _, live_opt = b.training_tensors(RUN)
        saved = load_file(str(checkpoint(tmp_path, 1) / "optimizer.safetensors"))
        equal = same_tensors(live_opt, saved)
        await train(b, synthetic_groups(2, 4, offset=1), TrainConfig(learning_rate=1e-2))
        return await b.get_step(RUN), equal, await served(endpoint)

    spec = spec_for(base_model, tmp_path)
    names = with_backend(LocalBackend(full_finetune=False, lora_rank=4), spec, one)
    assert {"agent", "agent@1"} <= names
    files = {p.name for p in checkpoint(tmp_path, 1).iterdir()}
    assert {"adapter_config.json", "adapter_model.safetensors", "optimizer.safetensors"} <= files
    assert "model.safetensors" not in files
    state = json.loads((checkpoint(tmp_path, 1) / "trainer_state.json").read_text())
    assert state["mode"] == "lora" and state["lora"]["rank"] == 4
    adapter0 = load_file(str(checkpoint(tmp_path, 0) / "adapter_model.safetensors"))
    adapter1 = load_file(str(checkpoint(tmp_path, 1) / "adapter_model.safetensors"))
    assert adapter0.keys() == adapter1.keys() and not same_tensors(adapter0, adapter1)
    step, equal, names = with_backend(LocalBackend(lora_rank=4), spec, two)
    assert step == 2 and equal and "agent@2" in names


# --- skip, delete, concurrency, bad input ----------------------------------------------------


def test_nothing_trainable_copies_the_checkpoint(base_model: str, tmp_path: Path) -> None:
    async def body(b: LocalBackend, endpoint: InferenceEndpoint) -> Any:
        metrics = await train(b, synthetic_groups(2, 4, equal=True))
        return metrics, await b.get_step(RUN), await served(endpoint)

    metrics, step, names = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert step == 1 and "agent@1" in names
    assert metrics == [
        {
            "data/step_num_groups_trainable": 0.0,
            "data/step_num_dropped_too_long": 0.0,
            "data/step_num_gradient_steps": 0.0,
            "data/step_num_tokens": 0.0,
            "data/step_num_sequences": 0.0,
        }
    ]
    for name in ("model.safetensors", "optimizer.safetensors", "optimizer.json"):
        a = (checkpoint(tmp_path, 0) / name).read_bytes()
        assert a == (checkpoint(tmp_path, 1) / name).read_bytes()
    assert json.loads((checkpoint(tmp_path, 1) / "trainer_state.json").read_text())["step"] == 1


def test_delete_removes_exactly_the_unkept_never_latest_or_pinned(
    base_model: str, tmp_path: Path
) -> None:
    async def body(b: LocalBackend, endpoint: InferenceEndpoint) -> Any:
        for _ in range(4):  # copies are cheap: steps 1..4
            await train(b, synthetic_groups(1, 2, equal=True))
        async with b.pin(RUN, 2):
            first = await b.delete_checkpoint_files(RUN, {1})
            names = await served(endpoint)
        second = await b.delete_checkpoint_files(RUN, set())
        return first, names, second, await b.checkpoint_steps(RUN), await served(endpoint)

    first, names, second, steps, names_after = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert first == [0, 3]  # 1 kept, 2 pinned, 4 latest
    assert "agent@0" not in names and "agent@3" not in names and "agent@2" in names
    assert second == [1, 2]
    assert steps == [4]
    assert names_after == {"agent", "agent@4"}
    assert [p.name for p in checkpoint(tmp_path, 0).parent.iterdir()] == ["0004"]


def test_deleting_a_step_being_sampled_keeps_its_folder_until_its_requests_end(
    base_model: str, tmp_path: Path
) -> None:
    """An engine may read a served step's files while sampling it (vLLM reloads an evicted
    adapter from its folder): the folder is deleted only once the step's requests ended."""
    from arthex.adapters.inference.engine import SamplingParams

    async def body(b: LocalBackend, endpoint: InferenceEndpoint) -> Any:
        await train(b, synthetic_groups(1, 2, equal=True))  # steps 0 and 1, both served
        run = b._runs.get(RUN)
        assert run is not None
        engine = run.serving.engine
        prompt = engine.render_chat("agent@0", [{"role": "user", "content": "count"}], None)
        params = SamplingParams(max_tokens=300, temperature=1.0, seed=3)
        sampling = asyncio.create_task(engine.sample("agent@0", prompt, 8, params))
        await asyncio.sleep(0)  # the request is accepted (counted on its weights) here
        deleting = asyncio.create_task(b.delete_checkpoint_files(RUN, set()))
        checks_while_sampling = 0
        while not sampling.done():
            checks_while_sampling += 1
            assert checkpoint(tmp_path, 0).is_dir(), "step 0 deleted while being sampled"
            await asyncio.sleep(0.005)
        samples = await sampling
        deleted = await deleting
        return checks_while_sampling, samples, deleted, await served(endpoint)

    checks, samples, deleted, names = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert checks > 1  # the delete ran while the request was in flight
    assert len(samples) == 8
    assert deleted == [0]
    assert not checkpoint(tmp_path, 0).exists()
    assert names == {"agent", "agent@1"}


def test_concurrent_train_calls_never_interleave(base_model: str, tmp_path: Path) -> None:
    spans: dict[int, tuple[float, float]] = {}

    async def one(b: LocalBackend, offset: int) -> None:
        start: float | None = None
        async for _m in b.train_steps(
            RUN,
            synthetic_groups(2, 4, offset=offset),
            TrainConfig(learning_rate=1e-3, grad_accumulation_sequences=2),
        ):
            start = time.monotonic() if start is None else start
        assert start is not None
        spans[offset] = (start, time.monotonic())

    async def body(b: LocalBackend, _: InferenceEndpoint) -> list[int]:
        await asyncio.gather(one(b, 0), one(b, 1))
        return await b.checkpoint_steps(RUN)

    steps = with_backend(LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body)
    assert steps == [0, 1, 2]
    (a0, a1), (b0, b1) = spans[0], spans[1]
    assert a1 <= b0 or b1 <= a0, f"train calls overlapped: {spans}"


def test_bad_input_is_refused_before_anything_is_written(base_model: str, tmp_path: Path) -> None:
    async def body(b: LocalBackend, _: InferenceEndpoint) -> tuple[int, list[int]]:
        bad = synthetic_groups(1, 2)
        choice = bad[0].trajectories[1].messages_and_choices[1]
        del choice.model_extra["token_ids"]  # type: ignore[union-attr]
        with pytest.raises(InvalidInputError, match="group 0, trajectory 1, choice 0"):
            await train(b, bad)
        with pytest.raises(InvalidInputError, match="kl_penalty_reference_step=5"):
            await train(
                b, synthetic_groups(), TrainConfig(kl_penalty_coef=0.1, kl_penalty_reference_step=5)
            )
        with pytest.raises(NotRegisteredError):
            await b.get_step(RunRef("proj", "other"))
        return await b.get_step(RUN), await b.checkpoint_steps(RUN)

    step, steps = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    assert step == 0 and steps == [0]


def test_kl_penalty_reports_the_divergence_from_the_reference(
    base_model: str, tmp_path: Path
) -> None:
    async def body(b: LocalBackend, _: InferenceEndpoint) -> list[list[dict[str, float]]]:
        config = TrainConfig(learning_rate=1e-2, kl_penalty_coef=0.5)
        out = [await train(b, synthetic_groups(2, 4, offset=i), config) for i in range(2)]
        at_zero = TrainConfig(learning_rate=1e-2, kl_penalty_coef=0.5, kl_penalty_reference_step=0)
        out.append(await train(b, synthetic_groups(2, 4, offset=2), at_zero))
        return out

    first, second, third = with_backend(
        LocalBackend(full_finetune=True), spec_for(base_model, tmp_path), body
    )
    # step 0 is the base: no divergence yet; after an update there is some
    assert first[0]["loss/kl_policy_ref"] == pytest.approx(0.0, abs=1e-6)
    assert second[0]["loss/kl_policy_ref"] != pytest.approx(0.0, abs=1e-6)
    # reference = checkpoint 0 = the base weights: the same divergence measure as the base
    assert math.isfinite(third[0]["loss/kl_policy_ref"])
    assert third[0]["loss/kl_policy_ref"] != pytest.approx(0.0, abs=1e-6)


def test_a_register_that_failed_to_serve_leaves_its_name_free_for_the_retry(
    base_model: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second run of the same base model shares the first one's engine and server. When
    its first register fails to serve its step, the retry lands on that same server, not on
    a second engine started because the failed attempt still held the name."""
    from arthex.adapters.inference.engine_pool import ServingPool
    from arthex.core.errors import BackendError

    other = RunRef("proj", "other")
    real = ServingPool.serve_step
    failures = [BackendError("checkpoint 0 is saved but could not be served: engine failed")]

    async def fails_once(pool: ServingPool, *args: Any) -> None:
        if failures:
            raise failures.pop()
        await real(pool, *args)

    async def body(b: LocalBackend, first: InferenceEndpoint) -> tuple[str, str]:
        monkeypatch.setattr(ServingPool, "serve_step", fails_once)
        with pytest.raises(BackendError, match="could not be served"):
            await b.register(spec_for(base_model, tmp_path, other))
        retry = await b.register(spec_for(base_model, tmp_path, other))
        assert retry is not None
        return first.base_url, retry.base_url

    first_url, retry_url = with_backend(LocalBackend(), spec_for(base_model, tmp_path), body)
    assert retry_url == first_url


# --- forgetting a run ----------------------------------------------------------------------


def test_forget_run_unserves_the_run_and_registering_it_again_loads_it_from_its_files(
    base_model: str, tmp_path: Path
) -> None:
    """forget_run (what the training server calls when it deletes a model): none of the run's
    names are served, another run on the same engine keeps its own, and the run registered
    again is opened from its files on the same engine (its name was given back, so no second
    engine starts), its trainer loaded from the latest checkpoint. A run served read-only
    (serve_checkpoint, no trainer) is unserved the same way."""
    other_run = RunRef("proj", "other")

    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        backend = LocalBackend(full_finetune=True)
        try:
            endpoint = await backend.register(spec_for(base_model, tmp_path))
            other = await backend.register(spec_for(base_model, tmp_path, other_run))
            assert endpoint is not None and other is not None
            await train(backend, synthetic_groups())
            trained = backend.training_tensors(RUN)[0]
            await backend.forget_run(RUN)
            seen["after_forget"] = await served(endpoint)
            with pytest.raises(NotRegisteredError):
                backend.training_tensors(RUN)
            again = await backend.register(spec_for(base_model, tmp_path))
            assert again is not None
            seen["same_engine"] = again.base_url == endpoint.base_url
            seen["again"] = await served(again)
            seen["weights_from_files"] = same_tensors(backend.training_tensors(RUN)[0], trained)
            seen["step"] = await backend.get_step(RUN)
        finally:
            await backend.close()
        reader = LocalBackend(full_finetune=True)
        try:
            async with reader.serve_checkpoint(spec_for(base_model, tmp_path), 1) as one:
                seen["read_only"] = await served(one.endpoint)
            await reader.forget_run(RUN)
            seen["read_only_after"] = await served(one.endpoint)
        finally:
            await reader.close()
        return seen

    seen = asyncio.run(main())
    assert seen["after_forget"] == {"other", "other@0"}
    assert seen["same_engine"]
    assert seen["again"] == {"agent", "agent@1", "other", "other@0"}  # register serves the latest
    assert seen["weights_from_files"] and seen["step"] == 1
    assert "agent@1" in seen["read_only"]
    assert seen["read_only_after"] == set()
