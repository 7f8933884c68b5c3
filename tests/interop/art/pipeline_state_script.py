"""Write ART 0.5.23's pipeline record into a run directory with ART's own code (run in ART's
venv): `art.pipeline_trainer.trainer.PipelineTrainer._persist_state`, the method ART's trainer
calls after each update and each finished evaluation, on an `art.pipeline_trainer.state.
PipelineState` holding the given counts, and an `art.Model` whose directory is the run's (its
`merge_state` merges the record into the run's `state.json`). Nothing else of the trainer runs:
its pipeline needs ART's GPU LocalBackend. Prints the run's state.json as ART reads it back.

Cases (JSON on stdin): `base_path`, `project`, `name` (the run directory's name), `state` (the
PipelineState fields to set), `training_step`, `profile` (the tuner profile name, or null).
"""

import json
import sys
from types import SimpleNamespace


def main() -> None:
    import art
    from art.pipeline_trainer.state import PipelineState
    from art.pipeline_trainer.trainer import PIPELINE_STATE_KEY, PipelineTrainer

    cases = json.loads(sys.stdin.read())
    model = art.Model(name=cases["name"], project=cases["project"], base_path=cases["base_path"])
    state = PipelineState()
    for field, value in cases["state"].items():
        setattr(state, field, set(value) if field == "completed_eval_steps" else value)
    trainer = SimpleNamespace(model=model, state=state, _pipeline_tuner_profile=cases["profile"])
    PipelineTrainer._persist_state(trainer, cases["training_step"])
    print(json.dumps({"key": PIPELINE_STATE_KEY, "state": model.read_state()}))


if __name__ == "__main__":
    main()
