"""Train one step with one of ART 0.5.23's own Tinker backends (run in the venv that has ART,
tinker and tinker-cookbook) against the Tinker service at `TINKER_BASE_URL` (the emulator);
print what ART left, as JSON.

`backend` "native": `art.tinker_native.TinkerNativeBackend`, trained with
`save_checkpoint=True`; the names of its `state.json` keys, the model's `state.json`, the step,
and the sampler and training paths of each step ART holds. "tinker": `art.tinker.TinkerBackend`
(a LocalBackend over Tinker, its server in worker processes); the step (its checkpoint folders'
`info.yaml` are read by the test).

Cases (JSON on stdin): `backend`, `art_path`, `project`, `name`, `run_name`, `base_model`,
`renderer`, `rank`, `prompt` and `prompt_tokens`, the sampled `completions` (token ids; one
trajectory per completion; their `rewards` differ so the step has advantages) and
`learning_rate`.
"""

import asyncio
import json
import sys


def choice(prompt_tokens, tokens):
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
            # what a vLLM endpoint with return_token_ids adds (ART's LocalBackend trains on it)
            "prompt_token_ids": prompt_tokens,
            "token_ids": tokens,
        }
    )


async def main(cases):
    import art

    native = cases["backend"] == "native"
    if native:
        from art.tinker_native.backend import TinkerNativeBackend

        backend = TinkerNativeBackend(path=cases["art_path"])
        args_key = "tinker_native_args"
    else:
        from art.tinker import TinkerBackend

        backend = TinkerBackend(path=cases["art_path"], in_process=True)
        args_key = "tinker_args"
    model = art.TrainableModel(
        name=cases["name"],
        run_name=cases["run_name"],
        project=cases["project"],
        base_model=cases["base_model"],
        _internal_config={
            args_key: {
                "renderer_name": cases["renderer"],
                "training_client_args": {"rank": cases["rank"]},
            }
        },
    )
    await model.register(backend)
    group = art.TrajectoryGroup(
        [
            art.Trajectory(
                messages_and_choices=[
                    {"role": "user", "content": cases["prompt"]},
                    choice(cases["prompt_tokens"], c),
                ],
                reward=r,
            )
            for c, r in zip(cases["completions"], cases["rewards"])
        ]
    )
    if native:
        result = await backend.train(
            model, [group], learning_rate=cases["learning_rate"], save_checkpoint=True
        )
    else:
        result = await backend.train(model, [group], learning_rate=cases["learning_rate"])
    out = {"step": result.step, "get_step": await model.get_step()}
    if native:
        from art.tinker_native.backend import STATE_KEY_LATEST_STEP, STATE_KEY_RUN_IDS

        state = backend._model_state[backend._model_key(model)]
        out |= {
            "keys": [STATE_KEY_RUN_IDS, STATE_KEY_LATEST_STEP],
            "state": model.read_state(),
            "sampler_paths": {str(k): v for k, v in state.sampler_checkpoint_paths.items()},
            "training_paths": {str(k): v for k, v in state.training_checkpoint_paths.items()},
        }
    await backend.close()
    return out


if __name__ == "__main__":  # ART's TinkerBackend starts worker processes that import this file
    print(json.dumps(asyncio.run(main(json.load(sys.stdin)))))
