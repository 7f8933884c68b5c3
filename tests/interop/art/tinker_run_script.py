"""Train one step with ART 0.5.23's own `TinkerNativeBackend` (run in the venv that has ART,
tinker and tinker-cookbook) against the Tinker service at `TINKER_BASE_URL` (the emulator), with
`save_checkpoint=True`; print what ART left, as JSON: the names of its `state.json` keys, the
model's `state.json`, the step, and the sampler and training paths of each step ART holds.

Cases (JSON on stdin): `art_path`, `project`, `name`, `run_name`, `base_model`, `renderer`,
`rank`, `prompt`, the sampled `completions` (token ids; one trajectory per completion; their
`rewards` differ so the step has advantages) and `learning_rate`.
"""

import asyncio
import json
import sys


def choice(tokens):
    from openai.types.chat.chat_completion import Choice

    return Choice.model_validate(
        {
            "finish_reason": "stop",
            "index": 0,
            "message": {"role": "assistant", "content": "x"},
            "logprobs": {
                "content": [
                    {"token": f"token_id:{t}", "logprob": -1.0, "bytes": None, "top_logprobs": []}
                    for t in tokens
                ],
                "refusal": None,
            },
        }
    )


async def main(cases):
    import art
    from art.tinker_native.backend import (
        STATE_KEY_LATEST_STEP,
        STATE_KEY_RUN_IDS,
        TinkerNativeBackend,
    )

    backend = TinkerNativeBackend(path=cases["art_path"])
    model = art.TrainableModel(
        name=cases["name"],
        run_name=cases["run_name"],
        project=cases["project"],
        base_model=cases["base_model"],
        _internal_config={
            "tinker_native_args": {
                "renderer_name": cases["renderer"],
                "training_client_args": {"rank": cases["rank"]},
            }
        },
    )
    await model.register(backend)
    group = art.TrajectoryGroup(
        [
            art.Trajectory(
                messages_and_choices=[{"role": "user", "content": cases["prompt"]}, choice(c)],
                reward=r,
            )
            for c, r in zip(cases["completions"], cases["rewards"])
        ]
    )
    result = await backend.train(
        model, [group], learning_rate=cases["learning_rate"], save_checkpoint=True
    )
    state = backend._model_state[backend._model_key(model)]
    out = {
        "keys": [STATE_KEY_RUN_IDS, STATE_KEY_LATEST_STEP],
        "step": result.step,
        "get_step": await model.get_step(),
        "state": model.read_state(),
        "sampler_paths": {str(k): v for k, v in state.sampler_checkpoint_paths.items()},
        "training_paths": {str(k): v for k, v in state.training_checkpoint_paths.items()},
    }
    await backend.close()
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.load(sys.stdin)))))
