"""Each loss TinkerBackend offers trains a step on the tinker emulator, and the loss the
service reports for it equals the loss's documented formula recomputed here with numpy.

The learner's logprobs at the step are the emulator sampler's for the step-0 sampler weights
(the weights the step trains from); the sampler's logprobs and the advantages are the batch's,
zero on the prompt's positions as the datums carry them. Tinker's losses sum over every
position (dro's penalty included); a custom loss sees the completion tokens only.
With the synthetic groups' sampled logprobs far from the tiny model's, the ratios sit outside
every clip interval, so a clip applied wrongly (or not at all) changes the value.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.testing.builders import synthetic_groups

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker import TinkerBackend
from arthex.adapters.tinker.datums import build_batch
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import running_emulator

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("error::FutureWarning:tinker"),
    pytest.mark.filterwarnings("error::DeprecationWarning:tinker"),
]

KEY = "tml-losses"
TIMEOUT_S = 120.0
BETA = 0.3


def custom(logprobs: Any, sampled: Any, advantages: Any) -> Any:
    """A loss of the test's own: advantage-weighted logprobs with a squared-log-ratio leash."""
    return -(logprobs * advantages).sum() + 0.05 * ((logprobs - sampled) ** 2).sum()


def formula(name: str, lp: np.ndarray, q: np.ndarray, a: np.ndarray) -> float:
    """Tinker's documented per-token losses, summed."""
    r = np.exp(lp - q)
    if name == "importance_sampling":
        return float(-(r * a).sum())
    if name == "ppo":
        return float(-np.minimum(r * a, np.clip(r, 0.8, 1.2) * a).sum())
    if name == "cispo":
        return float(-(np.clip(r, 0.0, 5.0) * lp * a).sum())
    if name == "dro":
        return float(-(lp * a - 0.5 * BETA * (lp - q) ** 2).sum())
    return float(-(lp * a).sum() + 0.05 * ((lp - q) ** 2).sum())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    yield from running_emulator(tiny, KEY, tmp_path_factory)


def learner_logprobs(emulator: TinkerEmulator, sampler_path: str, tokens: list[int]) -> list[float]:
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
    try:
        sampler = service.create_sampling_client(model_path=sampler_path).result(TIMEOUT_S)
        values = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result(TIMEOUT_S)
        return [float(v) if v is not None else float("nan") for v in values]
    finally:
        service.close("success").result(TIMEOUT_S)


LOSSES: dict[str, tuple[Any, dict[str, float] | None]] = {
    "importance_sampling": ("importance_sampling", None),
    "ppo": ("ppo", None),
    "cispo": ("cispo", None),
    "dro": ("dro", {"beta": BETA}),
    "custom": (custom, None),
}


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_the_reported_loss_is_the_documented_formula(
    name: str, emulator: TinkerEmulator, tiny: str, tmp_path: Path
) -> None:
    loss_fn, loss_config = LOSSES[name]
    backend = TinkerBackend(
        base_url=emulator.base_url,
        api_key=KEY,
        timeout_s=TIMEOUT_S,
        serve=False,
        loss_fn=loss_fn,
        loss_fn_config=loss_config,
    )
    spec = ModelSpec(RunRef("losses", name), base_model=tiny, base_path=str(tmp_path))
    groups = synthetic_groups(2)
    config = TrainConfig(learning_rate=1e-3)

    async def train() -> dict[str, float]:
        try:
            await backend.register(spec)
            async for metrics in backend.train_steps(spec.run, groups, config):
                return dict(metrics)
            raise AssertionError("no metrics")
        finally:
            await backend.close()

    metrics = asyncio.run(train())
    record = json.loads((tmp_path / "losses" / "models" / name / "tinker-run.json").read_text())
    step0 = next(c for c in record["checkpoints"] if c["step"] == 0)["sampler_path"]
    expected = 0.0
    batch = build_batch(groups, config)
    for part in batch.parts:
        values = learner_logprobs(emulator, step0, list(part.tokens))
        start = part.prompt_length if name == "custom" else 1  # Tinker's: every position
        lp = np.asarray(values[start:], dtype=np.float64)
        pad = np.zeros(part.prompt_length - 1 if start == 1 else 0)
        q = np.concatenate([pad, part.sampled_logprobs.astype(np.float64)])
        a = np.concatenate([pad, part.advantages.astype(np.float64)])
        expected += formula(name, lp, q, a)
    reported = metrics["loss/train"] * metrics["data/step_num_tokens"]
    assert reported == pytest.approx(expected, rel=1e-4, abs=1e-4), (name, reported, expected)


@pytest.mark.parametrize(
    ("loss_fn", "loss_config", "message"),
    [
        ("dro", None, "needs loss_fn_config"),
        ("ppo", {"beta": 0.1}, "do not apply"),
        ("sft", None, "must be one of"),
    ],
)
def test_a_loss_configured_wrongly_is_refused_in_one_line(
    loss_fn: Any, loss_config: dict[str, float] | None, message: str
) -> None:
    with pytest.raises(InvalidInputError, match=message):
        TinkerBackend(loss_fn=loss_fn, loss_fn_config=loss_config, serve=False)


def test_a_custom_loss_takes_no_loss_fn_config() -> None:
    call: Callable[..., Any] = custom
    with pytest.raises(InvalidInputError, match="loss_fn_config"):
        TinkerBackend(loss_fn=call, loss_fn_config={"beta": 1.0}, serve=False)
