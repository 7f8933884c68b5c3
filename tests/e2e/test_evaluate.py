"""`arthex.evaluate` against LocalBackend's served tiny model, on CPU: the row and the parquet
it logs (read back from the files), pass@k against the unbiased estimator recomputed here,
a named older step served and answering as that step, and an evaluation beside another
process that holds the run's trainer lease."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")

import pyarrow.parquet as pq

import arthex
from arthex.core.errors import InvalidInputError, RunBusyError, TooManyExceptionsError
from arthex.core.evaluation import EvaluationResult
from arthex.testing.contracts.scenario import rollout_groups
from arthex.testing.tiny_model import tiny_model
from tests._eval_env import ParityEnvironment

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def run_dir(base: Path) -> Path:
    return base / "evals" / "models" / "agent"


def history(base: Path) -> list[dict[str, Any]]:
    path = run_dir(base) / "history.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def eval_rows(base: Path, split: str = "val") -> list[dict[str, Any]]:
    return [row for row in history(base) if f"{split}/pass@1" in row]


def parquet_rows(base: Path, split: str, step: int) -> list[dict[str, Any]]:
    """The trajectories of the split's step file (a group of failures only is one row
    without a trajectory)."""
    path = run_dir(base) / "trajectories" / split / f"{step:04d}.parquet"
    columns = ["group_index", "trajectory_index", "reward", "metrics", "metadata"]
    rows = pq.read_table(path, columns=columns).to_pylist()
    return [row for row in rows if row["trajectory_index"] is not None]


def unbiased(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def trainable(base: Path, base_model: str) -> arthex.TrainableModel:
    return arthex.TrainableModel(
        name="agent",
        project="evals",
        base_model=base_model,
        base_path=str(base),
        report_metrics=[],
    )


def test_evaluate_logs_one_row_and_the_parquet_and_pass_at_k_is_the_unbiased_estimator(
    tmp_path: Path, base_model: str
) -> None:
    n, examples = 4, 5

    async def main() -> tuple[EvaluationResult, list[str], Any]:
        backend = arthex.LocalBackend(full_finetune=True)
        model = trainable(tmp_path, base_model)
        refusals = []
        try:
            await model.register(backend)
            # Every rollout failing measured nothing: refused, nothing logged.
            with pytest.raises(TooManyExceptionsError, match="every one of the 8 rollouts"):
                await arthex.evaluate(
                    model, ParityEnvironment(2, failing=[0, 1]), rollouts_per_example=4
                )
            refusals.append("all failed")
            # Past max_exceptions: refused, nothing logged.
            with pytest.raises(TooManyExceptionsError, match="max_exceptions=0"):
                await arthex.evaluate(
                    model, ParityEnvironment(2, failing=[1]), rollouts_per_example=2,
                    max_exceptions=0,
                )  # fmt: skip
            refusals.append("past the budget")
            assert eval_rows(tmp_path) == []
            result = await arthex.evaluate(
                model,
                ParityEnvironment(examples, failing=[3]),
                rollouts_per_example=n,
                max_concurrency=3,
            )
            decision = await model.delete_checkpoints("val/reward", dry_run=True)
            return result, refusals, decision
        finally:
            await model.close()
            await backend.close()

    result, refusals, decision = asyncio.run(main())
    assert refusals == ["all failed", "past the budget"]

    # The physical files: one parquet step file, one history row.
    stored = parquet_rows(tmp_path, "val", 0)
    rows = eval_rows(tmp_path)
    assert len(rows) == 1, rows
    row = rows[0]
    assert row["step"] == 0 == result.step
    by_group: dict[int, list[float]] = defaultdict(list)
    for entry in stored:
        by_group[entry["group_index"]].append(entry["reward"])
    assert sorted(by_group) == [0, 1, 2, 4], by_group  # example 3 failed
    assert sum(len(r) for r in by_group.values()) == (examples - 1) * n  # example 3 failed
    assert {json.loads(e["metadata"])["served"] for e in stored} == {"agent@0"}

    # The result's per-rollout rewards are the stored ones; the failed example is all None.
    assert result.num_examples == examples and result.rollouts_per_example == n
    assert result.failures == n and result.rollout_rewards[3] == (None,) * n
    finished = [r for rewards in result.rollout_rewards for r in rewards if r is not None]
    assert sorted(finished) == sorted(e["reward"] for e in stored)
    assert result.example_rewards[3] is None

    # The row: reward, exception rate, the rubric's metrics, pass@k for k = 1..n.
    rewards = [e["reward"] for e in stored]
    assert row["val/reward"] == pytest.approx(sum(rewards) / len(rewards)) == result.reward
    assert row["val/exception_rate"] == pytest.approx(n / (examples * n))
    tokens = [json.loads(e["metrics"])["completion_tokens"] for e in stored]
    assert row["val/completion_tokens"] == pytest.approx(sum(tokens) / len(tokens))
    assert "val/logprob" in row

    # pass@k recomputed from the parquet's rewards (a failed rollout is incorrect).
    stored_correct = {g: sum(r >= 1.0 for r in rs) for g, rs in by_group.items()}
    per_example = [stored_correct.get(i, 0) for i in range(examples)]
    assert sorted(per_example) == sorted(
        sum(r is not None and r >= 1.0 for r in rs) for rs in result.rollout_rewards
    )
    expected = {k: sum(unbiased(n, c, k) for c in per_example) / examples for k in range(1, n + 1)}
    for k in range(1, n + 1):
        assert row[f"val/pass@{k}"] == pytest.approx(expected[k])
        assert result.pass_at_k[k] == pytest.approx(expected[k])
    values = [expected[k] for k in range(1, n + 1)]
    assert values == sorted(values), "pass@k never decreases with k"
    assert f"val/pass@{n + 1}" not in row

    # The retention policy reads evaluations like any other split's rows.
    assert decision.best_step == 0


def test_a_named_older_step_is_served_and_answers_as_that_step(
    tmp_path: Path, base_model: str
) -> None:
    async def main() -> tuple[EvaluationResult, EvaluationResult, EvaluationResult, str]:
        backend = arthex.LocalBackend(full_finetune=True)
        model = trainable(tmp_path, base_model)
        env = ParityEnvironment(2, temperature=0.0)
        try:
            await model.register(backend)
            # One request at a time: a batch of several changes the logprobs a little.
            before = await arthex.evaluate(model, env, max_concurrency=1)
            for i in range(2):
                groups = await rollout_groups(
                    _endpoint(model), model.run.inference_name(), offset=i
                )
                await model.train(groups, {"learning_rate": 1e-2})
            old = await arthex.evaluate(model, env, step=0, split="old", max_concurrency=1)
            latest = await arthex.evaluate(model, env, split="latest", max_concurrency=1)
            with pytest.raises(InvalidInputError) as unknown:
                await arthex.evaluate(model, env, step=7, split="never")
            return before, old, latest, str(unknown.value)
        finally:
            await model.close()
            await backend.close()

    before, old, latest, unknown = asyncio.run(main())
    assert (before.step, old.step, latest.step) == (0, 0, 2)
    assert "step 7" in unknown and "0, 1, 2" in unknown
    assert not (run_dir(tmp_path) / "trajectories" / "never").exists()

    def answers(split: str, step: int) -> list[tuple[str, str, float]]:
        stored = parquet_rows(tmp_path, split, step)
        out = []
        for entry in sorted(stored, key=lambda e: e["group_index"]):
            meta, metrics = json.loads(entry["metadata"]), json.loads(entry["metrics"])
            out.append((meta["served"], meta["tokens"], round(metrics["logprob"], 3)))
        return out

    first, again, trained = answers("val", 0), answers("old", 0), answers("latest", 2)
    assert {a[0] for a in again} == {"agent@0"}
    assert {a[0] for a in trained} == {"agent@2"}
    assert [a[1:] for a in again] == [a[1:] for a in first], "step 0 answers as it did"
    assert [a[1:] for a in trained] != [a[1:] for a in first], "step 2 answers otherwise"
    assert [r["step"] for r in eval_rows(tmp_path, "old")] == [0]
    assert [r["step"] for r in eval_rows(tmp_path, "latest")] == [2]


def _endpoint(model: arthex.TrainableModel) -> Any:
    from arthex.ports.training_backend import InferenceEndpoint

    assert model.inference_base_url is not None and model.inference_api_key is not None
    return InferenceEndpoint(model.inference_base_url, model.inference_api_key, model.run.name)


def test_evaluation_runs_while_another_process_holds_the_trainer_lease(
    tmp_path: Path, base_model: str
) -> None:
    trainer = subprocess.Popen(
        [sys.executable, "-m", "tests._eval_trainer", str(tmp_path), base_model],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert trainer.stdout is not None
        ready = json.loads(trainer.stdout.readline())
        assert ready["event"] == "ready" and ready["step"] == 1, ready

        async def main() -> tuple[str, EvaluationResult, EvaluationResult]:
            backend = arthex.LocalBackend()
            busy = trainable(tmp_path, base_model)
            with pytest.raises(RunBusyError) as refused:  # the lease is really held
                await busy.register(backend)
            model = arthex.Model(
                name="agent", project="evals", base_path=str(tmp_path), report_metrics=[]
            )
            env = ParityEnvironment(2, temperature=0.0)
            try:
                at1 = await arthex.evaluate(model, env, step=1, backend=backend)
                at0 = await arthex.evaluate(
                    model, env, step=0, backend=backend, split="base", max_concurrency=1
                )
                return str(refused.value), at1, at0
            finally:
                await model.close()
                await backend.close()

        refusal, at1, at0 = asyncio.run(main())
        assert f"pid {trainer.pid}" in refusal
        assert trainer.poll() is None, "the trainer still holds the run"
    finally:
        trainer.communicate("close\n", timeout=120)
    assert trainer.returncode == 0
    assert (at1.step, at0.step) == (1, 0)
    served1 = {json.loads(e["metadata"])["served"] for e in parquet_rows(tmp_path, "val", 1)}
    served0 = {json.loads(e["metadata"])["served"] for e in parquet_rows(tmp_path, "base", 0)}
    assert (served1, served0) == ({"agent@1"}, {"agent@0"})
    assert [r["step"] for r in eval_rows(tmp_path)] == [1]
    assert [r["step"] for r in eval_rows(tmp_path, "base")] == [0]
    trained_rows = [r for r in history(tmp_path) if "loss/train" in r]
    assert [r["step"] for r in trained_rows] == [1], "the trainer's own row sits beside them"
