"""ART 0.5.23's own ServerlessBackend, unmodified, against a training server.

Run by ART's interpreter with a JSON object on stdin (base_url, api_key, base_model,
base_path); prints a JSON object of what ART's client saw: the model's identity after
register, the inference names it sent and the names the server answered with, the steps,
the train result, greedy logprobs of one prompt at each step, the checkpoints before and
after delete_checkpoints, what listing them says after `backend.delete(model)` (the model
logged one group to the val split through the client's `models.log` first), and every
request the client made to the training API (method, path, JSON field names), recorded by an
httpx event hook on its connection (those two last apart: arthex's client has no call for
them).
"""

import asyncio
import json
import sys

import art
from art.serverless.backend import ServerlessBackend

PROMPTS = ["Say a", "Say b"]


async def rollout(model, prompt, seen):
    client = model.openai_client()
    name = model.get_inference_name()
    completion = await client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=4,
        temperature=1.0,
        logprobs=True,
    )
    seen.append([name, completion.model])
    choice = completion.choices[0]
    return art.Trajectory(
        messages_and_choices=[{"role": "user", "content": prompt}, choice],
        reward=float(len(choice.message.content or "") % 3),
    )


async def groups(model, seen):
    found = []
    for prompt in PROMPTS:
        found.append(art.TrajectoryGroup([await rollout(model, prompt, seen) for _ in range(3)]))
    return found


async def checkpoint_steps(backend, model):
    return sorted(
        [c.step async for c in backend._client.models.checkpoints.list(model_id=model.id)]
    )


def field_names(body):
    """The JSON field names of a request body: its keys, and those of `experimental_config`
    and `config` (dotted), and of a trajectory group (`trajectory_groups[].`)."""
    if not isinstance(body, dict):
        return []
    names = set(body)
    for key in ("experimental_config", "config"):
        if isinstance(body.get(key), dict):
            names |= {f"{key}.{inner}" for inner in body[key]}
    for group in body.get("trajectory_groups") or []:
        names |= {f"trajectory_groups[].{inner}" for inner in group}
    return sorted(names)


async def probe(model, name):
    """The greedy first token's logprob of one prompt under `name`."""
    completion = await model.openai_client().chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": "Say a"}],
        max_tokens=1,
        temperature=0.0,
        logprobs=True,
    )
    return completion.choices[0].logprobs.content[0].logprob


async def main(given):
    backend = ServerlessBackend(api_key=given["api_key"], base_url=given["base_url"])
    requests = []

    async def record(request):
        body = json.loads(request.content) if request.content else None
        requests.append([request.method, request.url.path, field_names(body)])

    backend._client._client.event_hooks["request"].append(record)
    model = art.TrainableModel(
        name="agent",
        run_name="agent-run",
        project="proj",
        base_model=given["base_model"],
        base_path=given["base_path"],
        report_metrics=[],
    )
    out = {}
    await model.register(backend)
    out["identity"] = {
        "id": model.id,
        "entity": model.entity,
        "run_id": model.run_id,
        "inference_base_url": model.inference_base_url,
        "inference_name": model.get_inference_name(),
        "inference_name_step0": model.get_inference_name(0),
    }
    out["step_before"] = await model.get_step()
    seen = []
    train_groups = await groups(model, seen)
    await model.log(train_groups, split="train")
    result = await backend.train(model, train_groups, learning_rate=1e-3)
    await model.log(metrics=result.metrics, step=result.step, split="train")
    out["train"] = {"step": result.step, "artifact_name": result.artifact_name,
                    "metric_keys": sorted(result.metrics)}  # fmt: skip
    out["step_after"] = await model.get_step()
    async with backend.adapter_lease(model, result.step):
        out["pinned_name"] = model.get_inference_name()
        await rollout(model, "Say c", seen)
    await rollout(model, "Say d", seen)
    async with backend.adapter_lease(model, 0):
        await rollout(model, "Say e", seen)
    out["seen"] = seen
    base = model.get_inference_name()
    out["logprobs"] = {
        "latest": await probe(model, base),
        "step0": await probe(model, model.get_inference_name(0)),
        "step1": await probe(model, model.get_inference_name(1)),
    }
    out["checkpoints_before_delete"] = await checkpoint_steps(backend, model)
    await model.log(metrics={"reward": 0.5}, step=result.step, split="val")  # the best step
    await model.delete_checkpoints()
    out["checkpoints_after_delete"] = await checkpoint_steps(backend, model)
    out["step_final"] = await model.get_step()
    # the routes arthex's own client has no call for: the shared request set ends here
    out["requests"] = list(requests)
    await backend._client.models.log(
        model_id=model.id, trajectory_groups=train_groups[:1], split="val"
    )
    await backend.delete(model)
    try:
        await checkpoint_steps(backend, model)
        out["after_delete"] = "listed"
    except Exception as exc:  # the model is gone: the server says 404
        out["after_delete"] = getattr(exc, "status_code", repr(exc))
    await backend.close()
    out["own_requests"] = requests[len(out["requests"]) :]
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.stdin.read())))))
