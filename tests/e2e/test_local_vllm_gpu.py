"""LocalBackend with the vLLM engine on one CUDA GPU (skipped without a GPU or without vLLM):
`pytest -m gpu tests/e2e/test_local_vllm_gpu.py` on such a machine. The engine's own checks
(logprobs against peft, stop strings, freeing the GPU) are in benchmarks/gpu/vllm_smoke.py.

The tiny model at its "3M" size (head dimension 64, which vLLM's attention kernels take),
written locally: no hub download. Below 50M parameters the torch engine would fully
fine-tune; with vLLM the run trains LoRA, which is what vLLM serves.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fastapi")

from arthex.adapters.inference.vllm_args import SleepLevel  # noqa: E402
from arthex.adapters.local import LocalBackend  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.core.identity import ModelSpec, RunRef  # noqa: E402
from arthex.testing.builders import synthetic_groups  # noqa: E402
from arthex.testing.contracts.scenario import openai_client_for  # noqa: E402
from arthex.testing.tiny_model import tiny_model  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.e2e,
    pytest.mark.skipif(
        not torch.cuda.is_available() or importlib.util.find_spec("vllm") is None,
        reason="needs a CUDA GPU and vLLM (pip install 'arthex[vllm]')",
    ),
]
RUN = RunRef("proj", "agent")
KNOBS: dict[str, Any] = {
    "gpu_memory_utilization": 0.3,
    "max_model_len": 512,
    "enforce_eager": True,
    "max_num_seqs": 16,
}


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model", size="3M")


def _step(root: Path, step: int) -> Path:
    return root / RUN.project / "models" / RUN.name / "checkpoints" / f"{step:04d}"


async def _sample(backend: LocalBackend, base_model: str, root: Path) -> dict[str, Any]:
    endpoint = await backend.register(ModelSpec(RUN, base_model=base_model, base_path=str(root)))
    assert endpoint is not None
    config = TrainConfig(learning_rate=1e-2)
    metrics = [dict(m) async for m in backend.train_steps(RUN, synthetic_groups(2, 4), config)]
    async with openai_client_for(endpoint) as client:
        names = {m.id async for m in client.models.list()}
        answers = {}
        for name in ("agent@0", "agent@1"):
            response = await client.chat.completions.create(
                model=name,
                messages=[{"role": "user", "content": "Count to 3."}],
                max_tokens=8,
                temperature=0,
                logprobs=True,
            )
            choice = response.choices[0]
            assert choice.logprobs is not None and choice.logprobs.content is not None
            answers[name] = {
                "finish": choice.finish_reason,
                "logprobs": [t.logprob for t in choice.logprobs.content],
            }
    return {"metrics": metrics, "names": names, "answers": answers}


@pytest.mark.parametrize("sleep_level", [0, 1, 2])
def test_register_train_and_serve_over_http_on_one_gpu(
    base_model: str, tmp_path: Path, sleep_level: SleepLevel
) -> None:
    async def main() -> dict[str, Any]:
        backend = LocalBackend(
            str(tmp_path), engine="vllm", device="cuda:0", vllm_sleep_level=sleep_level, **KNOBS
        )
        async with backend:
            return await _sample(backend, base_model, tmp_path)

    out = asyncio.run(main())
    assert len(out["metrics"]) >= 1
    assert {"agent", "agent@0", "agent@1"} <= out["names"]
    for name in ("agent@0", "agent@1"):
        answer = out["answers"][name]
        assert answer["finish"] in ("stop", "length")
        assert answer["logprobs"] and all(lp <= 0.0 for lp in answer["logprobs"])
    # the tiny model (< 50M parameters) trained LoRA, since vLLM serves adapters
    for step in (0, 1):
        assert (_step(tmp_path, step) / "adapter_config.json").is_file()
    config = json.loads((_step(tmp_path, 1) / "adapter_config.json").read_text())
    assert config["r"] == 8


def test_the_lora_rank_in_use_sets_vllms_max_lora_rank(base_model: str, tmp_path: Path) -> None:
    """Rank 128 was refused at every served step when max_lora_rank was fixed at 64."""

    async def main() -> dict[str, Any]:
        backend = LocalBackend(str(tmp_path), engine="vllm", lora_rank=128, lora_alpha=256, **KNOBS)
        async with backend:
            return await _sample(backend, base_model, tmp_path)

    out = asyncio.run(main())
    assert {"agent@0", "agent@1"} <= out["names"]
    config = json.loads((_step(tmp_path, 1) / "adapter_config.json").read_text())
    assert config["r"] == 128
