"""NAT's ARTTrainerAdapter, unmodified, built from NAT's own config classes, against an ART
server (arthex serve --protocol art). Executed by NAT's venv.

initialize (register, prepare, NAT's health check on the server's port 8000), then two
submissions of a two-group TrajectoryCollection sampled from the server's inference endpoint
(the second with `delete_old_checkpoints`, as NAT's config turns it on), each waited on with
`wait_until_complete`; then what is served, and what ART's Model wrote on this side.

The config is the NAT config of docs/backends/nat.md: every finetuning section of it is
validated with NAT's own classes, and the adapter is built from its `trainer_adapters`
section with only the address and the base model replaced.

stdin: {"config": the docs' YAML as JSON, "adapter": its adapter's name, "ip", "port",
        "base_model", "out"}
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import nat_common as common


async def main() -> None:
    from nat.data_models.finetuning import FinetuneConfig
    from nat.llm.openai_llm import OpenAIModelConfig
    from nat.plugins.openpipe.config import (
        ARTTrainerAdapterConfig,
        ARTTrainerConfig,
        ARTTrajectoryBuilderConfig,
    )
    from nat.plugins.openpipe.trainer_adapter import ARTTrainerAdapter

    payload = common.read_payload()
    sections = payload["config"]
    finetuning = FinetuneConfig.model_validate(sections["finetuning"])
    for llm in sections["llms"].values():
        OpenAIModelConfig.model_validate(llm)
    ARTTrajectoryBuilderConfig.model_validate(
        sections["trajectory_builders"][finetuning.trajectory_builder]
    )
    ARTTrainerConfig.model_validate(sections["trainers"][finetuning.trainer])
    section = sections["trainer_adapters"][finetuning.trainer_adapter]
    backend = {
        **section["backend"],
        "ip": payload["ip"],
        "port": payload["port"],
        "base_model": payload["base_model"],
    }
    config = ARTTrainerAdapterConfig.model_validate({**section, "backend": backend})
    configured_delete = config.backend.delete_old_checkpoints
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
    # the first epoch without deleting, the second as the docs' config says (it deletes)
    for run_id, delete in (("epoch-1", False), ("epoch-2", configured_delete)):
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
