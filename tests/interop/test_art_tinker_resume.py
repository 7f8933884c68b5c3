"""A Tinker run that one of ART 0.5.23's own Tinker backends trained goes on under arthex's
TinkerBackend.

ART's backend runs in the venv that has ART, tinker and tinker-cookbook (art_tinker_env.py),
against the tinker emulator on the tiny model (art/tinker_run_script.py): it registers a model
and trains one step. `TinkerNativeBackend` (with `save_checkpoint=True`) leaves `state.json`
as ART writes it (`tinker_run_ids`, `latest_step`) and its checkpoints `step_000001` on the
service; `TinkerBackend` leaves `checkpoints/0000` and `0001`, each an `info.yaml` naming its
state and sampler paths. arthex's TinkerBackend then registers the same model directory: it
reports ART's step, records ART's checkpoints in its own `tinker-run.json`, serves ART's step 1
(the oracle: the SDK's `compute_logprobs` on the sampler path ART saved), trains step 2 from
ART's state, and leaves ART's files as they were.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from arthex.adapters.tinker import TinkerBackend
from arthex.art.tinker_native import backend as art_backend
from arthex.core.config import TrainConfig
from arthex.core.identity import ModelSpec, RunRef
from arthex.core.trajectories import TrajectoryGroup
from arthex.emulators.tinker import TinkerEmulator
from tests._tinker import (
    PREFERENCE_BAD,
    PREFERENCE_GOOD,
    PREFERENCE_PROMPT,
    preference_group,
    running_emulator,
)

from .art_env import SCRIPTS, art_environment
from .art_tinker_env import art_tinker_python

pytestmark = [pytest.mark.e2e]

KEY = "tml-art-resume"
TIMEOUT_S = 120.0
RANK = 8
PROMPT, GOOD, BAD = PREFERENCE_PROMPT, PREFERENCE_GOOD, PREFERENCE_BAD
LEARN = TrainConfig(learning_rate=1e-3)  # a small step: step 2 stays near the step it left


@pytest.fixture(scope="module")
def emulator(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerEmulator]:
    yield from running_emulator(tiny, None, tmp_path_factory)


def arts_run(emulator: TinkerEmulator, tiny: str, art_path: Path, backend: str) -> dict[str, Any]:
    """One step of ART's `backend` ("native" or "tinker"); what it left."""
    cases = {
        "backend": backend, "art_path": str(art_path), "project": "resume", "name": "agent",
        "run_name": "run-1", "base_model": tiny, "renderer": "role_colon", "rank": RANK,
        "prompt": "hello there", "prompt_tokens": PROMPT, "completions": [GOOD, BAD],
        "rewards": [1.0, 0.0], "learning_rate": 5e-2,
    }  # fmt: skip
    env = {
        **art_environment(), "TINKER_BASE_URL": emulator.base_url, "TINKER_API_KEY": KEY,
        "TINKER_TELEMETRY": "0", "OMP_NUM_THREADS": "1",
    }  # fmt: skip
    done = subprocess.run(
        [str(art_tinker_python()), str(SCRIPTS / "tinker_run_script.py")],
        input=json.dumps(cases), capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-6000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["step"] == result["get_step"] == 1
    return result


def sdk_logprobs(emulator: TinkerEmulator, path: str, tokens: list[int]) -> list[float | None]:
    """The service's scores of `tokens` under `path`, through the SDK, not arthex."""
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=emulator.base_url, api_key=KEY)
    try:
        sampler = service.create_sampling_client(model_path=path).result(TIMEOUT_S)
        return list(sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result(TIMEOUT_S))
    finally:
        service.close("success").result(TIMEOUT_S)


def preference() -> list[TrajectoryGroup]:
    return preference_group(1)


def scores(emulator: TinkerEmulator, path: str) -> list[float]:
    """The service's logprobs under `path` of the prompt and both answers, token by token."""
    found = sdk_logprobs(emulator, path, [*PROMPT, *GOOD, *BAD])[1:]
    assert all(v is not None for v in found)
    return [float(v or 0.0) for v in found]


