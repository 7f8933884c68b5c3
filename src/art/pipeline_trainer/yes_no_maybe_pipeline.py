"""ART's `art.pipeline_trainer.yes_no_maybe_pipeline`, under arthex: ART's yes/no/maybe
PipelineTrainer example written over arthex (arthex/apps/examples/yes_no_maybe.py).

Each of ART's names here is arthex's own object (the table: arthex/art/_table.py;
docs/migrating-from-art.md). Run the example as ART's:
`python -m arthex.art.pipeline_trainer.yes_no_maybe_pipeline`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.apps.examples.yes_no_maybe import BASE_MODEL as BASE_MODEL
    from arthex.apps.examples.yes_no_maybe import EVAL_EVERY_N_STEPS as EVAL_EVERY_N_STEPS
    from arthex.apps.examples.yes_no_maybe import EVAL_TRAJECTORY_COUNT as EVAL_TRAJECTORY_COUNT
    from arthex.apps.examples.yes_no_maybe import MAX_STEPS as MAX_STEPS
    from arthex.apps.examples.yes_no_maybe import MAX_TOKENS as MAX_TOKENS
    from arthex.apps.examples.yes_no_maybe import MODEL_NAME as MODEL_NAME
    from arthex.apps.examples.yes_no_maybe import PROJECT as PROJECT
    from arthex.apps.examples.yes_no_maybe import ROLLOUTS_PER_SCENARIO as ROLLOUTS_PER_SCENARIO
    from arthex.apps.examples.yes_no_maybe import build_scenarios as build_scenarios
    from arthex.apps.examples.yes_no_maybe import eval_fn as eval_fn
    from arthex.apps.examples.yes_no_maybe import main as main
    from arthex.apps.examples.yes_no_maybe import reward_for_answer as reward_for_answer
    from arthex.apps.examples.yes_no_maybe import rollout_fn as rollout_fn

    __all__ = [
        "BASE_MODEL",
        "EVAL_EVERY_N_STEPS",
        "EVAL_TRAJECTORY_COUNT",
        "MAX_STEPS",
        "MAX_TOKENS",
        "MODEL_NAME",
        "PROJECT",
        "ROLLOUTS_PER_SCENARIO",
        "build_scenarios",
        "eval_fn",
        "main",
        "reward_for_answer",
        "rollout_fn",
    ]
elif __name__ == "__main__":  # `python -m`: the example itself
    from arthex.apps.examples import runtime
    from arthex.apps.examples.yes_no_maybe import main

    runtime.run_example(main)
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
