"""One script, run twice: under ART 0.5.23 (`python frontend_script.py art DIR OUT`) and under
arthex (`... arthex.art DIR OUT`). It touches ART's frontend utilities through the package it
is given and writes what it saw, as JSON, to OUT; the interop test compares the two.

It writes its own trajectory file into DIR, then reads every `*.parquet` there (the other
library's file too, when it is there), so each library reads what the other wrote.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
from pathlib import Path
from typing import Any

LIB, DIR, OUT = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
art = importlib.import_module(LIB)


def module(path: str) -> Any:
    return importlib.import_module(f"{LIB}.{path}")


def choice(content: str, *, tool: bool = False) -> Any:
    from openai.types.chat.chat_completion import Choice

    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup", "arguments": '{"q": "x"}'},
            }
        ]
    return Choice.model_validate(
        {
            "finish_reason": "tool_calls" if tool else "stop",
            "index": 0,
            "message": message,
            "logprobs": {
                "content": [{"token": "a", "logprob": -0.5, "bytes": [97], "top_logprobs": []}]
            },
        }
    )


TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


def groups() -> list[Any]:
    exception = module("trajectories").PydanticException(
        type="ValueError", message="rollout failed", traceback="Traceback ..."
    )
    first = art.Trajectory(
        messages_and_choices=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
            choice("", tool=True),
            {"role": "tool", "content": "found", "tool_call_id": "call_1"},
            choice("hello"),
        ],
        tools=TOOLS,
        additional_histories=[
            {
                "messages_and_choices": [{"role": "user", "content": "sub"}, choice("sub-answer")],
                "tools": TOOLS,
            }
        ],
        reward=0.75,
        metrics={"turns": 2, "ok": True, "score": 0.5},
        metadata={"scenario": "s1", "seed": 7},
        logs=["first log"],
    )
    second = art.Trajectory(
        messages_and_choices=[
            {"role": "user", "content": [{"type": "text", "text": "parts"}]},
            choice("ünïcode ✓"),
        ],
        reward=-1.0,
    )
    return [
        art.TrajectoryGroup(
            trajectories=[first, second],
            exceptions=[exception],
            metadata={"batch": 3},
            metrics={"group_metric": 1.5},
            logs=["group log"],
        ),
        art.TrajectoryGroup(trajectories=[], exceptions=[exception]),  # every rollout failed
        art.TrajectoryGroup(
            trajectories=[
                art.Trajectory(
                    messages_and_choices=[{"role": "user", "content": "q"}, choice("a")], reward=1.0
                )
            ]
        ),
    ]


def message(item: Any) -> Any:
    return item.model_dump(mode="json", exclude_none=True) if hasattr(item, "model_dump") else item


def trajectory(t: Any) -> dict[str, Any]:
    return {
        "messages_and_choices": [message(m) for m in t.messages_and_choices],
        "choice_types": [type(m).__name__ for m in t.messages_and_choices],
        "tools": t.tools,
        "additional_histories": [
            {"messages_and_choices": [message(m) for m in h.messages_and_choices], "tools": h.tools}
            for h in t.additional_histories
        ],
        "reward": t.reward,
        "metrics": t.metrics,
        "metadata": t.metadata,
        "logs": t.logs,
    }


def group(g: Any) -> dict[str, Any]:
    return {
        "trajectories": [trajectory(t) for t in g.trajectories],
        "exceptions": [[e.type, e.message, e.traceback] for e in g.exceptions],
        "metadata": g.metadata,
        "metrics": g.metrics,
        "logs": g.logs,
    }


def error(call: Any) -> str:
    try:
        call()
    except ValueError:
        return "ValueError"
    except Exception as caught:
        return type(caught).__name__
    return "no error"


def trajectory_files(out: dict[str, Any]) -> None:
    files = module("utils.trajectory_logging")
    name = "art" if LIB == "art" else "arthex"
    files.write_trajectory_groups_parquet(groups(), DIR / f"{name}.parquet")
    files.write_trajectory_groups_parquet([], DIR / f"{name}-empty.parquet")
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(DIR / f"{name}.parquet").metadata
    out["written"] = {
        "columns": pq.read_schema(DIR / f"{name}.parquet").names,
        "rows": meta.num_rows,
        "codec": meta.row_group(0).column(0).compression,
        "version": pq.read_schema(DIR / f"{name}.parquet")
        .metadata[b"art.trajectory_parquet.version"]
        .decode(),
    }
    for path in sorted(DIR.glob("*.parquet")):
        if path.name.startswith("bad-"):
            out[f"read {path.name}"] = error(lambda p=path: files.read_trajectory_groups_parquet(p))
        else:
            out[f"read {path.name}"] = [
                group(g) for g in files.read_trajectory_groups_parquet(path)
            ]


def small_helpers(out: dict[str, Any]) -> None:
    strip = module("utils.strip_logprobs").strip_logprobs
    nested = {"a": [{"logprobs": [1], "b": (1, {"logprobs": 2, "c": 3})}], "logprobs": None}
    out["strip dict"] = json.loads(json.dumps(strip(nested)))
    original = choice("kept")
    stripped = strip(original)
    out["strip choice"] = [
        stripped.logprobs,
        original.logprobs is not None,
        stripped.message.content,
        type(stripped).__name__,
    ]

    async def rollout(reward: float) -> None:
        await asyncio.sleep(0)
        art.yield_trajectory(
            art.Trajectory(messages_and_choices=[{"role": "user", "content": "y"}], reward=reward)
        )

    async def silent() -> None:
        await asyncio.sleep(0)

    async def main() -> list[Any]:
        got = await asyncio.gather(*(art.capture_yielded_trajectory(rollout(r)) for r in (1, 2)))
        try:
            await art.capture_yielded_trajectory(silent())
            missing = "no error"
        except RuntimeError as caught:
            missing = str(caught)
        return [[t.reward for t in got], missing]

    out["yield"] = asyncio.run(main())


def rounded(value: Any) -> Any:
    """Floats to 12 significant digits: sums ART takes over a set come in any order."""
    if isinstance(value, float):
        return float(f"{value:.12g}")
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [rounded(item) for item in value]
    return value


def outcome(call: Any) -> Any:
    try:
        return rounded(call())
    except Exception as caught:
        kind = "ValueError" if isinstance(caught, ValueError) else type(caught).__name__
        return f"{kind}: {caught}"[:60]


def costs(out: dict[str, Any]) -> None:
    from openai.types.chat import ChatCompletion

    prices = module("costs")
    qwen = prices.get_model_pricing("Qwen/Qwen3-8B")
    out["pricing"] = [qwen.prefill, qwen.sample, qwen.train, prices.get_model_pricing("nope")]
    out["pricing strict"] = outcome(lambda: prices.get_model_pricing("nope", strict=True))[:40]
    calculate = prices.build_cost_calculator(qwen)
    out["calculator"] = outcome(lambda: calculate(1000, None, "/train/"))
    out["calculator empty"] = outcome(lambda: calculate(1, 1, "//"))
    out["train cost"] = outcome(lambda: prices.compute_train_cost(2_500_000, qwen))

    api = module("api_costs")
    completion = ChatCompletion.model_validate(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4.1",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "x"},
                }
            ],
            "usage": {
                "prompt_tokens": 1200,
                "completion_tokens": 300,
                "total_tokens": 1500,
                "prompt_tokens_details": {"cached_tokens": 200},
            },
        }
    )
    anthropic = {
        "usage": {
            "input_tokens": 1000,
            "output_tokens": 100,
            "cache_creation_input_tokens": 50,
            "cache_read_input_tokens": 400,
        }
    }
    none = dict.fromkeys(
        (
            "prompt_price_per_million",
            "completion_price_per_million",
            "cached_prompt_price_per_million",
            "cache_creation_price_per_million",
            "cache_read_price_per_million",
        )
    )

    def cost(response: Any, provider: str, model: str, **given: Any) -> Any:
        return outcome(
            lambda: api.extract_api_cost(
                response,
                provider=provider,
                model_name=model,
                **{**none, **given},
                cost_extractors={},
                model_pricing={},
            )
        )

    out["api openai"] = cost(completion, "OpenAI ", "openai/gpt-4.1")
    out["api openai priced"] = cost(
        completion, "openai", "openai/gpt-4.1", completion_price_per_million=1.0
    )
    out["api anthropic"] = cost(anthropic, "anthropic", "anthropic/claude-sonnet-4-6")
    out["api listed"] = cost(completion, "openai", "Qwen/Qwen3-8B")
    out["api litellm"] = cost(completion, "openai", "gpt-4o-mini")
    out["api reported"] = cost({"usage": {"cost": {"total_cost": 0.25}}}, "x", "")
    out["api unknown model"] = cost(completion, "openai", "no-such-model")
    out["api wrong usage"] = cost(anthropic, "openai", "openai/gpt-4.1")
    out["api unknown provider"] = cost(completion, "acme", "openai/gpt-4.1")
    out["api empty provider"] = cost(completion, " ", "openai/gpt-4.1")

    metrics = module("metrics")
    builder = metrics.MetricsBuilder(cost_context="train")
    builder.register_model_pricing("my-judge", prompt_per_million=1.0, completion_per_million=2.0)
    builder.add_cost("train/tinker_prefill", 0.5)
    builder.add_cost("train/judge/a", 0.25)
    builder.add_cost("eval", 1.0)
    builder.add_metric("time/step_wall_s", 3.0)
    builder.add_data(step_num_scenarios=4, step_rollout_tokens=100, scenario_ids=["a", "b"])
    builder.add_user_timing(step_rollout_s=2.0)
    out["builder response"] = outcome(
        lambda: builder.add_response_cost(
            "/judge/b/", completion, provider="openai", model_name="my-judge"
        )
    )
    out["builder ancestor"] = outcome(lambda: builder.add_metric("costs/train/judge", 1.0))
    out["builder cum"] = outcome(lambda: builder.add_metric("costs/cum/x", 1.0))
    out["builder bare"] = outcome(lambda: builder.add_metric("plain", 1.0))
    evaluation = builder.for_cost_context("eval")
    evaluation.add_cost("eval/judge", 2.0)

    @api.track_api_cost(
        source="grader", provider="anthropic", model_name="anthropic/claude-sonnet-4-6"
    )
    def grade() -> Any:
        return anthropic

    @api.track_api_cost(
        source="agent",
        provider="openai",
        model_name="openai/gpt-4.1",
        response_getter=lambda result: result[1],
    )
    async def act() -> Any:
        return ("ignored", completion)

    grade()  # no active builder: nothing recorded

    async def flushes() -> list[Any]:
        with evaluation.activate_context():
            grade()
            await act()
        first = await builder.flush()
        builder.add_cost("train/tinker_prefill", 1.0)
        builder.add_data(scenario_ids=["b", "c"])
        second = await builder.flush()
        return [first, second, await evaluation.flush(), builder.state_dict()["cum_state"]]

    first, second, evaluated, state = asyncio.run(flushes())
    out["flush 1"], out["flush 2"] = rounded(first), rounded(second)
    out["flush eval"], out["state"] = rounded(evaluated), rounded(state)
    out["cum keys"] = [
        metrics.to_cumulative_metric_key("time/step_wall_s"),
        metrics.is_cumulative_metric_key("data/cum/x"),
        metrics.is_builder_managed_metric("data/step_x"),
        outcome(lambda: metrics.to_cumulative_metric_key("costs/cum/a")),
    ]

    taxonomy = module("metrics_taxonomy")
    groups = [
        art.TrajectoryGroup(
            trajectories=[art.Trajectory(reward=r, metadata={"scenario_id": 7}) for r in (0.0, 1.0)]
        ),
        art.TrajectoryGroup(
            trajectories=[art.Trajectory(reward=1.0)] * 2, metadata={"scenario_id": "7"}
        ),
        art.TrajectoryGroup(trajectories=[art.Trajectory(reward=0.5, metadata={"scenario_id": 8})]),
    ]
    summary = taxonomy.summarize_trajectory_groups(groups)
    out["summary"] = [
        summary.num_scenarios,
        summary.num_trajectories,
        summary.num_groups_trainable,
        summary.scenario_ids,
        taxonomy.build_data_metrics_from_summary(summary, include_trainable_groups=True),
    ]
    samples = [{"loss": 1.0, "data/step_num_gradient_steps": 2}, {"loss": 2.0, "x": 5}]
    out["averaged"] = outcome(lambda: taxonomy.average_metric_samples(samples))
    out["averaged varying"] = outcome(
        lambda: taxonomy.average_metric_samples(
            [{"data/step_num_gradient_steps": 1}, {"data/step_num_gradient_steps": 2}]
        )
    )


def sft(out: dict[str, Any]) -> None:
    sft = module("utils.sft")

    def said(t: Any) -> str:
        return t.messages_and_choices[0]["content"]

    items = [
        art.Trajectory(messages_and_choices=[{"role": "user", "content": f"q{i}"}])
        for i in range(7)
    ]
    chunks = [
        [
            [said(t) for t in c.trajectories],
            [float(f"{r:.12g}") for r in c.config.learning_rate],
            c.config.batch_size,
            c.step,
            c.epoch,
            c.epoch_step,
        ]
        for c in sft.create_sft_dataset_iterator(
            items,
            chunk_size=2,
            epochs=2,
            batch_size=2,
            peak_lr=1e-4,
            schedule_type="cosine",
            warmup_ratio=0.2,
            initial_step=2,
            show_progress=False,
        )
    ]
    out["sft chunks"] = chunks
    out["sft chunks plain"] = [
        [[said(t) for t in c.trajectories], c.step]
        for c in sft.create_sft_dataset_iterator(
            items, chunk_size=3, shuffle=False, show_progress=False
        )
    ]
    path = DIR / "sft.jsonl"
    lines = [
        json.dumps(
            {
                "messages": [{"role": "user", "content": f"l{i}"}],
                **({"tools": TOOLS} if i == 2 else {}),
            }
        )
        for i in range(9)
    ]
    path.write_text("\n".join(lines[:4]) + "\n\n" + "\n".join(lines[4:]) + "\n")
    out["sft rows"] = sft.get_file_row_count(str(path))
    out["sft not jsonl"] = outcome(lambda: sft.get_file_row_count(str(DIR / "x.txt")))
    streamed = list(
        sft.iterate_file(str(path), epochs=2, shuffle_buffer_size=4, seed=3, initial_skip=3)
    )
    out["sft stream"] = [said(t) for t in streamed]
    out["sft tools"] = [t.tools for t in streamed if said(t) == "l2"][:1]
    out["sft batch"] = [
        sft.resolve_sft_batch_size(batch_size="auto", default_batch_size=4),
        sft.resolve_sft_batch_size(batch_size=3, default_batch_size=4),
    ]
    out["sft schedule"] = rounded(sft.create_lr_schedule(6, 1.0, "linear", warmup_steps=2))


def litellm_choice(out: dict[str, Any]) -> None:
    from litellm.types.utils import ChoiceLogprobs, Choices, Message

    convert = module("utils.litellm").convert_litellm_choice_to_openai
    tool = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    token = {
        "token": "a",
        "bytes": [97],
        "logprob": -0.1,
        "top_logprobs": [
            {"token": "a", "bytes": [97], "logprob": -0.1},
            {"token": "b", "bytes": [98], "logprob": -2.5},
        ],
    }
    choice = Choices(
        finish_reason="tool_calls",
        index=1,
        message=Message(content="hi", role="assistant", tool_calls=[tool]),
        logprobs=ChoiceLogprobs(content=[token]),
    )
    converted = convert(choice)
    out["litellm choice"] = [type(converted).__name__, converted.model_dump(mode="json")]
    plain = convert(
        Choices(finish_reason="stop", index=0, message=Message(content="x", role="assistant"))
    )
    out["litellm plain"] = plain.model_dump(mode="json")


def retention(out: dict[str, Any]) -> None:
    from datetime import UTC, datetime

    kept = module("pipeline_trainer.checkpoint_retention")
    scores = {1: 0.9, 2: 0.1, 3: 0.9, 4: 0.5, 6: 0.2, 9: 0.95}
    context = kept.CheckpointRetentionContext(
        current_step=10,
        checkpoints=[
            kept.CheckpointInfo(
                step=s,
                path=f"/c/{s}",
                created_at=datetime(2026, 1, 1, tzinfo=UTC),
                metrics={"reward/val": scores[s]} if s in scores else {},
            )
            for s in (7, 1, 2, 3, 4, 5, 6, 9)
        ],
    )
    out["retention"] = [
        sorted(kept.keep_recent_and_top(recent=r, top=t)(context))
        for r, t in ((5, 2), (2, 2), (0, 3), (0, 0), (20, 0))
    ]
    out["retention names"] = [
        kept.CHECKPOINT_CREATED_AT_METRIC,
        kept.CHECKPOINT_EVAL_COMPLETED_METRIC,
        kept.CHECKPOINT_SAVED_METRIC,
    ]
    out["retention bad"] = outcome(lambda: kept.keep_recent_and_top(top=-1))[:28]


def migration(out: dict[str, Any]) -> None:
    import shutil

    migrate = module("utils.trajectory_migration")
    files = module("utils.trajectory_logging")
    name = "art" if LIB == "art" else "arthex"
    shutil.rmtree(DIR / f"migrated-by-{name}", ignore_errors=True)  # a second run's
    written = [g for g in groups() if g.trajectories]  # JSONL kept no failed-only group
    (DIR / f"{name}-groups.jsonl").write_text(migrate.serialize_trajectory_groups(written))
    for path in sorted(DIR.glob("*-groups.jsonl")):
        read = migrate.deserialize_trajectory_groups(path.read_text())
        out[f"jsonl {path.name}"] = [group(g) for g in read]
        run = DIR / f"migrated-by-{name}" / path.stem / "models" / "m"
        split = run / "trajectories" / "train"
        split.mkdir(parents=True)
        shutil.copy(path, split / "0001.jsonl")
        (split / "0002.jsonl").write_text("not json\n")
        result = migrate.migrate_all_models(run.parents[2], path.stem)
        out[f"migrated {path.name}"] = [
            result.files_migrated,
            result.files_skipped,
            len(result.errors),
            sorted(p.name for p in split.iterdir()),
            [group(g) for g in files.read_trajectory_groups_parquet(split / "0001.parquet")],
        ]
    out["migration dicts"] = [
        type(migrate.dict_to_message_or_choice({"message": {"role": "user"}})).__name__,
        migrate.message_or_choice_to_dict(choice("x"))["message"]["content"],
    ]


def main() -> None:
    out: dict[str, Any] = {}
    parts = [
        "trajectory_files",
        "small_helpers",
        "costs",
        "sft",
        "litellm_choice",
        "retention",
        "migration",
    ]
    for part in sys.argv[4:] or parts:
        globals()[part](out)
    OUT.write_text(json.dumps(out, indent=1, sort_keys=True, default=str))


main()
