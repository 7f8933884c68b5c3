"""ART's binary-prefix tool pipeline example over arthex: the model must call `make_guess` once
with a guess at a 30-bit secret string, and earns the length of the prefix its guess shares with
the secret. Same constants, tools, prompts, parsing and environment settings as ART 0.5.23's
`art.pipeline_trainer.binary_prefix_tool_pipeline`; the rollout and evaluation ART defines
inside `main` are `rollout` and `evaluate` here, so they can be called on their own.

Run: `python -m arthex.art.pipeline_trainer.binary_prefix_tool_pipeline` (or this module). The
backend is runtime.py's choice: Tinker on `BASE_MODEL` as in ART when TINKER_API_KEY is set,
else arthex.LocalBackend on a small model (`ARTHEX_BACKEND`, `BASE_MODEL` override).
`LORA_RANK` sets the adapter's rank on either (ART passes it in Tinker's `_internal_config`).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, TypeAlias, cast

import attrs
from openai.types.chat.chat_completion_tool_choice_option_param import (
    ChatCompletionToolChoiceOptionParam,
)
from openai.types.chat.chat_completion_tool_param import ChatCompletionToolParam

from ...adapters.jsonl_history import read_rows
from ...adapters.layout import RunLayout
from ...composition.api import TrainableModel
from ...core.chat_types import Messages
from ...core.errors import InvalidInputError
from ...core.metrics import MetricsRow
from ...core.model import Model
from ...core.pipeline import PipelineTrainer, make_group_rollout_fn
from ...core.pipeline.runtime_config import PipelineRuntimeConfig
from ...core.trajectories import MetricValue, Trajectory
from . import runtime

Scenario: TypeAlias = dict[str, Any]


@attrs.define
class PipelineConfig:
    temperature: float
    eval_temperature: float
    max_tokens: int


TOOL_NAME = "make_guess"
SECRET_BITS = "110000110100101011111010101011"
SECRET_LEN = len(SECRET_BITS)

TOOLS: list[ChatCompletionToolParam] = [
    cast(
        ChatCompletionToolParam,
        {
            "type": "function",
            "function": {
                "name": TOOL_NAME,
                "description": "Submit a binary guess for the secret string.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "guess": {
                            "type": "string",
                            "description": (
                                f"A binary string of length {SECRET_LEN} consisting of 0 and 1."
                            ),
                        }
                    },
                    "required": ["guess"],
                    "additionalProperties": False,
                },
            },
        },
    )
]
TOOL_CHOICE: ChatCompletionToolChoiceOptionParam = {
    "type": "function",
    "function": {"name": TOOL_NAME},
}

SYSTEM_PROMPT = (
    f"You are playing a prefix-guessing game. You must call the tool {TOOL_NAME} exactly once "
    f"with your best guess. The argument must be a {SECRET_LEN}-character string of only 0 "
    "and 1. Do not output any other text. Your reward is the length of the shared prefix with "
    "the secret string."
)
USER_PROMPT = "Call the tool with your best binary guess."

# the forms of a guess in arguments that are not a JSON object holding it, tried in turn
_QUOTED_GUESS = (re.compile(r'guess\s*[:=]\s*"([^"]*)"'), re.compile(r"guess\s*[:=]\s*'([^']*)'"))
_BARE_BITS = re.compile(r"[01\s]+")


def is_valid_guess(guess: str) -> bool:
    """Only 0s and 1s (the empty guess too: it shares no prefix)."""
    return set(guess) <= {"0", "1"}


def shared_prefix_len(guess: str, secret: str) -> int:
    """How many leading characters the two strings share."""
    pairs = zip(guess, secret, strict=False)
    return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(guess), len(secret)))


def _json_object(text: str) -> object:
    """`text` as JSON, else the span from its first `{` to its last `}` as JSON, else None."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    start, end = text.find("{"), text.rfind("}")
    if start == -1 or end <= start:
        return None
    try:
        return json.loads(text[start : end + 1])
    except json.JSONDecodeError:
        return None


