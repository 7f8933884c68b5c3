"""A TinkerBackend run leaves Tinker: `model.export()`'s backend call downloads a step's LoRA
adapter through the pinned SDK from the tinker emulator (signed, expiring URLs) and writes a
PEFT folder and a merged Hugging Face model with arthex's export code.

The oracle is the emulator's own sampler: the next-token logprobs it computes for the step's
sampler weights, compared with those of the exported folders loaded by plain transformers/peft
in a process that never imports arthex.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from arthex.core.config import TrainConfig
from arthex.core.errors import CorruptDataError, InvalidInputError
from arthex.core.identity import ModelSpec, RunRef
from arthex.ports.training_backend import ExportFormat
from arthex.testing.builders import synthetic_groups

pytest.importorskip("tinker")
pytest.importorskip("torch")
pytest.importorskip("peft")

from arthex.adapters.tinker import TinkerBackend
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import running_emulator

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("error::FutureWarning:tinker"),
    pytest.mark.filterwarnings("error::DeprecationWarning:tinker"),
]

KEY = "tml-export"
TIMEOUT_S = 120.0
PROMPTS = [[5, 17, 42, 8, 99, 3], [1, 2, 3, 4, 5, 6, 7, 8], [64, 12, 77, 30]]

LOAD = textwrap.dedent(
    """
    import json, sys
    import torch
    from transformers import AutoModelForCausalLM

    kind, folder, base, prompts = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    if kind == "merged":
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    else:
        from peft import PeftModel

        base_model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        model = PeftModel.from_pretrained(base_model, folder)
    model.eval()
    out = []
    with torch.no_grad():
        for tokens in prompts:
            logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            out.append([float(logprobs[i, tokens[i + 1]]) for i in range(len(tokens) - 1)])
    leaked = sorted(name for name in sys.modules if name.split(".")[0] == "arthex")
    print(json.dumps({"logprobs": out, "arthex": leaked}))
    """
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    yield from running_emulator(tiny, KEY, tmp_path_factory)


@pytest.fixture(scope="module")
def trained(
    emulator: TinkerEmulator, tiny: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop]]:
    """A run trained two steps, left open for the tests to export from."""
    base = tmp_path_factory.mktemp("runs")
    spec = ModelSpec(RunRef("export", "agent"), base_model=tiny, base_path=str(base))
    backend = TinkerBackend(
        base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S, serve=False
    )
    loop = asyncio.new_event_loop()

    async def train() -> None:
        from arthex.adapters.parquet.store import ParquetTrajectoryStore

        await ParquetTrajectoryStore(str(base)).write_model_spec(spec)  # as model.register does
        await backend.register(spec)
        for _ in range(2):
            config = TrainConfig(learning_rate=5e-3)
            async for _m in backend.train_steps(spec.run, synthetic_groups(2), config):
                pass

    try:
        loop.run_until_complete(train())
        yield backend, spec, loop
    finally:
        loop.run_until_complete(backend.close())
        loop.close()


def sampler_logprobs(emulator: TinkerEmulator, sampler_path: str) -> list[list[float]]:
    """The emulator's next-token logprobs of each prompt under the step's sampler weights."""
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
    try:
        sampler = service.create_sampling_client(model_path=sampler_path).result(TIMEOUT_S)
        out = []
        for tokens in PROMPTS:
            values = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result(TIMEOUT_S)
            out.append([float(v) for v in values[1:] if v is not None])
        return out
    finally:
        service.close("success").result(TIMEOUT_S)


def load_plainly(kind: str, folder: Path, tiny: str) -> list[list[float]]:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", LOAD, kind, str(folder), tiny, json.dumps(PROMPTS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["arthex"] == []
    logprobs: list[list[float]] = result["logprobs"]
    return logprobs


def export(
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    out: Path,
    fmt: ExportFormat,
    step: int | None = None,
) -> Path:
    backend, spec, loop = trained
    written = loop.run_until_complete(backend.export(spec.run, str(out), step=step, format=fmt))
    return Path(written)


def record_of(trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop]) -> Any:
    spec = trained[1]
    base = Path(spec.base_path or "")
    return json.loads(
        (base / spec.run.project / "models" / spec.run.name / "tinker-run.json").read_text()
    )


def test_the_exported_merged_model_and_adapter_give_the_emulators_logprobs(
    emulator: TinkerEmulator,
    tiny: str,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    merged = export(trained, tmp_path / "merged", "merged")
    adapter = export(trained, tmp_path / "peft", "peft")
    assert (merged / "config.json").is_file() and (merged / "tokenizer_config.json").is_file()
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["r"] == 8 and config["base_model_name_or_path"] == tiny
    checkpoints = {c["step"]: c for c in record_of(trained)["checkpoints"]}
    expected = sampler_logprobs(emulator, checkpoints[2]["sampler_path"])
    base = sampler_logprobs(emulator, checkpoints[0]["sampler_path"])
    # trained away from the base, so equality below says the step's weights were exported
    assert max(abs(a - b) for e, f in zip(expected, base) for a, b in zip(e, f)) > 1e-3
    kinds: list[tuple[ExportFormat, Path]] = [("merged", merged), ("peft", adapter)]
    for kind, folder in kinds:
        got = load_plainly(kind, folder, tiny)
        for want, have in zip(expected, got, strict=True):
            assert len(want) == len(have)
            assert max(abs(a - b) for a, b in zip(want, have)) < 1e-4, (kind, want, have)


def test_an_earlier_step_is_exported_from_its_saved_state(
    emulator: TinkerEmulator,
    tiny: str,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    adapter = export(trained, tmp_path / "peft1", "peft", step=1)
    checkpoints = {c["step"]: c for c in record_of(trained)["checkpoints"]}
    expected = sampler_logprobs(emulator, checkpoints[1]["sampler_path"])
    got = load_plainly("peft", adapter, tiny)
    for want, have in zip(expected, got, strict=True):
        assert max(abs(a - b) for a, b in zip(want, have)) < 1e-4


def test_an_expired_url_is_signed_again(
    emulator: TinkerEmulator,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    def signings() -> int:
        return sum(
            n for r, n in emulator.route_counts.items() if r.endswith("external_weights_urls")
        )

    before = signings()
    emulator.external_weights.faults.expired_signings = 1
    adapter = export(trained, tmp_path / "peft", "peft")
    assert signings() - before == 2
    assert (adapter / "adapter_model.safetensors").is_file()


def test_a_truncated_download_is_refused_and_leaves_no_folder(
    emulator: TinkerEmulator,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    emulator.external_weights.faults.truncated_downloads = 1
    with pytest.raises(CorruptDataError, match="incomplete"):
        export(trained, tmp_path / "merged", "merged")
    emulator.external_weights.faults.truncated_downloads = 0
    assert not (tmp_path / "merged").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # the temporary external weights were deleted on the service
    import tinker

    rest = tinker.RestClient(base_url=emulator.base_url, api_key=KEY)
    run_id = record_of(trained)["training_run_id"]
    listing = rest.list_checkpoints(run_id).result(TIMEOUT_S)
    kinds = {c.checkpoint_type for c in listing.checkpoints}
    assert kinds == {"training", "sampler"}, listing


def test_an_occupied_output_folder_is_refused_before_anything_is_fetched(
    emulator: TinkerEmulator,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    before = emulator.route_counts["POST save_weights_external"]
    with pytest.raises(InvalidInputError, match="not an empty folder"):
        export(trained, tmp_path / "out", "peft")
    assert emulator.route_counts["POST save_weights_external"] == before


def test_arthex_export_downloads_a_tinker_run_without_writing_to_it(
    emulator: TinkerEmulator,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    from safetensors.torch import load_file

    spec = trained[1]
    model_dir = Path(spec.base_path or "") / spec.run.project / "models" / spec.run.name
    before = (model_dir / "tinker-run.json").read_bytes()
    from_backend = export(trained, tmp_path / "backend", "peft", step=1)
    env = {
        **os.environ,
        "TINKER_BASE_URL": emulator.base_url,
        "TINKER_API_KEY": KEY,
        "TINKER_TELEMETRY": "0",
        "OMP_NUM_THREADS": "1",
    }
    out = tmp_path / "cli"
    command = [sys.executable, "-m", "arthex.apps.cli", "export", str(model_dir)]
    done = subprocess.run(
        [*command, "--out", str(out), "--format", "peft", "--step", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"to {out}" in done.stdout
    assert done.stdout.startswith("exported step 1 of "), done.stdout
    # no --step: the run's latest step (2, as the record says), named before it is written
    latest = subprocess.run(
        [*command, "--out", str(tmp_path / "latest"), "--format", "peft"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert latest.returncode == 0, latest.stderr[-3000:]
    assert latest.stdout.startswith("exported step 2 of "), latest.stdout
    for noise in ("Traceback", "Exception ignored", "heartbeat"):
        assert noise not in done.stderr, done.stderr[-3000:]
    got = load_file(str(out / "adapter_model.safetensors"))
    want = load_file(str(from_backend / "adapter_model.safetensors"))
    assert sorted(got) == sorted(want)
    assert all(bool((got[k] == want[k]).all()) for k in want)
    assert (model_dir / "tinker-run.json").read_bytes() == before


def test_a_family_arthex_cannot_merge_is_refused_in_one_line_before_anything_is_fetched(
    emulator: TinkerEmulator,
    trained: tuple[TinkerBackend, ModelSpec, asyncio.AbstractEventLoop],
    tmp_path: Path,
) -> None:
    """A run on a MoE base (its config.json alone, made here: the refusal comes before any
    weights are loaded) is not merged; its PEFT export is not refused."""
    import shutil

    from arthex.adapters.tinker.download import export_run

    moe = tmp_path / "qwen3-moe"
    moe.mkdir()
    config = {"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"]}
    (moe / "config.json").write_text(json.dumps(config))
    spec, loop = trained[1], trained[2]
    model_dir = tmp_path / "run"
    shutil.copytree(
        Path(spec.base_path or "") / spec.run.project / "models" / spec.run.name, model_dir
    )
    record = json.loads((model_dir / "tinker-run.json").read_text())
    (model_dir / "tinker-run.json").write_text(json.dumps({**record, "base_model": str(moe)}))

    def run_export(out: Path, fmt: ExportFormat) -> Path:
        done = export_run(
            model_dir, out, format=fmt, base_url=emulator.base_url, api_key=KEY, timeout_s=TIMEOUT_S
        )
        return loop.run_until_complete(done)

    saves = "POST save_weights_external"
    before = emulator.route_counts[saves]
    with pytest.raises(InvalidInputError) as refused:
        run_export(tmp_path / "merged", "merged")
    message = str(refused.value)
    assert "\n" not in message
    assert "qwen3_moe" in message and 'format="peft"' in message
    assert not (tmp_path / "merged").exists()
    assert emulator.route_counts[saves] == before
    # the PEFT format is not refused: the adapter is fetched (and then found to be one of the
    # emulator's base model, not of the config made here, which is this test's doing)
    with pytest.raises(CorruptDataError, match="is an adapter of"):
        run_export(tmp_path / "peft", "peft")
    assert emulator.route_counts[saves] == before + 1
    assert not (tmp_path / "peft").exists()


def test_an_adapter_peft_cannot_apply_is_refused_in_one_line(tiny: str, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    from arthex.adapters.local.export import export_adapter

    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": 2,
        "lora_alpha": 4,
        "target_modules": ["experts_proj"],
        "base_model_name_or_path": tiny,
    }
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    key = "base_model.model.model.layers.0.mlp.experts_proj.lora_A.weight"
    save_file({key: torch.zeros(2, 8)}, str(adapter / "adapter_model.safetensors"))
    with pytest.raises(CorruptDataError, match="cannot apply the LoRA adapter") as refused:
        export_adapter(adapter, tiny, tmp_path / "merged", format="merged")
    assert "\n" not in str(refused.value) and "experts_proj" in str(refused.value)
    assert not (tmp_path / "merged").exists()
