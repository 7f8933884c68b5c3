"""NAT's ARTTrainerAdapter, unmodified, built from NAT's own config classes, against an ART
server (arthex serve --protocol art). Executed by NAT's venv.

initialize (register, prepare, NAT's health check on the server's port 8000), then two
submissions of a two-group TrajectoryCollection sampled from the server's inference endpoint
(the second with `delete_old_checkpoints`, as NAT's config turns it on), each waited on with
`wait_until_complete`; then what is served, and what ART's Model wrote on this side.

stdin: {"ip", "port", "base_model", "name", "project", "learning_rate", "out"}
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import nat_common as common


async def main() -> None:
    from nat.plugins.openpipe.trainer_adapter import ARTTrainerAdapter

    payload = common.read_payload()
    config = common.adapter_config(
        payload["ip"],
        payload["port"],
        name=payload["name"],
        project=payload["project"],
        base_model=payload["base_model"],
        learning_rate=payload["learning_rate"],
        delete_old_checkpoints=False,
    )
    adapter = ARTTrainerAdapter(config)
    result: dict[str, Any] = {"submissions": []}
    await adapter.initialize(common.finetune_config())
    model = adapter.model
    result["registered"] = {
        "inference_base_url": model.inference_base_url,
        "inference_api_key": model.inference_api_key,
        "inference_model_name": model.inference_model_name,
    }
    result["healthy"] = await adapter.is_healthy()
    steps = [await model.get_step()]
    for run_id, delete in (("epoch-1", False), ("epoch-2", True)):
        adapter.adapter_config.backend.delete_old_checkpoints = delete
        served = f"{model.name}@{steps[-1]}"
        collection = await common.sampled_collection(
            model.inference_base_url, model.inference_api_key, served, run_id
        )
        started = time.monotonic()
        ref = await adapter.submit(collection)
        status = await adapter.wait_until_complete(ref, poll_interval=0.2)
        result["submissions"].append(
            {
                "run_id": run_id,
                "status": str(status.status),
                "message": status.message,
                "seconds": time.monotonic() - started,
                "delete_old_checkpoints": delete,
            }
        )
        steps.append(await model.get_step())
    result["steps"] = steps
    inference = f"http://{payload['ip']}:8000/v1"
    headers = {"Authorization": f"Bearer {config.backend.api_key}"}
    async with httpx.AsyncClient(timeout=120) as client:
        listed = (await client.get(f"{inference}/models", headers=headers)).json()
        answer = await client.post(
            f"{inference}/chat/completions",
            headers=headers,
            json={
                "model": f"{model.name}@{steps[-1]}",
                "messages": [{"role": "user", "content": "Hello"}],
                "max_tokens": 4,
            },
        )
    result["served"] = sorted(item["id"] for item in listed["data"])
    result["chat_status"] = answer.status_code
    result["chat_model"] = answer.json().get("model")
    result["layout"] = common.run_layout(model.base_path, model.project, model.name)
    result["base_path"] = model.base_path
    common.answer(payload, result)


if __name__ == "__main__":
    asyncio.run(main())