def _parse_guess_args(arguments: str | None) -> str | None:
    """The guess in a tool call's arguments: the `guess` of a JSON object (a non-string value
    as its `str`), else `guess: "..."` or `guess='...'` written loosely, else the arguments
    themselves when they are only bits and spaces."""
    text = (arguments or "").strip()
    if not text:
        return None
    payload = _json_object(text)
    if isinstance(payload, dict) and payload.get("guess") is not None:
        guess = payload["guess"]
        return guess if isinstance(guess, str) else str(guess)
    for pattern in _QUOTED_GUESS:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return text if _BARE_BITS.fullmatch(text) else None


def _tool_name_and_args(tool_call: Any) -> tuple[str | None, str | None]:
    """(name, arguments) of an openai tool call object or of its dict form."""
    if hasattr(tool_call, "function"):
        function = tool_call.function
        return getattr(function, "name", None), getattr(function, "arguments", None)
    if isinstance(tool_call, dict):
        function = tool_call.get("function") or {}
        return function.get("name"), function.get("arguments")
    return None, None


def extract_guess(choice: Any) -> tuple[str | None, str]:
    """(guess, "tool_call") from the first `make_guess` call whose arguments hold a guess, else
    (None, "missing")."""
    for tool_call in getattr(choice.message, "tool_calls", None) or []:
        name, arguments = _tool_name_and_args(tool_call)
        if name != TOOL_NAME:
            continue
        guess = _parse_guess_args(arguments)
        if guess is not None:
            return guess, "tool_call"
    return None, "missing"


def get_model_output_dir(model: Model) -> Path:
    """The run's directory, `{base_path}/{project}/models/{run_name}` (arthex's RunLayout)."""
    return RunLayout.of(model.base_path, model.run).dir


# What ART's summary prints, and where: ART 0.5.23's trainer no longer writes the last two keys
# its summary reads (so ART's summary stops with a KeyError on its own runs); arthex's pipeline
# records those measures under the second names, in the row of the update that trained the
# batch, which follows the batch's `train/reward` row.
_SUMMARY_KEYS = (
    ("reward", "train/reward", None),
    ("std", "train/reward_std_dev", None),
    ("discarded", "train/discarded_stale_groups", "discarded/cum/stale_groups"),
    ("off_policy", "train/steps_off_policy", "offpolicy/token_weighted_policy_age_steps"),
)


def _summary_values(rows: list[MetricsRow], at: int) -> list[str]:
    """The summary's values for the training row `rows[at]`: its own, else (arthex's names)
    from the rows after it, up to the next training row."""
    row = rows[at]
    after = []
    for later in rows[at + 1 :]:
        if "train/reward" in later.values:
            break
        after.append(later)
    shown = [f"step={row.step}"]
    for label, key, fallback in _SUMMARY_KEYS:
        value = row.values.get(key)
        if value is None and fallback is not None:
            found = (
                r.values[fallback] for r in [row, *after] if r.values.get(fallback) is not None
            )
            value = next(found, None)
        shown.append(f"{label}={value}")
    return shown


def print_history_summary(model: Model, tail: int = 5) -> None:
    """The last `tail` training rows of the run's history (read with arthex's ledger reader):
    step, reward, its spread, stale groups discarded so far and the batch's policy age."""
    history_path = get_model_output_dir(model) / "history.jsonl"
    if not history_path.exists():
        print(f"No history found at {history_path}")
        return
    rows = read_rows(history_path)
    train_at = [i for i, row in enumerate(rows) if "train/reward" in row.values]
    print("\nRecent training metrics:")
    for at in train_at[-tail:]:
        print(f"  {' '.join(_summary_values(rows, at))}")


def build_scenario() -> Scenario:
    return {
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": USER_PROMPT},
        ],
    }


