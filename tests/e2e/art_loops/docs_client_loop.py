"""ART 0.5.23's documented client loop (the "ART Client" page of ART's docs: initializing
the client, the rollout, and `train()`), run on arthex.

Lines marked `# changed:` differ from ART's page: the import lines, the base model and the
sizes (steps, rollouts per scenario, tokens). Lines marked `# filled:` fill the page's
placeholders (`...`, and its scenarios, which are written in pseudo-code there). Everything
else is the page's code as it stands: a model without `run_name`, rollouts that never ask
for logprobs, `art.TrajectoryGroup(<rollouts>)` handed unawaited to
`gather_trajectory_groups`, `backend.train(model, groups, learning_rate=...)` and
`model.log(groups, metrics=result.metrics, step=result.step, split="train")`.
"""

from __future__ import annotations

from dataclasses import dataclass

import arthex as art  # changed: was `import art`
from arthex.art.local import LocalBackend  # changed: was `from art.local import LocalBackend`

STEPS = 2  # changed: the page trains for 50 steps
ROLLOUTS = 3  # changed: the page makes 8 attempts per scenario
MAX_TOKENS = 8  # changed: the page leaves the length to the server


async def main(base_model: str) -> None:
    model = art.TrainableModel(
        # the name of your model as it will appear in W&B
        # and other observability platforms
        name="agent-001",
        # keep your project name constant between all the models you train
        # for a given task to consistently group metrics
        project="my-agentic-task",
        # the model that you want to train from
        base_model=base_model,  # changed: was "OpenPipe/Qwen3-14B-Instruct"
    )

    # local training
    backend = LocalBackend()

    await model.register(backend)

    @dataclass
    class Scenario:  # filled: the page's Scenario is pseudo-code
        # add whatever fields differ from one real-world scenario to another
        field_1: str
        field_2: float

    scenarios = [Scenario(field_1="hello", field_2=0), Scenario(field_1="world!", field_2=1)]

    # define a rollout function that puts the model through its paces for a given scenario
    async def rollout(model: art.Model, scenario: Scenario) -> art.Trajectory:
        openai_client = model.openai_client()

        trajectory = art.Trajectory(
            messages_and_choices=[
                {"role": "system", "content": "Answer with digits."},  # filled
                {"role": "user", "content": f"{scenario.field_1} {scenario.field_2}"},  # filled
            ]
        )

        # generate a completion using the client
        chat_completion = await openai_client.chat.completions.create(
            messages=trajectory.messages(),
            model=model.get_inference_name(),
            max_tokens=MAX_TOKENS,  # changed: a size
        )
        choice = chat_completion.choices[0]
        trajectory.messages_and_choices.append(choice)

        # determine how well the agent did during this particular run
        reply = choice.message.content or ""  # filled
        agent_performance_score: float = sum(c.isdigit() for c in reply) / max(len(reply), 1)
        trajectory.reward = agent_performance_score

        return trajectory

    async def train() -> None:  # train for 50 steps
        for _ in range(await model.get_step(), STEPS):  # changed: 50
            # Trajectories produced using the same training scenario are automatically grouped
            train_groups = await art.gather_trajectory_groups(
                (
                    art.TrajectoryGroup(rollout(model, scenario) for _ in range(ROLLOUTS))
                    for scenario in scenarios
                ),
                pbar_desc="gather",
            )

            print("num train groups:", len(train_groups))
            # num train groups: 2

            print("length of each train group:", len(train_groups[0]))
            # length of each train group: 8

            # send the grouped trajectories to the backend and wait until training finishes
            result = await backend.train(model, train_groups, learning_rate=1e-5)
            await model.log(train_groups, metrics=result.metrics, step=result.step, split="train")
            # once backend.train finishes for the current step
            # the backend updates the LoRA weights for inference and
            # the training loop continues until 50 steps have completed

    await train()
    await backend.close()