def distance(a: list[float], b: list[float]) -> float:
    return sum(abs(x - y) for x, y in zip(a, b, strict=True))


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def continue_with_arthex(
    emulator: TinkerEmulator, tiny: str, art_path: Path, art_steps: list[dict[str, Any]]
) -> None:
    """arthex's TinkerBackend registers the model directory ART left, whose steps 0 and 1 are
    `art_steps` (`step`, `sampler_path`, `state_path`), and continues it."""
    model_dir = art_path / "resume" / "models" / "run-1"
    assert not (model_dir / "tinker-run.json").exists()
    left_by_art = files(model_dir)
    spec = ModelSpec(RunRef("resume", "run-1"), base_model=tiny, base_path=str(art_path))
    backend = TinkerBackend(
        base_url=emulator.base_url, api_key=KEY, lora_rank=RANK, timeout_s=TIMEOUT_S
    )

    async def scenario() -> dict[str, Any]:
        import openai

        try:
            endpoint = await backend.register(spec)
            assert endpoint is not None
            step = await backend.get_step(spec.run)
            adopted = json.loads((model_dir / "tinker-run.json").read_text())
            client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key)
            answer = await client.chat.completions.create(
                model=f"{endpoint.model_name}@1",
                messages=[{"role": "user", "content": "hello"}],
                max_tokens=4,
                temperature=0,
                logprobs=True,
            )
            async for _m in backend.train_steps(spec.run, preference(), LEARN):
                pass
            after = await backend.get_step(spec.run)
            return {"step": step, "adopted": adopted, "answer": answer, "after": after}
        finally:
            await backend.close()

    out = asyncio.run(scenario())
    assert out["step"] == 1 and out["after"] == 2
    adopted = out["adopted"]
    art_run = art_steps[1]["state_path"].removeprefix("tinker://").split("/")[0]
    assert adopted["step"] == 1 and adopted["lora_rank"] == RANK
    assert adopted["training_run_id"] != art_run  # a training client resumed from ART's state
    assert adopted["checkpoints"] == art_steps

    # arthex serves ART's step 1: its scores are the service's on ART's sampler path
    choice = out["answer"].choices[0]
    extra = choice.model_extra or {}
    prompt, tokens = list(extra["prompt_token_ids"]), list(extra["token_ids"])
    served = [entry.logprob for entry in choice.logprobs.content]
    oracle = sdk_logprobs(emulator, art_steps[1]["sampler_path"], prompt + tokens)[len(prompt) :]
    assert len(served) == len(oracle) == len(tokens)
    assert all(e is not None and abs(s - e) <= 2e-4 for s, e in zip(served, oracle, strict=True))

    # step 2 was trained from ART's step 1 state, in a training run of arthex's
    record = json.loads((model_dir / "tinker-run.json").read_text())
    assert record["step"] == 2 and [c["step"] for c in record["checkpoints"]] == [0, 1, 2]
    newest = record["checkpoints"][2]
    assert newest["sampler_path"].startswith(f"tinker://{adopted['training_run_id']}/")
    assert record["checkpoints"][:2] == art_steps
    paths = [art_steps[0]["sampler_path"], art_steps[1]["sampler_path"], newest["sampler_path"]]
    before, art_step, ours = (scores(emulator, path) for path in paths)
    # Training went on from ART's step 1: step 2 sits near step 1 (one small step away) and far
    # from step 0; trained from the base weights it would sit near step 0 instead.
    assert 0 < distance(ours, art_step) < distance(ours, before) / 2
    # ART's files are ART's: arthex read them and changed none
    now = files(model_dir)
    assert {k: v for k, v in now.items() if k in left_by_art} == left_by_art


def test_arthex_continues_a_run_arts_tinker_native_backend_trained(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path
) -> None:
    art_path = tmp_path / ".art"
    arts = arts_run(emulator, tiny, art_path, "native")
    state_file = art_path / "resume" / "models" / "run-1" / "state.json"
    assert arts["keys"] == [art_backend.STATE_KEY_RUN_IDS, art_backend.STATE_KEY_LATEST_STEP]
    assert arts["state"] == json.loads(state_file.read_text())
    assert arts["state"]["latest_step"] == 1 and len(arts["state"]["tinker_run_ids"]) == 1
    art_run = arts["state"]["tinker_run_ids"][0]
    assert all(p.startswith(f"tinker://{art_run}/") for p in arts["sampler_paths"].values())
    steps = [  # ART saves no training state at step 0
        {"step": 0, "sampler_path": arts["sampler_paths"]["0"], "state_path": None},
        {
            "step": 1,
            "sampler_path": arts["sampler_paths"]["1"],
            "state_path": arts["training_paths"]["1"],
        },
    ]
    continue_with_arthex(emulator, tiny, art_path, steps)


def test_arthex_continues_a_run_arts_tinker_backend_trained(
    emulator: TinkerEmulator, tiny: str, tmp_path: Path
) -> None:
    import yaml

    art_path = tmp_path / ".art"
    arts_run(emulator, tiny, art_path, "tinker")
    checkpoints = art_path / "resume" / "models" / "run-1" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0000", "0001"]
    infos = [yaml.safe_load((checkpoints / n / "info.yaml").read_text()) for n in ("0000", "0001")]
    steps = [
        {
            "step": step,
            "sampler_path": info["sampler_weights_path"],
            "state_path": info["state_with_optimizer_path"],
        }
        for step, info in enumerate(infos)
    ]
    continue_with_arthex(emulator, tiny, art_path, steps)