async def rollout(
    model: TrainableModel,
    scenario: Scenario,
    temperature: float,
    cost_context: str,
    *,
    max_tokens: int = 300,
    request_timeout: float = 60.0,
) -> Trajectory:
    """One forced `make_guess` call: reward = the guess's shared prefix with the secret (0 for
    a guess that is not all bits), with ART's metrics and the completion's costs."""
    messages: Messages = scenario["messages"]
    response = await model.openai_client().chat.completions.create(
        messages=messages,
        model=model.get_inference_name(),
        max_tokens=max_tokens,
        timeout=request_timeout,
        temperature=temperature,
        tools=TOOLS,
        tool_choice=TOOL_CHOICE,
    )
    usage = response.usage
    prompt_tokens = usage.prompt_tokens if usage is not None else 0
    completion_tokens = usage.completion_tokens if usage is not None else 0
    choice = response.choices[0]
    raw_guess, source = extract_guess(choice)
    guess = raw_guess or ""
    valid = is_valid_guess(guess)
    prefix_len = shared_prefix_len(guess, SECRET_BITS) if valid else 0
    metrics: dict[str, MetricValue] = {
        "prefix_len": prefix_len,
        "guess_len": len(guess),
        "secret_len": SECRET_LEN,
        "valid_guess": 1.0 if valid else 0.0,
        "tool_call_count": float(len(choice.message.tool_calls or [])),
        "tool_call_found": 1.0 if source != "missing" else 0.0,
        "tool_call_structured": 1.0 if source == "tool_call" else 0.0,
    }
    metrics.update(model.cost_calculator(prompt_tokens, completion_tokens, cost_context) or {})
    return Trajectory(
        messages_and_choices=[*messages, choice],
        tools=cast(list[dict[str, Any]], TOOLS),
        reward=float(prefix_len),
        logs=[f"sampled_content:\n{choice.message.content or ''}"],
        metrics=metrics,
    )


async def evaluate(
    model: TrainableModel, config: PipelineConfig, *, request_timeout: float = 60.0
) -> list[Trajectory]:
    """ART's evaluation: one rollout at `eval_temperature`; a failed one is left out."""
    results = await asyncio.gather(
        rollout(
            model,
            build_scenario(),
            config.eval_temperature,
            "eval",
            max_tokens=config.max_tokens,
            request_timeout=request_timeout,
        ),
        return_exceptions=True,
    )
    return [result for result in results if isinstance(result, Trajectory)]


async def scenario_stream(count: int) -> AsyncIterator[Scenario]:
    for index in range(count):
        scenario = build_scenario()
        scenario["metadata"] = {"scenario_id": str(index)}
        yield scenario


@attrs.frozen
class Settings:
    """ART's environment settings for this example, with its defaults."""

    model_name: str
    project: str
    art_path: str | None
    min_batch_size: int
    num_rollout_workers: int
    rollouts_per_scenario: int
    max_steps_off_policy: int
    max_batch_size: int | None
    eval_every_n_steps: int
    eval_at_start: bool
    max_steps: int
    save_checkpoint: bool
    resume: bool
    temperature: float
    eval_temperature: float
    max_tokens: int
    request_timeout: float
    log_interval_seconds: float
    lora_rank: int | None
    learning_rate: float
    scenario_count: int

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if environ is None else environ
        name = env.get("MODEL_NAME", "pipeline-binary-prefix-tool")
        suffix = env.get("RUN_SUFFIX") or uuid.uuid4().hex[:8]
        save_checkpoint = runtime.env_flag("SAVE_CHECKPOINT", env) or False
        resume = runtime.env_flag("RESUME", env)
        resume = save_checkpoint if resume is None else resume
        if resume and not save_checkpoint:
            print("RESUME=1 but SAVE_CHECKPOINT=0; disabling resume for a clean run.")
            resume = False
        max_batch = env.get("MAX_BATCH_SIZE")
        lora_rank = env.get("LORA_RANK")
        eval_at_start = runtime.env_flag("EVAL_AT_START", env)
        return cls(
            model_name=f"{name}-{suffix}",
            project=env.get("PROJECT", "binary-prefix-tool-pipeline"),
            art_path=env.get("ART_PATH"),
            min_batch_size=runtime.env_int("MIN_BATCH_SIZE", 4, env),
            num_rollout_workers=runtime.env_int("NUM_ROLLOUT_WORKERS", 8, env),
            rollouts_per_scenario=runtime.env_int("ROLLOUTS_PER_SCENARIO", 8, env),
            max_steps_off_policy=runtime.env_int("MAX_STEPS_OFF_POLICY", 6, env),
            max_batch_size=runtime.env_int("MAX_BATCH_SIZE", 0, env) if max_batch else None,
            eval_every_n_steps=runtime.env_int("EVAL_EVERY_N_STEPS", 2, env),
            eval_at_start=True if eval_at_start is None else eval_at_start,
            max_steps=runtime.env_int("MAX_STEPS", 10, env),
            save_checkpoint=save_checkpoint,
            resume=resume,
            temperature=runtime.env_float("ROLLOUT_TEMPERATURE", 1.0, env),
            eval_temperature=runtime.env_float("EVAL_TEMPERATURE", 0.0, env),
            max_tokens=runtime.env_int("MAX_TOKENS", 300, env),
            request_timeout=runtime.env_float("REQUEST_TIMEOUT", 60.0, env),
            log_interval_seconds=runtime.env_float("STATUS_LOG_INTERVAL_SECONDS", 60.0, env),
            lora_rank=runtime.env_int("LORA_RANK", 0, env) if lora_rank is not None else None,
            learning_rate=runtime.env_float("LEARNING_RATE", 1e-4, env),
            scenario_count=max(1, runtime.env_int("SCENARIO_COUNT", 1000, env)),
        )


async def main() -> None:
    runtime.load_env_file()
    kind = runtime.backend_kind()
    base_model = runtime.base_model(kind, "Qwen/Qwen3-4B-Instruct-2507")
    settings = Settings.from_env()
    if settings.lora_rank is not None and settings.lora_rank < 1:
        raise InvalidInputError(f"LORA_RANK must be an integer >= 1, got {settings.lora_rank}")

    backend = runtime.make_backend(kind, path=settings.art_path, lora_rank=settings.lora_rank)
    try:
        model = TrainableModel(
            run_name=settings.model_name,
            name=settings.model_name,
            project=settings.project,
            base_model=base_model,
            base_path=settings.art_path or ".art",
        )
        try:
            await model.register(backend)
            config = PipelineConfig(
                temperature=settings.temperature,
                eval_temperature=settings.eval_temperature,
                max_tokens=settings.max_tokens,
            )
            last_eval: list[float] = []

            async def single_rollout(
                model: TrainableModel, scenario: Scenario, config: PipelineConfig
            ) -> Trajectory:
                return await rollout(
                    model,
                    scenario,
                    config.temperature,
                    "train",
                    max_tokens=config.max_tokens,
                    request_timeout=settings.request_timeout,
                )

            async def eval_fn(
                model: TrainableModel, _step: int, config: PipelineConfig
            ) -> list[Trajectory]:
                trajectories = await evaluate(
                    model, config, request_timeout=settings.request_timeout
                )
                if trajectories:
                    last_eval.append(sum(t.reward for t in trajectories) / len(trajectories))
                return trajectories

            trainer = PipelineTrainer(
                model,
                backend,
                make_group_rollout_fn(single_rollout, n=settings.rollouts_per_scenario),
                scenario_stream(settings.scenario_count),
                config,
                eval_fn,
                pipeline=PipelineRuntimeConfig(
                    num_rollout_workers=settings.num_rollout_workers,
                    min_batch_size=settings.min_batch_size,
                    max_batch_size=settings.max_batch_size,
                ),
                max_steps_off_policy=settings.max_steps_off_policy,
                learning_rate=settings.learning_rate,
                log_interval_seconds=settings.log_interval_seconds,
                eval_every_n_steps=settings.eval_every_n_steps,
                eval_at_start=settings.eval_at_start,
                save_checkpoint=settings.save_checkpoint,
                resume=settings.resume,
                max_steps=settings.max_steps,
            )
            print(
                "Starting pipeline trainer test: "
                f"max_steps={settings.max_steps} scenarios={settings.scenario_count} "
                f"rollouts_per_scenario={settings.rollouts_per_scenario} "
                f"secret_len={SECRET_LEN}"
            )
            await trainer.train()
            print("Training completed.")
            if last_eval:
                print(f"Last eval avg reward: {last_eval[-1]:.3f}")
            print_history_summary(model, tail=5)
        finally:
            await model.close()
    finally:
        await backend.close()


if __name__ == "__main__":
    runtime.run_example(main)
