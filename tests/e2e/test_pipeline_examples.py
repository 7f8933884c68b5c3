"""ART 0.5.23's pipeline examples (`arthex.art.pipeline_trainer`'s names; the rollout and
evaluation ART writes inside the binary-prefix `main`, and the yes/no/maybe trainer settings,
from arthex.apps.examples) against a real arthex server on loopback: the tiny model on a CPU
LocalBackend answers their chat completions (the yes/no/maybe group in one `n=32` call, the
binary-prefix forced tool call), a short PipelineTrainer run of the yes/no/maybe rollouts trains
two steps, and the binary-prefix example runs as ART's module (`python -m`) with its
environment settings."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("torch")

from openai.types.chat.chat_completion import Choice

import arthex
from arthex.apps.examples import binary_prefix_tool, yes_no_maybe
from arthex.art.pipeline_trainer import binary_prefix_tool_pipeline as bits
from arthex.art.pipeline_trainer import yes_no_maybe_pipeline as ynm

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def local_run(tiny: str, base_path: Path, name: str) -> tuple[arthex.TrainableModel, Any]:
    model = arthex.TrainableModel(
        name=name, project="examples", base_model=tiny, base_path=str(base_path), report_metrics=[]
    )
    # the tiny model's turns are often empty, and its groups often tie: expected here
    model.run_diagnostics.expect("empty", "equal_rewards", "truncated")
    return model, arthex.LocalBackend(engine="torch", full_finetune=True, seed=0)


def sampled(choice: Any) -> bool:
    """A Choice the server sampled: with its tokens' logprobs, so it can be trained."""
    return isinstance(choice, Choice) and bool(choice.logprobs and choice.logprobs.content)


def test_the_examples_rollouts_and_evaluations_sample_from_the_served_model(
    tiny: str, tmp_path: Path
) -> None:
    async def main() -> dict[str, Any]:
        model, backend = local_run(tiny, tmp_path, "rollouts")
        try:
            await model.register(backend)
            scenarios = ynm.build_scenarios()
            group = await ynm.rollout_fn(model, scenarios[0], None)
            evaluated = await ynm.eval_fn(model, 0, None, scenarios=scenarios[:3])
            config = bits.PipelineConfig(temperature=1.0, eval_temperature=0.0, max_tokens=24)
            guessed = await binary_prefix_tool.rollout(
                model, binary_prefix_tool.build_scenario(), 1.0, "train", max_tokens=24
            )
            greedy = await binary_prefix_tool.evaluate(model, config)
            return {"group": group, "evaluated": evaluated, "guessed": guessed, "greedy": greedy}
        finally:
            await model.close()
            await backend.close()

    out = asyncio.run(main())
    group = out["group"].trajectories
    assert len(group) == ynm.ROLLOUTS_PER_SCENARIO  # one call, n=32
    for trajectory in [*group, *out["evaluated"]]:
        choice: Any = trajectory.messages_and_choices[-1]
        assert sampled(choice) and len(choice.logprobs.content) <= ynm.MAX_TOKENS
        assert trajectory.reward == ynm.reward_for_answer(choice.message.content or "")
    assert [t.messages_and_choices[0] for t in out["evaluated"]] == [
        {"role": "user", "content": s["prompt"]} for s in ynm.build_scenarios()[:3]
    ]

    [greedy] = out["greedy"]
    for trajectory in (out["guessed"], greedy):
        system, user, choice = cast(list[Any], trajectory.messages_and_choices)
        assert (system["content"], user["content"]) == (bits.SYSTEM_PROMPT, bits.USER_PROMPT)
        assert sampled(choice) and trajectory.tools == bits.TOOLS
        guess, source = bits.extract_guess(choice)
        valid = bits.is_valid_guess(guess or "")
        prefix = bits.shared_prefix_len(guess or "", bits.SECRET_BITS) if valid else 0
        assert trajectory.reward == float(prefix)
        assert trajectory.metrics == {
            "prefix_len": prefix,
            "guess_len": len(guess or ""),
            "secret_len": 30,
            "valid_guess": 1.0 if valid else 0.0,
            "tool_call_count": float(len(choice.message.tool_calls or [])),
            "tool_call_found": 1.0 if source != "missing" else 0.0,
            "tool_call_structured": 1.0 if source == "tool_call" else 0.0,
        }
        assert trajectory.logs == [f"sampled_content:\n{choice.message.content or ''}"]


