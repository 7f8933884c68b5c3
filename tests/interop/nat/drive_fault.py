"""NAT's adapter while its ART server is killed in the middle of an update, then restarted on
the same address. Executed by NAT's venv; the test owns the server and kills it.

1. initialize, one submission -> COMPLETED (step 1);
2. `pause` the next update (a file the test's backend waits on), submit, and once the server
   says it is updating (`paused`), tell the test (`submitted`); the test kills the server and
   writes `killed` (the time of the kill); the adapter's status is polled until it is not
   RUNNING: it must be FAILED, with the cause, within 30 s;
3. wait for `restarted`, then the same adapter (not initialized again) submits the next
   collection -> COMPLETED, from the last completed step.

stdin: {"ip", "port", "base_model", "name", "project", "pause_dir", "out"}
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import nat_common as common

WAIT_S = 300.0


async def wait_for(path: Path, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():  # noqa: ASYNC240 (a file another process writes)
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {WAIT_S} s for {what} ({path})")
        await asyncio.sleep(0.05)


async def main() -> None:
    from nat.data_models.finetuning import TrainingStatusEnum
    from nat.plugins.openpipe.trainer_adapter import ARTTrainerAdapter

    payload = common.read_payload()
    pause_dir = Path(payload["pause_dir"])
    config = common.adapter_config(
        payload["ip"], payload["port"], name=payload["name"], project=payload["project"],
        base_model=payload["base_model"], learning_rate=1e-4, delete_old_checkpoints=False,
    )  # fmt: skip
    adapter = ARTTrainerAdapter(config)
    await adapter.initialize(common.finetune_config())
    model = adapter.model
    result: dict[str, Any] = {}

    async def collection(run_id: str, step: int) -> Any:
        return await common.sampled_collection(
            model.inference_base_url, model.inference_api_key, f"{model.name}@{step}", run_id
        )

    ref = await adapter.submit(await collection("epoch-1", 0))
    result["first"] = str((await adapter.wait_until_complete(ref, poll_interval=0.1)).status)
    result["step_before_kill"] = await model.get_step()

    second = await collection("epoch-2", result["step_before_kill"])
    (pause_dir / "pause").touch()
    ref = await adapter.submit(second)
    await wait_for(pause_dir / "paused", "the server to start the update")
    (pause_dir / "submitted").touch()
    await wait_for(pause_dir / "killed", "the test to kill the server")
    killed_at = float((pause_dir / "killed").read_text())
    deadline = time.monotonic() + 60
    status = await adapter.status(ref)
    while status.status == TrainingStatusEnum.RUNNING and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        status = await adapter.status(ref)
    result["killed"] = {
        "status": str(status.status),
        "message": status.message,
        "seconds_after_kill": time.time() - killed_at,
    }

    await wait_for(pause_dir / "restarted", "the test to restart the server")
    result["step_after_restart"] = await model.get_step()
    ref = await adapter.submit(await collection("epoch-3", result["step_after_restart"]))
    result["third"] = str((await adapter.wait_until_complete(ref, poll_interval=0.1)).status)
    result["step_after_third"] = await model.get_step()
    result["layout"] = common.run_layout(model.base_path, model.project, model.name)
    common.answer(payload, result)


if __name__ == "__main__":
    asyncio.run(main())
