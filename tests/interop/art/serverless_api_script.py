"""One sequence of calls on the hosted serverless API's client, `Client` of
`{lib}.serverless.client` (ART's, or arthex's under `arthex.art`: the first argument names the
package), against a training server; prints what each call gave, as JSON.

The calls: create a model (then find it again, then be refused a second one), log groups,
list its checkpoints, start a training job, wait for it (straight to the server, past the
client, so the recorded requests do not depend on timing), list its events whole, by pages
of one and after a cursor, list checkpoints by pages of one in both orders, delete
checkpoints, be refused an SFT job from a URL and an unknown job's events, delete the model
and be refused its checkpoints. An error is given as the exception's class name.

Run by ART's interpreter for ART; the interop test runs arthex's in its own process.
"""

import asyncio
import importlib
import inspect
import json
import sys
import time

import httpx
from openai.types.chat.chat_completion import Choice


def groups(lib, cases):
    art = importlib.import_module(lib)
    return [
        art.TrajectoryGroup(
            [
                art.Trajectory(
                    messages_and_choices=[
                        {"role": "user", "content": prompt},
                        Choice.model_validate(choice),
                    ],
                    reward=reward,
                )
                for choice, reward in trajectories
            ]
        )
        for prompt, trajectories in cases["groups"]
    ]


def wait_for(cases, job_id):
    """Until the job has ended, asking the server itself (not through the recorded proxy)."""
    url = f"{cases['server_url']}/preview/training-jobs/{job_id}"
    headers = {"Authorization": f"Bearer {cases['api_key']}"}
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = httpx.get(url, headers=headers).json()["status"]
        if status != "running":
            return status
        time.sleep(0.5)
    raise TimeoutError(f"job {job_id} still running after 600 s")


async def outcome(call):
    try:
        return await call
    except Exception as exc:  # the class says which error the answer became
        return {"error": type(exc).__name__}


def model_json(model):
    fields = ("id", "entity", "project", "name", "base_model", "run_id")
    return {"class": type(model).__name__, **{f: getattr(model, f) for f in fields}}


def event_json(event):
    return [type(event).__name__, event.id, event.type, sorted(event.data)]


RESOURCES = {
    "Client": ["__init__", "close"],
    "Models": ["create", "log", "delete"],
    "Checkpoints": ["list", "delete"],
    "TrainingJobs": ["create"],
    "TrainingJobEvents": ["list"],
    "SFTTrainingJobs": ["create"],
}
ANSWERS = ["Model", "Checkpoint", "DeleteCheckpointsResponse", "TrainingJob", "SFTTrainingJob",
           "TrainingJobEvent"]  # fmt: skip
OPTIONS = ["CheckpointListParams", "TrainingJobEventListParams", "ExperimentalTrainingConfig",
           "SFTTrainingConfig"]  # fmt: skip


def shapes(api):
    """Each resource method's parameters (name, kind, default: None and openai's NOT_GIVEN
    both read as "not given"), whether it is a coroutine function, the resources' attributes,
    each answer model's fields, each options TypedDict's keys."""
    out = {}
    for name, methods in RESOURCES.items():
        cls = getattr(api, name)
        for method in methods:
            function = getattr(cls, method)
            params = []
            for p in inspect.signature(function).parameters.values():
                default = p.default
                if default is inspect.Parameter.empty:
                    default = "<required>"
                elif default is None or type(default).__name__ == "NotGiven":
                    default = "<not given>"
                params.append([p.name, p.kind.name, default])
            out[f"{name}.{method}"] = [inspect.iscoroutinefunction(function), params]
    for name in ANSWERS:
        out[name] = sorted(getattr(api, name).model_fields)
    for name in OPTIONS:
        options = getattr(api, name)
        out[name] = [sorted(options.__required_keys__), sorted(options.__optional_keys__)]
    names = ("models", "training_jobs", "sft_training_jobs", "checkpoints", "events")
    out["attributes"] = {
        name: sorted(a for a in names if hasattr(getattr(api, name), a)) for name in RESOURCES
    }
    return out


async def main(lib, cases):
    api = importlib.import_module(f"{lib}.serverless.client")
    client = api.Client(api_key=cases["api_key"], base_url=cases["base_url"])
    out = {"base_url": str(client.base_url), "api_key": client.api_key, "shapes": shapes(api)}
    train = groups(lib, cases)
    create = client.models.create
    made = await create(project="proj", name="agent", base_model=cases["base_model"])
    out["created"] = model_json(made)
    again = await create(project="proj", name="agent", base_model=cases["base_model"],
                         return_existing=True)  # fmt: skip
    out["again"] = model_json(again)
    out["twice"] = await outcome(create(project="proj", name="agent",
                                        base_model=cases["base_model"]))  # fmt: skip
    out["logged"] = await client.models.log(model_id=made.id, trajectory_groups=train[:1],
                                            split="val")  # fmt: skip
    checkpoints = client.models.checkpoints
    out["steps_before"] = [c.step async for c in checkpoints.list(model_id=made.id)]

    job = await client.training_jobs.create(
        model_id=made.id, trajectory_groups=train,
        experimental_config={"learning_rate": 1e-3, "loss_fn": "cispo"},
    )  # fmt: skip
    out["job"] = [type(job).__name__, job.id]
    out["status"] = wait_for(cases, job.id)
    events = client.training_jobs.events
    out["events"] = [event_json(e) async for e in events.list(training_job_id=job.id)]
    first = await events.list(training_job_id=job.id, limit=1)
    out["event_pages"] = [[event_json(e) for e in page.data] async for page in first.iter_pages()]
    out["events_after_2"] = [
        event_json(e) async for e in events.list(training_job_id=job.id, after="2", limit=2)
    ]

    out["steps_by_one"] = [c.step async for c in checkpoints.list(model_id=made.id, limit=1)]
    newest = await checkpoints.list(model_id=made.id, limit=1, order="desc")
    out["newest"] = [[type(c).__name__, c.id, c.step, c.metrics] for c in newest.data]
    out["newest_has_more"] = [newest.has_more, newest.has_next_page()]
    older = await newest.get_next_page()
    out["older"] = [[c.step for c in older.data], older.has_next_page()]
    deleted = await checkpoints.delete(model_id=made.id, steps=[0, 9])
    out["deleted"] = [type(deleted).__name__, deleted.deleted_count, deleted.not_found_steps]
    out["steps_after"] = [c.step async for c in checkpoints.list(model_id=made.id)]

    out["sft"] = await outcome(client.sft_training_jobs.create(
        model_id=made.id, training_data_url="wandb-artifact:///e/p/data:latest",
        config={"learning_rate": 1e-4, "batch_size": 2},
    ))  # fmt: skip
    out["unknown_job"] = await outcome(events.list(training_job_id="j" + "0" * 24))
    out["model_deleted"] = await client.models.delete(model_id=made.id)
    out["after_delete"] = await outcome(checkpoints.list(model_id=made.id))
    await client.close()
    return out


def run(lib, cases):
    return asyncio.run(main(lib, cases))


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
