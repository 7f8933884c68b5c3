"""Supervised fine-tuning jobs on the training server: `POST /preview/sft-training-jobs`.

The body is `{model_id, conversations: [OpenAI fine-tuning records], config: TrainSFTConfig}`
(ART's path; ART uploads the data as a W&B artifact and sends its URL, we send the records,
within the server's body limit). The job is a training job like any other: one per model at a
time, its events read at `/preview/training-jobs/{id}/events`, one `gradient_step` event per
batch, and the model's step advances by one when it ends.
"""

from __future__ import annotations

from ...core.conversations import Conversation, conversation_from
from ...core.errors import InvalidInputError
from ...core.sft import TrainSFTConfig
from ...ports.training_backend import supervised
from .jobs import JobLog
from .service import TrainingService

MAX_CONVERSATIONS = 100_000


async def start_sft_job(
    service: TrainingService,
    tenant: str,
    model_id: object,
    conversations: object,
    config: object,
    lease: str | None = None,
) -> JobLog:
    """Check everything (the model, the config, every record, the backend's `sft`), then start
    the job; nothing is written when a check fails."""
    if not isinstance(model_id, str):
        raise InvalidInputError("model_id must be the id returned by POST /preview/models")
    record = service.model(tenant, model_id)
    parsed_config = TrainSFTConfig.from_json(config)
    parsed = parse_conversations(conversations)
    batches = parsed_config.plan(len(parsed))
    trainer = supervised(service.backend)
    started = {"kind": "sft", "num_conversations": len(parsed), "num_sequences": len(batches)}
    return await service.launch(
        tenant, record, started, lambda: trainer.train_sft(record.run, parsed, parsed_config), lease
    )


def parse_conversations(payload: object) -> list[Conversation]:
    if not isinstance(payload, list):
        raise InvalidInputError("conversations must be a JSON list of fine-tuning records")
    if not payload:
        raise InvalidInputError("train_sft got no conversations: there is nothing to train on")
    if len(payload) > MAX_CONVERSATIONS:
        raise InvalidInputError(
            f"{len(payload)} conversations in one job; send at most {MAX_CONVERSATIONS} per call"
        )
    return [conversation_from(item, f"conversations[{i}]") for i, item in enumerate(payload)]
