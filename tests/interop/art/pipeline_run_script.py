"""ART 0.5.23's own PipelineTrainer, unmodified, trains a few steps (run in ART's venv with
torch, which its trainer imports through ART's LocalBackend module), on ART's
own ServerlessBackend against a training server (`arthex serve --backend local`: ART's
LocalBackend needs a GPU). Its rollouts are chat completions from the model's endpoint; each
scenario's group earns 0, 1, 2 by position (never equal), and scenario 2's group is all equal
(ART discards it as zero-variance). Prints the scenarios its rollout function received and the
run's `state.json` as ART left it.

Cases (JSON on stdin): `base_url`, `api_key`, `base_model`, `base_path`, `project`, `name`,
`run_name`, `scenarios` (how many), `max_steps`, `batch` (min = max batch size).
"""

import asyncio
import json
import sys

import art
from art.pipeline_trainer import PipelineTrainer
from art.serverless.backend import ServerlessBackend

EQUAL_SCENARIO = 2


async def main(given):
    backend = ServerlessBackend(api_key=given["api_key"], base_url=given["base_url"])
    model = art.TrainableModel(
        name=given["name"],
        run_name=given["run_name"],
        project=given["project"],
        base_model=given["base_model"],
        base_path=given["base_path"],
        report_metrics=[],
    )
    await model.register(backend)
    sampled = []

    async def single(scenario, position):
        messages = [{"role": "user", "content": f"Question {scenario}?"}]
        completion = await model.openai_client().chat.completions.create(
            model=model.get_inference_name(),
            messages=messages,
            max_tokens=4,
            temperature=1.0,
            logprobs=True,
        )
        trajectory = art.Trajectory(
            messages_and_choices=[*messages, completion.choices[0]],
            reward=1.0 if scenario == EQUAL_SCENARIO else float(position),
        )
        trajectory.metrics["completion_tokens"] = max(completion.usage.completion_tokens, 1)
        return trajectory

    async def rollout_fn(model_, scenario, config):
        sampled.append(scenario)
        return art.TrajectoryGroup([await single(scenario, i) for i in range(3)])

    trainer = PipelineTrainer(
        model=model,
        backend=backend,
        rollout_fn=rollout_fn,
        scenarios=list(range(given["scenarios"])),
        config=None,
        num_rollout_workers=1,
        min_batch_size=given["batch"],
        max_batch_size=given["batch"],
        max_steps=given["max_steps"],
        learning_rate=1e-3,
        eval_fn=None,
        log_interval_seconds=3600,
    )
    await trainer.train(handle_signals=False)
    step = await model.get_step()
    await backend.close()
    return {"sampled": sampled, "step": step, "state": model.read_state()}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.stdin.read())))))
