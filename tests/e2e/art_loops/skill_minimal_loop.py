"""ART 0.5.23's RL skill template ("Minimal Training Pattern" in the train-rl skill that
`art init` installs), run on arthex.

Lines marked `# changed:` differ from the template: the import lines, the base model and the
sizes. `# filled:` marks what the template leaves to the script (`args`, the scenarios, the
rollout's body, `should_validate`, the `...` in the validation metrics). The RULER judge is
an LLM behind an API, so `ruler_score_group` is imported from a local stand-in with the same
signature and contract (see `rewards.py`). The loop itself is the template's.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import arthex as art  # changed: was `import art`
from arthex import TrainableModel  # changed: was `from art import TrainableModel`
from arthex.art.local import LocalBackend  # changed: was `from art.local import LocalBackend`
from arthex.utils.iterate_dataset import iterate_dataset  # changed: was art.utils...

from .rewards import ruler_score_group  # changed: was `from art.rewards import ...`

args = SimpleNamespace(  # filled; the sizes are small (changed)
    groups_per_step=2,
    num_epochs=1,
    rollouts_per_group=3,
    learning_rate=1e-5,
    judge_model="local/digits",
)


@dataclass
class Scenario:  # filled
    id: str
    question: str


train_scenarios = [Scenario(id=f"t{i}", question=f"{i} + {i} =") for i in range(4)]  # filled
validation_scenarios = [Scenario(id=f"v{i}", question=f"{i} * 3 =") for i in range(2)]  # filled


def should_validate(step: int) -> bool:  # filled
    return True


def mean_reward(groups: list[art.TrajectoryGroup]) -> float:  # filled
    rewards = [t.reward for group in groups for t in group]
    return sum(rewards) / len(rewards) if rewards else 0.0


async def main(base_model: str, base_path: str) -> str:
    model = art.TrainableModel(  # filled: the skill asks for these names
        name="digits",
        project="skill-template",
        run_name="digits-run-1",
        base_model=base_model,  # changed: a base model the skill offers
        base_path=base_path,
    )
    backend = LocalBackend(in_process=True, path=base_path)
    await model.register(backend)

    async def rollout(model: TrainableModel, scenario: Scenario) -> art.Trajectory:
        messages: art.Messages = [{"role": "user", "content": scenario.question}]  # filled
        client = model.openai_client()
        response = await client.chat.completions.create(
            model=model.get_inference_name(), messages=messages, max_tokens=8
        )
        return art.Trajectory(
            messages_and_choices=[*messages, response.choices[0]],
            reward=0.0,  # the judge scores it
            metadata={"scenario_id": scenario.id},
        )

    for batch in iterate_dataset(
        train_scenarios,
        groups_per_step=args.groups_per_step,
        num_epochs=args.num_epochs,
        initial_step=await model.get_step(),
    ):
        train_groups = await art.gather_trajectory_groups(
            [
                art.TrajectoryGroup(
                    (rollout(model, scenario) for _ in range(args.rollouts_per_group)),
                    metadata={"scenario_id": scenario.id},
                )
                for scenario in batch.items
            ],
            after_each=lambda group: ruler_score_group(
                group,
                judge_model=args.judge_model,
            ),
            max_exceptions=args.rollouts_per_group * len(batch.items),
        )

        train_result = await backend.train(
            model,
            train_groups,
            learning_rate=args.learning_rate,
        )

        await model.log(
            train_groups,
            metrics=train_result.metrics,
            step=train_result.step,
            split="train",
        )

        if should_validate(train_result.step):
            val_groups = await art.gather_trajectory_groups(
                [
                    art.TrajectoryGroup(
                        (rollout(model, scenario) for _ in range(args.rollouts_per_group)),
                        metadata={"scenario_id": scenario.id},
                    )
                    for scenario in validation_scenarios
                ],
                after_each=lambda group: ruler_score_group(
                    group,
                    judge_model=args.judge_model,
                ),
                max_exceptions=args.rollouts_per_group * len(validation_scenarios),
            )
            await model.log(
                val_groups,
                metrics={"reward": mean_reward(val_groups)},  # filled: the template's `...`
                step=train_result.step,
                split="val",
            )
            await model.delete_checkpoints()

    print(f"final model: {model.get_inference_name()}")  # the skill's closing print
    await backend.close()
    return model.get_inference_name()