def test_a_short_pipeline_run_trains_on_the_yes_no_maybe_rollouts(
    tiny: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A few epochs of SFT first teach the random-weight model to answer with the three words
    now and then, so the groups' rewards differ and the pipeline has something to train."""
    scenarios = ynm.build_scenarios()
    answers = ("maybe", "no", "yes")
    warm_start = [
        [{"role": "user", "content": s["prompt"]}, {"role": "assistant", "content": answers[i % 3]}]
        for i, s in enumerate(scenarios)
    ]

    async def main() -> tuple[int, int]:
        model, backend = local_run(tiny, tmp_path, "pipeline")
        try:
            await model.register(backend)
            sft = {"learning_rate": 1e-2, "epochs": 3, "batch_size": 8}
            start = (await model.train_sft(warm_start, sft, progress=False)).step
            trainer = yes_no_maybe.make_trainer(
                model, backend, scenarios[:12], scenarios[:4],
                max_steps=2, min_batch_size=2, max_batch_size=2, num_rollout_workers=2,
            )  # fmt: skip
            await trainer.train()
            return start, await model.get_step()
        finally:
            await model.close()
            await backend.close()

    start, end = asyncio.run(main())
    assert end == start + 2
    run_dir = tmp_path / "examples" / "models" / "pipeline"
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "train/reward" in row]
    assert [row["step"] for row in trained] == [start, start + 1]
    # ART's settings: an evaluation at each step that is a multiple of 2, none at the start,
    # on the first 4 prompts (one group of 4 trajectories)
    evaluated = [step for step in range(start + 1, end + 1) if step % ynm.EVAL_EVERY_N_STEPS == 0]
    assert [row["step"] for row in rows if "val/reward" in row] == evaluated
    val_files = sorted(p.name for p in (run_dir / "trajectories" / "val").glob("*.parquet"))
    assert val_files == [f"{step:04d}.parquet" for step in evaluated]
    assert all(row["step"] > start for row in rows if "discarded/cum/stale_groups" in row)

    capsys.readouterr()
    run = arthex.Model(name="pipeline", project="examples", base_path=str(tmp_path))
    bits.print_history_summary(run)
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["", "Recent training metrics:"]
    assert [line.split()[0] for line in lines[2:]] == [f"step={start}", f"step={start + 1}"]
    assert all("discarded=0.0" in line and "=None" not in line for line in lines[2:])


def test_the_binary_prefix_example_runs_as_arts_module(tiny: str, tmp_path: Path) -> None:
    """`python -m arthex.art.pipeline_trainer.binary_prefix_tool_pipeline` with ART's settings
    in the environment, on this machine's backend: the random-weight model never guesses, so
    every group ties and is discarded; the run ends with its stream, evaluated at the start."""
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "ARTHEX_BACKEND")}
    env.update(
        BASE_MODEL=tiny, ART_PATH=str(tmp_path / "art"), RUN_SUFFIX="t1", MAX_STEPS="1",
        SCENARIO_COUNT="3", ROLLOUTS_PER_SCENARIO="2", NUM_ROLLOUT_WORKERS="2",
        MIN_BATCH_SIZE="1", MAX_TOKENS="8", STATUS_LOG_INTERVAL_SECONDS="1",
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "arthex.art.pipeline_trainer.binary_prefix_tool_pipeline"],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "Starting pipeline trainer test: max_steps=1 scenarios=3 rollouts_per_scenario=2 "
        "secret_len=30",
        "Training completed.",
        "Last eval avg reward: 0.000",
        "",
        "Recent training metrics:",
    ]
    run_dir = (
        tmp_path
        / "art"
        / "binary-prefix-tool-pipeline"
        / "models"
        / "pipeline-binary-prefix-tool-t1"
    )
    state = json.loads((run_dir / "pipeline_state.json").read_text())
    assert state  # the pipeline's record of the three scenarios
    rows = [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "val/reward" in row] == [0]
    assert max(row.get("discarded/cum/zero_variance_groups", 0) for row in rows) == 3.0


@pytest.mark.parametrize(
    ("module", "setting", "said"),
    [
        ("yes_no_maybe_pipeline", {"ARTHEX_BACKEND": "vllm"}, "ARTHEX_BACKEND must be one of"),
        ("binary_prefix_tool_pipeline", {"ARTHEX_BACKEND": "tinker"}, "needs the TINKER_API_KEY"),
    ],
)
def test_a_refused_setting_is_one_line_and_exit_2(
    module: str, setting: dict[str, str], said: str, tmp_path: Path
) -> None:
    """From a terminal, as a user starts an example: no traceback, nothing written."""
    env = {k: v for k, v in os.environ.items() if k not in ("TINKER_API_KEY", "ARTHEX_BACKEND")}
    done = subprocess.run(
        [sys.executable, "-m", f"arthex.art.pipeline_trainer.{module}"],
        capture_output=True, text=True, cwd=tmp_path, env={**env, **setting}, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and said in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []
