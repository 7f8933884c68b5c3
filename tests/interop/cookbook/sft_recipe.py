"""tinker-cookbook's supervised recipe (`tinker_cookbook.supervised.train.main`), unmodified,
on an in-memory chat dataset built with the cookbook's own classes. Executed by the cookbook's
venv, with TINKER_BASE_URL and TINKER_API_KEY naming the server.

The dataset is a `ChatDatasetBuilder` (the cookbook's extension point for chat data) whose
rows live in a `datasets.Dataset` made in memory, rendered by the cookbook's `role_colon`
renderer with the model folder's own tokenizer and turned into Datums by
`conversation_to_datum`, served in batches by `SupervisedDatasetFromHFDataset`: what
`FromConversationFileBuilder` does, without the file. The same batch is seen every epoch, so
the recipe's `train_mean_nll` (in its `metrics.jsonl`) should fall from step to step.

stdin: {"model": the model folder, "log_path", "epochs", "learning_rate", "lora_rank"}
"""

from __future__ import annotations

import asyncio
import json
import sys

import chz
import datasets
import tinker
from tinker_cookbook.renderers import TrainOnWhat
from tinker_cookbook.supervised import train
from tinker_cookbook.supervised.data import SupervisedDatasetFromHFDataset, conversation_to_datum
from tinker_cookbook.supervised.types import (
    ChatDatasetBuilder,
    ChatDatasetBuilderCommonConfig,
    SupervisedDataset,
)

CONVERSATIONS = [
    [
        {"role": "user", "content": "What is two plus two?"},
        {"role": "assistant", "content": "Two plus two is four."},
    ],
    [
        {"role": "user", "content": "Count from one to five."},
        {"role": "assistant", "content": "one two three four five"},
    ],
    [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "How is the weather?"},
        {"role": "assistant", "content": "The weather today is sunny."},
    ],
    [
        {"role": "user", "content": "Say yes or no."},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "And now the other one."},
        {"role": "assistant", "content": "no"},
    ],
]


@chz.chz
class InMemoryConversations(ChatDatasetBuilder):
    """CONVERSATIONS as one batch (batch_size = their number) of a supervised dataset."""

    def __call__(self) -> tuple[SupervisedDataset, SupervisedDataset | None]:
        rows = datasets.Dataset.from_list([{"messages": c} for c in CONVERSATIONS])
        renderer = self.renderer
        config = self.common_config

        def to_datum(row: dict) -> tinker.Datum:
            return conversation_to_datum(
                row["messages"], renderer, config.max_length, TrainOnWhat.ALL_ASSISTANT_MESSAGES
            )

        return SupervisedDatasetFromHFDataset(rows, config.batch_size, map_fn=to_datum), None


def main() -> None:
    payload = json.load(sys.stdin)
    model = payload["model"]
    builder = InMemoryConversations(
        common_config=ChatDatasetBuilderCommonConfig(
            model_name_for_tokenizer=model,
            renderer_name="role_colon",
            max_length=128,
            batch_size=len(CONVERSATIONS),
        )
    )
    config = train.Config(
        log_path=payload["log_path"],
        model_name=model,
        recipe_name="arthex_interop_sft",
        renderer_name="role_colon",
        dataset_builder=builder,
        learning_rate=payload["learning_rate"],
        lr_schedule="constant",
        num_epochs=payload["epochs"],
        lora_rank=payload["lora_rank"],
        save_every=0,
        eval_every=0,
    )
    asyncio.run(train.main(config))


if __name__ == "__main__":
    main()
