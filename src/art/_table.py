"""Where each of ART 0.5.23's import paths leads in arthex: the table behind `arthex.art`.

Every public module of the ART wheel is here, in one of three forms:

- `REFUSED_PACKAGES`: a subpackage arthex has nothing of (Megatron, Unsloth, the MCP scenario
  generator, ...). Importing it, or anything under it, raises `NotInArthexError` saying what
  to use instead.
- `REFUSED_MODULES`: a module arthex has nothing of; the same at import.
- `MODULES`: a module that imports. Each of ART's public names in it is either a `Use` (the
  arthex object it resolves to, imported on first use, so torch and the other heavy libraries
  come in only with the backend that needs them) or a `Refuse`: touching the name raises
  `NotInArthexError` naming what to use instead. `NotInArthexError` is an `ImportError`, so
  `from arthex.art.x import name` shows that line, not a bare "cannot import name".

The module files under `arthex/art/` only point here; tests/unit/test_art_paths.py checks the
files, this table and the list read from ART's wheel agree, and the interop suite re-reads
the installed wheel so a new ART path cannot slip by.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import attrs

from arthex.core.errors import NotInArthexError

GUIDE = "docs/migrating-from-art.md"


@attrs.frozen
class Use:
    """ART's name is this arthex object (`name` None: the module itself)."""

    module: str
    name: str | None = None

    def resolve(self) -> Any:
        module = importlib.import_module(self.module)
        return module if self.name is None else getattr(module, self.name)

    @property
    def path(self) -> str:
        return self.module if self.name is None else f"{self.module}.{self.name}"


@attrs.frozen
class Refuse:
    """ART's name has no counterpart; `instead` says, in one line, what to use."""

    instead: str


Entry = Use | Refuse

# -- what to use instead, shared by many paths -----------------------------------------------

_BACKEND_SETTINGS = (
    "set the engine, LoRA and trainer on the backend: "
    "arthex.LocalBackend(engine=..., lora_rank=..., lora_alpha=..., lora_target_modules=...)"
)
_MEGATRON = "use arthex.LocalBackend(world_size=N) to train on several GPUs"
_SEQUENCES = (
    "arthex.art.preprocessing.tokenize.tokenize_trajectory_groups shows the sequences training sees"
)
_SFT_TOKENS = (
    "arthex's SFT renders the chat template and masks all but the assistant turns inside "
    "model.train_sft(...)"
)
_VLLM = "arthex.LocalBackend(engine='vllm') starts and serves vLLM itself"
_TINKER_OPENAI = "arthex.adapters.tinker.openai_server"
_TINKER_WIRE = "arthex.adapters.tinker.openai_wire"
_TINKER_CLIENT = "arthex.adapters.tinker.openai_client"
_TINKER_SERVER = Use(_TINKER_OPENAI, "TinkerOpenAIServer")
_TINKER_RUN_STATE = (
    "ART's backend's live clients (service, rest, training and sampling clients, its server "
    "task): arthex.TinkerBackend holds its own and keeps a run's steps and tinker:// paths in "
    "{model_dir}/tinker-run.json; it reads ART's state.json keys (STATE_KEY_RUN_IDS, "
    "STATE_KEY_LATEST_STEP) to continue a run ART left"
)
_TINKER_MODEL_CONFIG = (
    "arthex.TinkerBackend uses no renderer (it renders with the base model's chat template); "
    "set lora_rank and seed on arthex.TinkerBackend(...)"
)
_HISTORY = "read a run with arthex.load_history(run_dir) and arthex.load_trajectories(run_dir)"
_AUTOTUNE = (
    "arthex has no online autotuner (ART's resizes rollout workers and packing as it runs, "
    "from vLLM's load and its Megatron packer); apply a saved profile with "
    "PipelineTrainer(autotune=arthex.art.PipelineAutotuneConfig(mode='profile', "
    "profile=...)), or set the sizes: arthex.PipelineTrainer(pipeline=...)"
)
_INTERNAL = "an ART internal with no arthex counterpart; arthex's backends do this themselves"


def _shape(name: str) -> Use:
    """ART's TypedDicts of backend settings, with ART's keys (the model takes them and warns
    they are ignored, naming the backend argument to use)."""
    return Use("arthex.art.dev.engine" if name == "EngineArgs" else "arthex.art.dev.model", name)


_SETTINGS_SHAPES = (
    "InternalModelConfig",
    "BackendModelConfig",
    "InitArgs",
    "EngineArgs",
    "TrainerArgs",
    "PeftArgs",
    "LoRAConfig",
    "TinkerArgs",
    "TinkerNativeArgs",
    "TinkerTrainingClientArgs",
    "VllmRuntimeArgs",
)
_DEV_OTHERS: dict[str, Entry] = {
    "OpenAIServerConfig": Use("arthex.art.dev.openai_server", "OpenAIServerConfig"),
    "ServerArgs": Use("arthex.art.dev.openai_server", "ServerArgs"),
    "TrainConfig": Use("arthex.art.dev.train", "TrainConfig"),
    "TrainSFTConfig": Use("arthex.art.dev.train", "TrainSFTConfig"),
    "is_dedicated_mode": Use("arthex.art.dev.validate", "is_dedicated_mode"),
    "is_external_vllm_mode": Use("arthex.art.dev.validate", "is_external_vllm_mode"),
    "validate_dedicated_config": Use("arthex.art.dev.validate", "validate_dedicated_config"),
}

REFUSED_PACKAGES: dict[str, str] = {
    "art.distributed": (
        "use arthex.LocalBackend(world_size=N) on one host, or `arthex serve` with "
        "arthex.ServerlessBackend"
    ),
    "art.megatron": _MEGATRON,
    "art.tau_bench": (
        "arthex has no tau-bench client; call the benchmark's own client from the rollout"
    ),
    "art.trainer_rank": _MEGATRON,
    "art.transformers": "arthex loads models with transformers as it is; no patches to apply",
    "art.unsloth": "arthex does not use Unsloth; use arthex.LocalBackend (torch and peft)",
}

REFUSED_MODULES: dict[str, str] = {
    "art.local.adapter_leases": (
        "arthex keeps no adapter leases; pin a rollout's step with "
        "arthex.art.adapter_leases.pin_inference_step, and keep its checkpoint with "
        "model.delete_checkpoints(pinned=...)"
    ),
    "art.local.service": "arthex.LocalBackend trains and serves in this process; nothing to start",
    "art.pipeline_trainer.state": (
        "arthex.PipelineTrainer shares no state object between its tasks; its record is the run's "
        "pipeline_state.json, and it continues the record ART's trainer left in state.json "
        "(PIPELINE_STATE_KEY)"
    ),
    "art.pipeline_trainer.status": "arthex.PipelineTrainer prints its own progress",
    "art.pipeline_tuner.attachment": _AUTOTUNE,
    "art.pipeline_tuner.worker_controller": _AUTOTUNE,
    "art.preprocessing.dynamo_tokens": (
        "arthex reads a Choice's logprobs from choice.logprobs; Dynamo's metadata is not read"
    ),
    "art.preprocessing.inputs": "arthex's trainer builds its own inputs; " + _SEQUENCES,
    "art.preprocessing.moe_routing": (
        "arthex does not replay MoE expert routing; its trainer recomputes the routing"
    ),
    "art.preprocessing.pack": "arthex's trainer packs one sequence per row; " + _SEQUENCES,
    "art.preprocessing.policy_spans": _INTERNAL,
    "art.preprocessing.response_masking": _SFT_TOKENS,
    "art.preprocessing.sft": _SFT_TOKENS,
    "art.runtime_diagnostics": _VLLM,
    "art.serving_capabilities": _VLLM,
    "art.tinker.service": (
        "ART's TinkerBackend trains in a child process through this service; "
        "arthex.TinkerBackend calls the Tinker SDK in this process"
    ),
    "art.token_prefix": _INTERNAL,
    "art.utils.append_only": _INTERNAL,
    "art.utils.chat_template": _INTERNAL,
    "art.utils.convert_moe_lora": _INTERNAL,
    "art.vllm_route_transport": _VLLM,
    "art.vllm_runtime": _VLLM,
}

_MODEL = Use("arthex.composition.api", "Model")
_TRAINABLE = Use("arthex.composition.api", "TrainableModel")
_PIPELINE = Use("arthex.core.pipeline", "PipelineTrainer")
_GROUP_ROLLOUT = Use("arthex.core.pipeline", "make_group_rollout_fn")
_TRAJECTORY = Use("arthex.core.trajectories", "Trajectory")
_GROUP = Use("arthex.core.trajectories", "TrajectoryGroup")
_CURRENT = Use("arthex.composition.capture", "current_trajectory")
_NO_CAPTURE = Use("arthex.composition.capture", "no_capture")
_TRAJECTORY_GROUP = Use("arthex.core.trajectories", "trajectory_group")
_MESSAGES = Use("arthex.core.chat_types", "Messages")
_MESSAGES_AND_CHOICES = Use("arthex.core.chat_types", "MessagesAndChoices")
_TOOLS = Use("arthex.core.chat_types", "Tools")
_TRAIN_CONFIG = Use("arthex.core.config", "TrainConfig")
_TRAIN_SFT_CONFIG = Use("arthex.core.sft", "TrainSFTConfig")
_RESULT = Use("arthex.core.model", "TrainResult")
_SERVING_UNAVAILABLE = Use("arthex.core.errors", "ServingUnavailableError")
_LOCAL_RESULT = Use("arthex.adapters.train_results", "LocalTrainResult")
_SERVERLESS_RESULT = Use("arthex.adapters.train_results", "ServerlessTrainResult")
_LOCAL = Use("arthex.adapters.local", "LocalBackend")
_SERVERLESS = Use("arthex.adapters.serverless", "ServerlessBackend")
_TINKER_BACKEND = Use("arthex.adapters.tinker", "TinkerBackend")
_GATHER_GROUPS = Use("arthex.core.gather", "gather_trajectory_groups")
_GATHER = Use("arthex.core.gather", "gather_trajectories")
_BATCHES = Use("arthex.core.batch_stream", "trajectory_group_batches")
_RETRY = Use("arthex.utils.retry", "retry")
_ITERATE = Use("arthex.utils.iterate_dataset", "iterate_dataset")
_DATASET_BATCH = Use("arthex.utils.iterate_dataset", "DatasetBatch")
_LIMIT = Use("arthex.utils.limit_concurrency", "limit_concurrency")
_RULER = Use("arthex.rewards.ruler", "ruler")
_RULER_GROUP = Use("arthex.rewards.ruler", "ruler_score_group")
_METADATA_VALUE = Use("arthex.core.trajectories", "MetadataValue")
_FILES = "arthex.adapters.parquet.single_file"
_STRIP = Use("arthex.utils.strip_logprobs", "strip_logprobs")
_LOG_HTTP_ERRORS = Use("arthex.utils.log_http_errors", "log_http_errors")
_YIELDING = "arthex.composition.yield_trajectory"
_DEPLOYMENT = "arthex.utils.deployment"
_PROVENANCE = Use("arthex.utils.record_provenance", "record_provenance")


def _accounting(module: str, *names: str) -> dict[str, Entry]:
    """ART's cost and step-metric names: arthex's cost accounting, `arthex.accounting.{module}`."""
    return {name: Use(f"arthex.accounting.{module}", name) for name in names}


def _example(module: str, *names: str) -> dict[str, Entry]:
    """ART's runnable pipeline examples: arthex's versions, `arthex.apps.examples.{module}`."""
    return {name: Use(f"arthex.apps.examples.{module}", name) for name in names}


_PIPELINE_RL_METRICS = {
    name: Use("arthex.accounting.catalogue", name)
    for name in (
        "PIPELINE_RL_DASHBOARD_DEFAULT_METRICS",
        "PIPELINE_RL_METRIC_DEFINITIONS",
        "PIPELINE_RL_SCORE_METRICS",
    )
}
_api_costs = _accounting(
    "api_costs",
    "ANTHROPIC_PROVIDER",
    "CostExtractor",
    "MODEL_TOKEN_PRICING",
    "OPENAI_PROVIDER",
    "ResponseGetter",
    "TokenPricing",
    "extract_api_cost",
    "normalize_model_name",
    "normalize_provider",
)
_RUNTIME_CONFIG = Use("arthex.core.pipeline.runtime_config", "PipelineRuntimeConfig")
_KEPT = "arthex.core.pipeline.retention_strategy"
_RETENTION_NAMES: dict[str, Entry] = {
    **{
        name: Use(_KEPT, name)
        for name in (
            "CHECKPOINT_CREATED_AT_METRIC",
            "CHECKPOINT_EVAL_COMPLETED_METRIC",
            "CHECKPOINT_SAVED_METRIC",
            "CheckpointInfo",
            "keep_recent_and_top",
        )
    },
    "CheckpointRetentionContext": Use(_KEPT, "RetentionContext"),
    "CheckpointRetentionStrategy": Use(_KEPT, "RetentionStrategy"),
}
_ROLLOUT_TYPES = {
    "RolloutFn": Use("arthex.core.pipeline.rollouts", "RolloutFn"),
    "SingleRolloutFn": Use("arthex.core.pipeline.rollouts", "SingleRolloutFn"),
    "EvalFn": Use("arthex.core.pipeline.rollouts", "EvalFn"),
}
_LEASES: dict[str, Entry] = {
    **{
        name: Use("arthex.utils.adapter_leases", name)
        for name in (
            "pin_inference_step",
            "pin_inference_target",
            "pinned_inference_name",
            "pinned_inference_step",
        )
    },
    "InferenceTarget": Use("arthex.core.inference_target", "ServingPin"),
    "in_flight_lora_name": Refuse(
        "arthex's servers have no in-flight adapter name; model.get_inference_name() names "
        "the latest step, model.get_inference_name(step) one step"
    ),
}
_GET_TOKENIZER = Use("arthex.utils.tokenizer", "get_tokenizer")
_TOKENIZED = "arthex.utils.tokenized_trajectories"
_TOKENIZING = "arthex.utils.trajectory_tokenizing"
_TENSORIZED = "arthex.utils.tensorized_trajectories"
_TENSORIZED_NAMES: dict[str, Entry] = {
    name: Use(_TENSORIZED, name)
    for name in (
        "TensorizedHistory",
        "TensorizedMultiHistoryTrajectory",
        "TensorizedTopK",
        "TensorizedTrajectory",
        "TensorizedTrajectoryGroup",
    )
}
_MEGATRON_NAME = Refuse(_MEGATRON)
_AUTOTUNE_NAME = Refuse(_AUTOTUNE)
_TUNER = "arthex.utils.pipeline_tuner"
_AUTOTUNE_CONFIG = Use(_TUNER, "PipelineAutotuneConfig")
_TUNER_MODELS: dict[str, Entry] = {
    name: Use(_TUNER, name)
    for name in (
        "PackedGroupObservation",
        "PackedGroupShape",
        "PackingLeafShape",
        "PipelineAutotuneConfig",
        "PipelineAutotunerProfile",
        "PipelineMetric",
        "PipelineTuneSettings",
    )
}
_WANDB_ALL = Refuse(
    "ART sends wandb only its canonical keys, costs/cum/* and sft/* besides the caller's; "
    "arthex.WandbReporter mirrors every key of each history row (all of those included), so "
    "there is no subset to name"
)
_SERVER_CONFIG = Use("arthex.art.dev.openai_server", "get_openai_server_config")
_LANGGRAPH = "arthex.composition.langgraph"
_MCP = "arthex.environments.mcp_scenarios"
_BENCH = "arthex.apps.benchmarking"
_OLD_BENCH = "arthex.apps.old_benchmarking"
_CHECKS = "arthex.utils.rollout_checks"
_LANGGRAPH_INTERNAL = Refuse(
    "ART's wrapper logs each chat call to .art/langgraph/{thread} and rebuilds the "
    "conversation from that log; wrap_rollout(model, rollout) records the rollout's calls "
    "with arthex.capture() at the HTTP client (token ids included), so there is no log to "
    "start or rebuild from"
)
_ART_TRAJECTORIES = "arthex.utils.art_trajectories"
_COMPACT = "arthex.utils.compact_trajectories"
_RENDERERS = "arthex.utils.tinker_renderers"
_TINKER_DATA = "arthex.adapters.tinker.art_data"
_TINKER_ART_STATE = "arthex.adapters.tinker.art_state"
_ART_PIPELINE_STATE = "arthex.adapters.run_files.art_pipeline"

MODULES: dict[str, dict[str, Entry]] = {
    "art": {
        "Backend": Use("arthex.core.backend_train", "BackendTrainEntry"),
        "LoRAConfig": _shape("LoRAConfig"),
        "LocalServingUnavailableError": _SERVING_UNAVAILABLE,
        "LocalTrainResult": _LOCAL_RESULT,
        "MegatronRuntimeConfig": _MEGATRON_NAME,
        "MegatronTopologyConfig": _MEGATRON_NAME,
        "Messages": _MESSAGES,
        "MessagesAndChoices": _MESSAGES_AND_CHOICES,
        "MetricDefinition": Use("arthex.accounting.builder", "MetricDefinition"),
        "Model": _MODEL,
        **_PIPELINE_RL_METRICS,
        "PipelineAutotuneConfig": _AUTOTUNE_CONFIG,
        "PipelineRuntimeConfig": _RUNTIME_CONFIG,
        "ServerlessBackend": _SERVERLESS,
        "ServerlessTrainResult": _SERVERLESS_RESULT,
        "Tools": _TOOLS,
        "TrainConfig": _TRAIN_CONFIG,
        "TrainResult": _RESULT,
        "TrainSFTConfig": _TRAIN_SFT_CONFIG,
        "TrainableModel": _TRAINABLE,
        "Trajectory": _TRAJECTORY,
        "TrajectoryGroup": _GROUP,
        "capture_yielded_trajectory": Use(_YIELDING, "capture_yielded_trajectory"),
        "current_trajectory": _CURRENT,
        "dev": Use("arthex.art.dev"),
        "gather_trajectories": _GATHER,
        "gather_trajectory_groups": _GATHER_GROUPS,
        "get_megatron_runtime_config": _MEGATRON_NAME,
        "get_tokenizer": _GET_TOKENIZER,
        "init_megatron_runtime_config": _MEGATRON_NAME,
        "no_capture": _NO_CAPTURE,
        "retry": _RETRY,
        "tensorize": Use(_TOKENIZING, "tensorize"),
        "tokenize": Use(_TOKENIZING, "tokenize"),
        "trajectory": Use("arthex.composition.capture", "capture_calls"),
        "trajectory_group": _TRAJECTORY_GROUP,
        "trajectory_group_batches": _BATCHES,
        "yield_trajectory": Use(_YIELDING, "yield_trajectory"),
    },
    "art.adapter_leases": _LEASES,
    "art.api_costs": {
        **_api_costs,
        "track_api_cost": Use("arthex.accounting.builder", "track_api_cost"),
    },
    "art.cli": {
        "app": Use("arthex.apps.cli.main", "app"),
        "help_command": Use("arthex.apps.cli.art_commands", "help_command"),
        "migrate": Use("arthex.apps.cli.migrate", "migrate"),
        "run": Use("arthex.apps.cli.art_commands", "run"),
        **{
            name: Use("arthex.apps.cli.skills", name)
            for name in ("SKILL_NAMES", "init", "install_skills")
        },
        **dict.fromkeys(
            ("runtime_app", "runtime_prepare", "runtime_status"),
            Refuse(
                "arthex prepares no separate vLLM or Megatron runtimes: pip install "
                "'arthex[vllm]' adds vLLM to this environment, and `arthex doctor` checks the "
                "machine (GPU, memory plan) before training"
            ),
        ),
    },
    "art.costs": _accounting(
        "pricing",
        "CostCalculator",
        "MODEL_PRICING",
        "ModelPricing",
        "TokenCount",
        "build_cost_calculator",
        "compute_sample_costs",
        "compute_train_cost",
        "get_model_pricing",
        "tokens_to_cost",
    ),
    "art.mcp": {
        "GeneratedScenario": Use(_MCP, "GeneratedScenario"),
        "GeneratedScenarioCollection": Use(_MCP, "GeneratedScenarioCollection"),
        "MCPResource": Use(_MCP, "MCPResource"),
        "MCPTool": Use(_MCP, "MCPTool"),
        "complete_task_tool": Use(_MCP, "complete_task_tool"),
        "generate_scenarios": Use(_MCP, "generate_scenarios"),
    },
    "art.mcp.default_tools": {"complete_task_tool": Use(_MCP, "complete_task_tool")},
    "art.mcp.generate_scenarios": {
        "generate_scenarios": Use(_MCP, "generate_scenarios"),
        "preview_scenarios": Use(_MCP, "preview_scenarios"),
    },
    "art.mcp.types": {
        "GeneratedScenario": Use(_MCP, "GeneratedScenario"),
        "GeneratedScenarioCollection": Use(_MCP, "GeneratedScenarioCollection"),
        "MCPResource": Use(_MCP, "MCPResource"),
        "MCPTool": Use(_MCP, "MCPTool"),
    },
    "art.metrics": {
        **_accounting(
            "builder",
            "MetricDefinition",
            "MetricsBuilder",
            "is_builder_managed_metric",
            "is_cumulative_metric_key",
            "to_cumulative_metric_key",
        ),
        **_PIPELINE_RL_METRICS,
    },
    "art.metrics_taxonomy": _accounting(
        "taxonomy",
        "SFT_GRADIENT_STEP_KEY",
        "SFT_METRIC_PREFIX",
        "SFT_WANDB_GRADIENT_STEP_KEY",
        "TRAIN_GRADIENT_STEPS_KEY",
        "TrajectoryBatchSummary",
        "average_metric_samples",
        "build_data_metrics_from_summary",
        "build_training_summary_metrics",
        "summarize_trajectory_groups",
    ),
    "art.backend": {
        "AnyModel": _MODEL,
        "AnyTrainableModel": _TRAINABLE,
        "Backend": Use("arthex.core.backend_train", "BackendTrainEntry"),
    },
    "art.batches": {"trajectory_group_batches": _BATCHES},
    "art.dev": {
        **{name: _shape(name) for name in _SETTINGS_SHAPES},
        **_DEV_OTHERS,
        "RolloutWeightUpdateMode": Use("arthex.art.dev.model", "RolloutWeightUpdateMode"),
        "get_openai_server_config": _SERVER_CONFIG,
    },
    "art.dev.engine": {
        "EngineArgs": _shape("EngineArgs"),
        "WeightTransferConfig": Use("arthex.art.dev.engine", "WeightTransferConfig"),
    },
    "art.dev.get_model_config": {
        name: Use("arthex.art.dev.get_model_config", name)
        for name in ("default_target_modules", "get_model_config")
    },
    "art.dev.model": {
        **{name: _shape(name) for name in _SETTINGS_SHAPES if name != "EngineArgs"},
        **{
            name: Use("arthex.art.dev.model", name)
            for name in (
                "DebugOption",
                "FSDPOption",
                "HubStrategy",
                "IntervalStrategy",
                "OptimizerNames",
                "PEFT_ARGS_MIGRATION_MESSAGE",
                "RolloutWeightUpdateMode",
                "SaveStrategy",
                "SchedulerType",
                "VllmRuntimeMode",
            )
        },
    },
    "art.dev.openai_server": {
        "OpenAIServerConfig": _DEV_OTHERS["OpenAIServerConfig"],
        "ServerArgs": _DEV_OTHERS["ServerArgs"],
        "get_openai_server_config": _SERVER_CONFIG,
    },
    "art.dev.sequence_lengths": {
        "max_seq_length_from_model_config": Use(
            "arthex.utils.sequence_lengths", "max_seq_length_from_model_config"
        )
    },
    "art.dev.train": {
        "TrainConfig": _DEV_OTHERS["TrainConfig"],
        "TrainSFTConfig": _DEV_OTHERS["TrainSFTConfig"],
    },
    "art.dev.validate": {
        name: _DEV_OTHERS[name]
        for name in ("is_dedicated_mode", "is_external_vllm_mode", "validate_dedicated_config")
    },
    "art.errors": {
        "ARTError": Use("arthex.core.errors", "ArthexError"),
        "ArtVllmMetricsTimeoutError": Refuse(
            "arthex does not scrape vLLM's metrics endpoint (it records no vllm/* metrics), so "
            "no scrape times out; arthex.LocalBackend(engine='vllm') serves vLLM in-process"
        ),
        "ForbiddenBucketCreationError": Use("arthex.utils.s3", "ForbiddenBucketCreationError"),
        "LoRADeploymentTimedOutError": Use(_DEPLOYMENT, "LoRADeploymentTimedOutError"),
        "LocalServingUnavailableError": _SERVING_UNAVAILABLE,
        "UnsupportedBaseModelDeploymentError": Use(
            _DEPLOYMENT, "UnsupportedBaseModelDeploymentError"
        ),
        "UnsupportedLoRADeploymentProviderError": Use(
            _DEPLOYMENT, "UnsupportedLoRADeploymentProviderError"
        ),
    },
    "art.gather": {
        **{
            name: Use("arthex.utils.gather_context", name)
            for name in (
                "GatherContext",
                "gather_context_var",
                "get_gather_context",
                "record_metrics",
                "record_trajectory_completion_tokens",
                "set_gather_context",
                "wrap_group_awaitable",
                "wrap_trajectories_awaitable",
            )
        },
        "gather_trajectories": _GATHER,
        "gather_trajectory_groups": _GATHER_GROUPS,
    },
    "art.guided_completion": {
        name: Use("arthex.utils.guided_completion", name)
        for name in ("freeze_tool_schema", "get_guided_completion_params")
    },
    "art.langgraph": {
        "init_chat_model": Use(_LANGGRAPH, "init_chat_model"),
        "wrap_rollout": Use(_LANGGRAPH, "wrap_rollout"),
    },
    "art.langgraph.llm_wrapper": {
        "CURRENT_CONFIG": _LANGGRAPH_INTERNAL,
        "DEFAULT_INVOKE_TIMEOUT": Use(_LANGGRAPH, "DEFAULT_INVOKE_TIMEOUT"),
        "LoggingLLM": Refuse(
            "init_chat_model() returns the rollout's chat model, arthex's RolloutChatModel "
            "(ART's LoggingLLM without the logger: its calls are captured, not logged)"
        ),
        "OPENAI_COMPATIBLE_PROVIDERS": Use(_LANGGRAPH, "OPENAI_COMPATIBLE_PROVIDERS"),
        "add_thread": _LANGGRAPH_INTERNAL,
        "create_messages_from_logs": _LANGGRAPH_INTERNAL,
        "init_chat_model": Use(_LANGGRAPH, "init_chat_model"),
        "mappings": Refuse(
            "an empty dict ART's LangGraph wrapper defines and never reads or fills; "
            "wrap_rollout(model, rollout) needs no such table"
        ),
        "wrap_rollout": Use(_LANGGRAPH, "wrap_rollout"),
    },
    "art.langgraph.logging": {"FileLogger": Use("arthex.utils.file_logger", "FileLogger")},
    "art.langgraph.message_utils": {
        "Message": Use(_LANGGRAPH, "Message"),
        "MessagesAndChoices": Use("arthex.core.trajectories", "MessagesAndChoices"),
        "convert_langgraph_messages": Use(_LANGGRAPH, "convert_langgraph_messages"),
        "langchain_msg_to_openai": Use(_LANGGRAPH, "langchain_msg_to_openai"),
        "make_message_param": Use(_LANGGRAPH, "make_message_param"),
        "role_to_param": Use(_LANGGRAPH, "MESSAGE_PARAMS"),
    },
    "art.local": {"LocalBackend": _LOCAL},
    "art.local.backend": {"LocalBackend": _LOCAL},
    "art.local.checkpoints": {
        name: Use("arthex.utils.checkpoints", name)
        for name in (
            "delete_checkpoints",
            "get_last_checkpoint_dir",
            "migrate_checkpoints_to_new_structure",
        )
    },
    "art.model": {
        "METRICS_BUILDER_STATE_KEY": Refuse(
            "ART saves its metrics builder's running totals in the model's state.json under "
            "this key; arthex saves none there: each */cum/* total is the run's history ledger "
            "summed (it survives restarts), model.metrics_builder() is the step builder; "
            + _HISTORY
        ),
        "METRIC_SECTIONS": Use("arthex.core.metrics", "SECTIONS"),
        "METRIC_SPLITS": Use("arthex.core.metrics", "SPLITS"),
        "Model": _MODEL,
        "TrainableModel": _TRAINABLE,
        "WANDB_CANONICAL_METRIC_KEYS": _WANDB_ALL,
        "WANDB_CANONICAL_METRIC_PREFIXES": _WANDB_ALL,
    },
    "art.openai": {
        **{
            name: Use("arthex.utils.chat_streams", name)
            for name in (
                "IncompleteChatCompletionStreamError",
                "consume_chat_completion_stream",
                "consume_sync_chat_completion_stream",
                "finalize_chat_completion",
                "init_chat_completion",
                "update_chat_completion",
            )
        },
        "ART_MOE_ROUTING_METADATA_KEY": Refuse(REFUSED_MODULES["art.preprocessing.moe_routing"]),
    },
    "art.pipeline_trainer": {
        **_RETENTION_NAMES,
        **_ROLLOUT_TYPES,
        "PipelineAutotuneConfig": _AUTOTUNE_CONFIG,
        "PipelineRuntimeConfig": _RUNTIME_CONFIG,
        "PipelineTrainer": _PIPELINE,
        "ScenarioT": Use("arthex.core.pipeline.rollouts", "ScenarioT"),
        "StatusReporter": Refuse("arthex.PipelineTrainer prints its own progress"),
        "make_group_rollout_fn": _GROUP_ROLLOUT,
    },
    "art.pipeline_trainer.binary_prefix_tool_pipeline": _example(
        "binary_prefix_tool",
        "PipelineConfig",
        "SECRET_BITS",
        "SECRET_LEN",
        "SYSTEM_PROMPT",
        "Scenario",
        "TOOLS",
        "TOOL_CHOICE",
        "TOOL_NAME",
        "USER_PROMPT",
        "extract_guess",
        "get_model_output_dir",
        "is_valid_guess",
        "main",
        "print_history_summary",
        "shared_prefix_len",
    ),
    "art.pipeline_trainer.checkpoint_retention": _RETENTION_NAMES,
    "art.pipeline_trainer.trainer": {
        "PIPELINE_STATE_KEY": Use(_ART_PIPELINE_STATE, "PIPELINE_STATE_KEY"),
        "PipelineTrainer": _PIPELINE,
        "make_group_rollout_fn": _GROUP_ROLLOUT,
    },
    "art.pipeline_trainer.types": {**_ROLLOUT_TYPES, "ScalarMetadataValue": _METADATA_VALUE},
    "art.pipeline_trainer.yes_no_maybe_pipeline": _example(
        "yes_no_maybe",
        "BASE_MODEL",
        "EVAL_EVERY_N_STEPS",
        "EVAL_TRAJECTORY_COUNT",
        "MAX_STEPS",
        "MAX_TOKENS",
        "MODEL_NAME",
        "PROJECT",
        "ROLLOUTS_PER_SCENARIO",
        "build_scenarios",
        "eval_fn",
        "main",
        "reward_for_answer",
        "rollout_fn",
    ),
    "art.pipeline_tuner": {
        **_TUNER_MODELS,
        "PipelineAutotunerAttachment": _AUTOTUNE_NAME,
        "PipelineRuntimeConfig": _RUNTIME_CONFIG,
        "RolloutWorkerController": _AUTOTUNE_NAME,
    },
    "art.pipeline_tuner.autotune": {
        "PackingOutcome": _AUTOTUNE_NAME,
        "PackingProjection": _AUTOTUNE_NAME,
        "PipelineAutotuner": _AUTOTUNE_NAME,
        **{
            name: Use(_TUNER, name)
            for name in (
                "build_initial_settings",
                "freshness_worker_limit",
                "recommended_queue_size",
            )
        },
    },
    "art.pipeline_tuner.config": {
        **_TUNER_MODELS,
        "PipelineRuntimeConfig": _RUNTIME_CONFIG,
        "TunerDecision": Use(_TUNER, "TunerDecision"),
        "TunerWindowStats": Use(_TUNER, "TunerWindowStats"),
    },
    "art.pipeline_tuner.store": {
        "PipelineTunerProfileStore": Use(_TUNER, "PipelineTunerProfileStore"),
    },
    "art.preprocessing": {},
    "art.preprocessing.tokenize": {
        **{
            name: Use("arthex.adapters.local.tokenized", name)
            for name in (
                "ChatTemplateTool",
                "ChatTemplateToolSchemaFormat",
                "TokenizedResult",
                "assemble_vllm_training_sequences",
                "tokenize_trajectory",
                "tokenize_trajectory_groups",
            )
        },
        "SFTBatch": Use("arthex.adapters.local.sft_batch", "SFTBatch"),
        "tokenize_sft_batch": Use("arthex.adapters.local.sft_batch", "tokenize_sft_batch"),
    },
    "art.preprocessing.vllm_tokens": {
        name: Use("arthex.utils.vllm_tokens", name)
        for name in (
            "COMPLETION_TOKENS_KEY",
            "attach_completion_token_metadata",
            "attach_vllm_token_metadata_to_choice",
            "choice_completion_tokens",
            "choice_vllm_token_metadata",
        )
    },
    "art.rewards": {"ruler": _RULER, "ruler_score_group": _RULER_GROUP},
    "art.rewards.ruler": {
        "DEFAULT_RUBRIC": Use("arthex.rewards.prompt", "DEFAULT_RUBRIC"),
        "Response": Use("arthex.rewards.prompt", "JudgeReply"),
        "TrajectoryScore": Use("arthex.rewards.prompt", "TrajectoryScore"),
        "ruler": _RULER,
        "ruler_score_group": _RULER_GROUP,
    },
    "art.serverless": {"ServerlessBackend": _SERVERLESS},
    "art.serverless.backend": {"ServerlessBackend": _SERVERLESS},
    "art.serverless.client": {
        "Checkpoint": Use("arthex.adapters.serverless.api_types", "Checkpoint"),
        "CheckpointListParams": Use("arthex.adapters.serverless.api_types", "CheckpointListParams"),
        "Checkpoints": Use("arthex.adapters.serverless.api", "Checkpoints"),
        "Client": Use("arthex.adapters.serverless.api", "Client"),
        "DeleteCheckpointsResponse": Use(
            "arthex.adapters.serverless.api_types", "DeleteCheckpointsResponse"
        ),
        "ExperimentalTrainingConfig": Use(
            "arthex.adapters.serverless.api_types", "ExperimentalTrainingConfig"
        ),
        "Model": Use("arthex.adapters.serverless.api_types", "Model"),
        "Models": Use("arthex.adapters.serverless.api", "Models"),
        "SFTTrainingConfig": Use("arthex.adapters.serverless.api_types", "SFTTrainingConfig"),
        "SFTTrainingJob": Use("arthex.adapters.serverless.api_types", "SFTTrainingJob"),
        "SFTTrainingJobs": Use("arthex.adapters.serverless.api", "SFTTrainingJobs"),
        "TrainingJob": Use("arthex.adapters.serverless.api_types", "TrainingJob"),
        "TrainingJobEvent": Use("arthex.adapters.serverless.api_types", "TrainingJobEvent"),
        "TrainingJobEventListParams": Use(
            "arthex.adapters.serverless.api_types", "TrainingJobEventListParams"
        ),
        "TrainingJobEvents": Use("arthex.adapters.serverless.api", "TrainingJobEvents"),
        "TrainingJobs": Use("arthex.adapters.serverless.api", "TrainingJobs"),
    },
    "art.tinker": {
        "OpenAICompatibleTinkerServer": _TINKER_SERVER,
        "TinkerBackend": _TINKER_BACKEND,
        "get_renderer_name": Use(_RENDERERS, "get_renderer_name"),
    },
    "art.tinker.backend": {"TinkerBackend": _TINKER_BACKEND},
    "art.tinker.client": {
        name: Use(_TINKER_CLIENT, name)
        for name in (
            "MessagesAndChoicesWithLogprobs",
            "ParsedMessageOrChoice",
            "ParsedMessagesAndChoices",
            "TinkerAsyncMessagesAndChoices",
            "TinkerAsyncMessagesAndChoicesWithRawResponse",
            "TinkerAsyncMessagesAndChoicesWithStreamingResponse",
            "TinkerAsyncModels",
            "TinkerAsyncModelsWithRawResponse",
            "TinkerAsyncModelsWithStreamingResponse",
            "TinkerAsyncOpenAI",
        )
    },
    "art.tinker.renderers": {
        "get_renderer_name": Use(_RENDERERS, "get_renderer_name"),
        "is_qwen3_dot_family_model": Use(_RENDERERS, "is_qwen3_dot_family_model"),
        "renderer_name_message": Use(_RENDERERS, "renderer_name_message"),
    },
    "art.tinker.server": {
        **{
            name: Use(_TINKER_WIRE, name)
            for name in (
                "MessagesAndChoicesWithLogprobs",
                "MessagesAndChoicesWithLogprobsArgs",
                "ModelList",
                "ModelUpsert",
                "WireMessagesAndChoices",
            )
        },
        "OpenAICompatibleTinkerServer": _TINKER_SERVER,
        "OpenAICompatibleTinkerServerSamplableModel": Refuse(
            "arthex's tenant opens one sampling client per target and serves it from a "
            "TinkerSamplingEngine: arthex.adapters.tinker.tenants.TinkerTenant.open"
        ),
        "OpenAICompatibleTinkerServerTenant": Use("arthex.adapters.tinker.tenants", "ApiKeyTenant"),
        "OpenAICompatibleTinkerServerWorker": Refuse(
            "arthex renders with the base model's chat template in the server's process, "
            "without renderer workers: arthex.adapters.tinker.tenants.TinkerTenant.open"
        ),
        "get_free_port": Use(_TINKER_OPENAI, "get_free_port"),
    },
    "art.tinker_native": {"TinkerNativeBackend": _TINKER_BACKEND},
    "art.tinker_native.backend": {
        "ModelState": Refuse(_TINKER_RUN_STATE),
        "STATE_KEY_LATEST_STEP": Use(_TINKER_ART_STATE, "STATE_KEY_LATEST_STEP"),
        "STATE_KEY_RUN_IDS": Use(_TINKER_ART_STATE, "STATE_KEY_RUN_IDS"),
        "TinkerNativeBackend": _TINKER_BACKEND,
        "TinkerNativeModelConfig": Refuse(_TINKER_MODEL_CONFIG),
    },
    "art.tinker_native.data": {
        "build_datum": Use(_TINKER_DATA, "build_datum"),
        "compute_advantages": Use(_TINKER_DATA, "compute_advantages"),
        "convert_openai_messages_to_renderer_format": Use(
            _TINKER_DATA, "convert_openai_messages_to_renderer_format"
        ),
        "create_conversation_prefix_with_tools": Use(
            _TINKER_DATA, "create_conversation_prefix_with_tools"
        ),
        "extract_logprobs_from_choice": Use(_TINKER_DATA, "extract_logprobs_from_choice"),
        "find_last_choice": Use(_TINKER_DATA, "find_last_choice"),
        "history_to_datum": Use(_TINKER_DATA, "history_to_datum"),
        "iter_trajectory_histories": Use(_TINKER_DATA, "iter_trajectory_histories"),
        "parse_completion_to_openai_message": Use(
            _TINKER_DATA, "parse_completion_to_openai_message"
        ),
        "trajectory_groups_to_datums": Use(_TINKER_DATA, "trajectory_groups_to_datums"),
    },
    "art.tokenizer": {"get_tokenizer": _GET_TOKENIZER},
    "art.trajectories": {
        "AnthropicMessageSource": Use(_ART_TRAJECTORIES, "AnthropicMessageSource"),
        "AnthropicMessagesHistory": Use(_ART_TRAJECTORIES, "AnthropicMessagesHistory"),
        "ChatCompletionsExchange": Use("arthex.core.exchanges", "ChatCompletionsExchange"),
        "ChatCompletionsHistory": Use(_ART_TRAJECTORIES, "ChatCompletionsHistory"),
        "ChatCompletionsMessageSource": Use(_ART_TRAJECTORIES, "ChatCompletionsMessageSource"),
        "ChatCompletionsRequest": Use(_ART_TRAJECTORIES, "ChatCompletionsRequest"),
        "CompactDumpable": Use(_ART_TRAJECTORIES, "CompactDumpable"),
        "CompactTrajectoryKind": Use(_ART_TRAJECTORIES, "CompactTrajectoryKind"),
        "CompactTrajectoryPayload": Use(_ART_TRAJECTORIES, "CompactTrajectoryPayload"),
        "CompletionsExchange": Use(_ART_TRAJECTORIES, "CompletionsExchange"),
        "CompletionsRequest": Use(_ART_TRAJECTORIES, "CompletionsRequest"),
        "CompletionsSource": Use(_ART_TRAJECTORIES, "CompletionsSource"),
        "CompletionsStringHistory": Use(_ART_TRAJECTORIES, "CompletionsStringHistory"),
        "CompletionsStringSourceSpan": Use(_ART_TRAJECTORIES, "CompletionsStringSourceSpan"),
        "CompletionsTokenHistory": Use(_ART_TRAJECTORIES, "CompletionsTokenHistory"),
        "CompletionsTokenSourceSpan": Use(_ART_TRAJECTORIES, "CompletionsTokenSourceSpan"),
        "History": Use("arthex.core.exchanges", "SequenceHistory"),
        "LegacyHistory": Use("arthex.core.trajectories", "History"),
        "MessagesExchange": Use(_ART_TRAJECTORIES, "MessagesExchange"),
        "MessagesRequest": Use(_ART_TRAJECTORIES, "MessagesRequest"),
        "MetadataValue": _METADATA_VALUE,
        "PydanticException": Use("arthex.core.trajectories", "CapturedException"),
        "ResponsesExchange": Use(_ART_TRAJECTORIES, "ResponsesExchange"),
        "ResponsesHistory": Use(_ART_TRAJECTORIES, "ResponsesHistory"),
        "ResponsesItemSource": Use(_ART_TRAJECTORIES, "ResponsesItemSource"),
        "ResponsesRequest": Use(_ART_TRAJECTORIES, "ResponsesRequest"),
        "TensorizedHistory": Use(_TENSORIZED, "TensorizedHistory"),
        "TensorizedMultiHistoryTrajectory": Use(_TENSORIZED, "TensorizedMultiHistoryTrajectory"),
        "TensorizedTopK": Use(_TENSORIZED, "TensorizedTopK"),
        "TensorizedTrajectory": Use(_TENSORIZED, "TensorizedTrajectory"),
        "TensorizedTrajectoryGroup": Use(_TENSORIZED, "TensorizedTrajectoryGroup"),
        "TokenFlag": Use(_ART_TRAJECTORIES, "TokenFlag"),
        "TokenizedHistory": Use(_TOKENIZED, "TokenizedHistory"),
        "TokenizedMultiHistoryTrajectory": Use(_TOKENIZED, "TokenizedMultiHistoryTrajectory"),
        "TokenizedTopK": Use(_TOKENIZED, "TokenizedTopK"),
        "TokenizedTrajectory": Use(_TOKENIZED, "TokenizedTrajectory"),
        "TokenizedTrajectoryGroup": Use(_TOKENIZED, "TokenizedTrajectoryGroup"),
        "Tokenizer": Use(_ART_TRAJECTORIES, "Tokenizer"),
        "Trajectory": _TRAJECTORY,
        "TrajectoryExchanges": Use("arthex.core.exchanges", "TrajectoryExchanges"),
        "TrajectoryGroup": _GROUP,
        "TrajectoryHistory": Use(_ART_TRAJECTORIES, "TrajectoryHistory"),
        "compact_dump": Use(_COMPACT, "compact_dump"),
        "compact_memory": Use(_COMPACT, "compact_memory"),
        "compact_validate": Use(_COMPACT, "compact_validate"),
        "compact_validate_json": Use(_COMPACT, "compact_validate_json"),
        "current_trajectory": _CURRENT,
        "first_occurrence_masks": Use(_TOKENIZED, "first_occurrence_masks"),
        "get_messages": Use(_ART_TRAJECTORIES, "get_messages"),
        "no_capture": _NO_CAPTURE,
        "tensorize": Use(_TOKENIZING, "tensorize"),
        "tokenize": Use(_TOKENIZING, "tokenize"),
        "trajectory": Use("arthex.composition.capture", "capture_calls"),
        "trajectory_group": _TRAJECTORY_GROUP,
    },
    "art.trajectories.tensors": _TENSORIZED_NAMES,
    "art.types": {
        "LocalTrainResult": _LOCAL_RESULT,
        "MegatronRuntimeConfig": _MEGATRON_NAME,
        "MegatronTopologyConfig": _MEGATRON_NAME,
        "Message": Use("arthex.core.chat_types", "Message"),
        "MessageOrChoice": Use("arthex.core.chat_types", "MessageOrChoice"),
        "Messages": _MESSAGES,
        "MessagesAndChoices": _MESSAGES_AND_CHOICES,
        "SFTMetricLoggingConfig": Use("arthex.adapters.serverless.api_types", "SFTMetricLogging"),
        "ServerlessTrainResult": _SERVERLESS_RESULT,
        "Tools": _TOOLS,
        "TrainConfig": _TRAIN_CONFIG,
        "TrainResult": _RESULT,
        "TrainSFTConfig": _TRAIN_SFT_CONFIG,
        "Verbosity": Use("arthex.utils.verbosity", "Verbosity"),
    },
    "art.utils": {
        "format_message": Use("arthex.utils.format_message", "format_message"),
        "get_model_step": Use("arthex.utils.output_dirs", "get_model_step"),
        "iterate_dataset": _ITERATE,
        "limit_concurrency": _LIMIT,
        "log_http_errors": _LOG_HTTP_ERRORS,
        "record_provenance": _PROVENANCE,
        "retry": _RETRY,
    },
    "art.utils.log_http_errors": {"log_http_errors": _LOG_HTTP_ERRORS},
    "art.utils.wandb_sdk": {
        name: Use("arthex.utils.wandb_sdk", name)
        for name in ("api", "artifact", "comm_error_type", "init", "login", "settings")
    },
    "art.utils.model_config": {
        name: Use("arthex.utils.model_config", name)
        for name in (
            "MODEL_CONFIGS",
            "ModelConfig",
            "detect_chat_template_parts",
            "get_instruction_response_parts",
        )
    },
    "art.utils.group_aggregate": {
        name: Use("arthex.adapters.local.group_aggregate", name)
        for name in ("Reduction", "group_aggregate")
    },
    "art.utils.safetensors": {
        name: Use("arthex.adapters.local.safetensors_stream", name)
        for name in (
            "PreparedSafetensors",
            "SafetensorsLayout",
            "prepare_safetensors",
            "save_prepared_safetensors",
            "save_safetensors",
        )
    },
    "art.utils.record_provenance": {
        "record_provenance": _PROVENANCE,
        "record_provenance_for_artifact": Use(
            "arthex.utils.record_provenance", "record_provenance_for_artifact"
        ),
    },
    "art.utils.cache_dirs": {
        name: Use("arthex.utils.cache_dirs", name)
        for name in (
            "cache_filesystem_type",
            "compiler_cache_root",
            "configure_model_cache_env",
            "network_cache_warning",
        )
    },
    "art.utils.lifecycle": {
        **{
            name: Use("arthex.utils.process_lifecycle", name)
            for name in (
                "PROCESS_SHUTDOWN_TIMEOUT_SECONDS",
                "ChildProcessSupervisor",
                "ServiceLifecycle",
                "cleanup_after_failure",
                "complete_task",
                "complete_to_thread",
                "consume_future_exception",
                "kill_process_group",
                "process_shutdown_sweep_grace",
                "process_shutdown_timeout",
                "terminate_asyncio_process_group",
                "terminate_popen_process_group",
            )
        },
        "managed_process_cmd": Use("arthex.utils.process_lifecycle", "managed_process_cmd"),
    },
    "art.utils.logging": {
        name: Use("arthex.utils.status_lines", name)
        for name in ("dim", "err", "info", "ok", "step", "warn")
    },
    "art.utils.managed_process": {
        name: Use("arthex.utils.managed_process", name)
        for name in ("main", "parse_args", "set_parent_death_signal")
    },
    "art.utils.litellm": {
        "convert_litellm_choice_to_openai": Use(
            "arthex.utils.litellm_choices", "convert_litellm_choice_to_openai"
        )
    },
    "art.utils.iterate_dataset": {"DatasetBatch": _DATASET_BATCH, "iterate_dataset": _ITERATE},
    "art.utils.limit_concurrency": {"limit_concurrency": _LIMIT},
    "art.utils.retry": {"retry": _RETRY},
    "art.utils.benchmark_rollout": {"benchmark_rollout": Use(_CHECKS, "benchmark_rollout")},
    "art.utils.benchmarking.aggregate_trajectories": {
        "load_aggregated_trajectories": Use(_BENCH, "load_aggregated_trajectories"),
        "load_latest_metrics": Use(_BENCH, "load_latest_metrics"),
    },
    "art.utils.benchmarking.charts": {
        "percentage_comparison_bar_chart": Use(_BENCH, "percentage_comparison_bar_chart"),
        "training_progress_chart": Use(_BENCH, "training_progress_chart"),
    },
    "art.utils.benchmarking.charts.percentage_comparison_bar_chart": {
        "percentage_comparison_bar_chart": Use(_BENCH, "percentage_comparison_bar_chart"),
    },
    "art.utils.benchmarking.charts.training_progress_chart": {
        "training_progress_chart": Use(_BENCH, "training_progress_chart"),
    },
    "art.utils.benchmarking.filter_model_split": {
        "filter_rename_model_split": Use(_BENCH, "filter_rename_model_split"),
    },
    "art.utils.benchmarking.load_trajectories": {
        "cache_path": Use(_BENCH, "cache_path"),
        "load_trajectories": Use(_BENCH, "load_trajectories"),
    },
    "art.utils.benchmarking.log_constant_metrics_wandb": {
        "log_constant_metrics_wandb": Use(_BENCH, "log_constant_metrics_wandb"),
    },
    "art.utils.benchmarking.pull_model_trajectories": {
        "pull_model_trajectories": Use(_BENCH, "pull_model_trajectories"),
    },
    "art.utils.benchmarking.types": {"BenchmarkModelKey": Use(_BENCH, "BenchmarkModelKey")},
    "art.utils.old_benchmarking.calculate_step_metrics": {
        "calculate_step_std_dev": Use(_OLD_BENCH, "calculate_step_std_dev"),
    },
    "art.utils.old_benchmarking.display_image_grid": {
        "display_image_grid": Use(_OLD_BENCH, "display_image_grid"),
    },
    "art.utils.old_benchmarking.generate_comparison_table": {
        "generate_comparison_table": Use(_OLD_BENCH, "generate_comparison_table"),
    },
    "art.utils.old_benchmarking.generate_line_graphs": {
        "generate_line_graphs": Use(_OLD_BENCH, "generate_line_graphs"),
    },
    "art.utils.old_benchmarking.load_benchmarked_models": {
        "load_benchmarked_models": Use(_OLD_BENCH, "load_benchmarked_models"),
    },
    "art.utils.old_benchmarking.types": {
        name: Use(_OLD_BENCH, name)
        for name in ("BenchmarkedModel", "BenchmarkedModelKey", "BenchmarkedModelStep")
    },
    "art.utils.deploy_model": {
        **{
            name: Use(_DEPLOYMENT, name)
            for name in (
                "DeploymentConfig",
                "DeploymentResult",
                "LoRADeploymentJob",
                "LoRADeploymentProvider",
                "Provider",
                "TOGETHER_SUPPORTED_BASE_MODELS",
                "TogetherDeploymentConfig",
                "TogetherJobStatus",
                "WANDB_SUPPORTED_BASE_MODELS",
                "WandbDeploymentConfig",
                "deploy_model",
                "deploy_wandb",
            )
        },
        "archive_and_presign_step_url": Use("arthex.utils.s3", "archive_and_presign_step_url"),
        "get_default_art_path": Use("arthex.utils.output_dirs", "get_default_art_path"),
        "get_model_step": Use("arthex.utils.output_dirs", "get_model_step"),
        "pull_model_from_s3": Use("arthex.utils.s3", "pull_model_from_s3"),
    },
    "art.utils.deployment": {
        name: Use(_DEPLOYMENT, name)
        for name in (
            "DeploymentConfig",
            "DeploymentResult",
            "LoRADeploymentJob",
            "LoRADeploymentProvider",
            "Provider",
            "TogetherDeploymentConfig",
            "WandbDeploymentConfig",
            "deploy_model",
            "deploy_wandb",
        )
    },
    "art.utils.deployment.common": {
        name: Use(_DEPLOYMENT, name)
        for name in ("DeploymentConfig", "DeploymentResult", "Provider", "deploy_model")
    },
    "art.utils.deployment.legacy": {
        name: Use(_DEPLOYMENT, name) for name in ("LoRADeploymentJob", "LoRADeploymentProvider")
    },
    "art.utils.deployment.together": {
        name: Use(_DEPLOYMENT, name)
        for name in (
            "TOGETHER_SUPPORTED_BASE_MODELS",
            "TogetherDeploymentConfig",
            "TogetherJob",
            "TogetherJobStatus",
            "deploy_to_together",
        )
    },
    "art.utils.deployment.wandb": {
        name: Use(_DEPLOYMENT, name)
        for name in ("WANDB_SUPPORTED_BASE_MODELS", "WandbDeploymentConfig", "deploy_wandb")
    },
    "art.utils.format_message": {
        "format_message": Use("arthex.utils.format_message", "format_message"),
    },
    "art.utils.get_model_step": {
        "get_model_step": Use("arthex.utils.output_dirs", "get_model_step"),
        "get_step_from_dir": Use("arthex.utils.output_dirs", "get_step_from_dir"),
    },
    "art.utils.grpo": {
        "rewards_have_zero_variance": Use("arthex.core.advantages", "zero_variance"),
    },
    "art.loss": {
        "AlignedLossInputs": Use("arthex.adapters.local.art_loss", "AlignedLossInputs"),
        "Loss": Use("arthex.adapters.local.art_loss", "Loss"),
        "LossInputs": Use("arthex.adapters.local.art_loss", "LossInputs"),
        "LossOffPolicyDiagnostics": Use(
            "arthex.adapters.local.art_loss", "LossOffPolicyDiagnostics"
        ),
        "LossOffPolicyDiagnosticsAccumulator": Use(
            "arthex.adapters.local.art_loss", "LossOffPolicyDiagnosticsAccumulator"
        ),
        "PackedLossInput": Use("arthex.adapters.local.art_loss", "PackedLossInput"),
        "compute_probs_corr": Use("arthex.adapters.local.art_loss", "compute_probs_corr"),
        "histogram_quantile": Use("arthex.adapters.local.art_loss", "histogram_quantile"),
        "importance_ratio_histogram_edges": Use(
            "arthex.adapters.local.art_loss", "importance_ratio_histogram_edges"
        ),
        "loss_fn": Use("arthex.adapters.local.art_loss", "loss_fn"),
        "shift_tensor": Use("arthex.adapters.local.art_loss", "shift_tensor"),
    },
    "art.utils.output_dirs": {
        "get_default_art_path": Use("arthex.utils.output_dirs", "get_default_art_path"),
        "get_model_dir": Use("arthex.utils.output_dirs", "get_model_dir"),
        "get_models_dir": Use("arthex.utils.output_dirs", "get_models_dir"),
        "get_output_dir_from_model_properties": Use(
            "arthex.utils.output_dirs", "get_output_dir_from_model_properties"
        ),
        "get_step_checkpoint_dir": Use("arthex.utils.output_dirs", "get_step_checkpoint_dir"),
        "get_trajectories_dir": Use("arthex.utils.output_dirs", "get_trajectories_dir"),
        "get_trajectories_split_dir": Use("arthex.utils.output_dirs", "get_trajectories_split_dir"),
    },
    "art.utils.get_repo_root_path": {
        "get_repo_root_path": Use("arthex.utils.repo_root", "get_repo_root_path"),
    },
    "art.utils.network": {"find_free_tcp_port": Use("arthex.utils.network", "find_free_tcp_port")},
    "art.utils.s3": {
        name: Use("arthex.utils.s3", name)
        for name in (
            "ExcludableOption",
            "S3SyncError",
            "archive_and_presign_step_url",
            "build_s3_path",
            "build_s3_zipped_step_path",
            "ensure_bucket_exists",
            "pull_model_from_s3",
            "push_model_to_s3",
            "s3_sync",
        )
    },
    "art.utils.s3_checkpoint_utils": {
        name: Use("arthex.utils.s3_checkpoints", name)
        for name in (
            "get_checkpoint_step_not_after_from_s3",
            "get_latest_checkpoint_step_from_s3",
            "migrate_s3_checkpoints_to_new_structure",
        )
    },
    "art.utils.strip_logprobs": {
        "strip_logprobs": Use("arthex.utils.strip_logprobs", "strip_logprobs")
    },
    "art.utils.suppress_litellm_serialization_warnings": {
        "suppress_litellm_serialization_warnings": Use(
            _CHECKS, "suppress_litellm_serialization_warnings"
        ),
    },
    "art.utils.trajectory_migration": {
        name: Use("arthex.adapters.parquet.migration", name)
        for name in (
            "MigrationResult",
            "auto_migrate_on_register",
            "deserialize_trajectory_groups",
            "dict_to_history",
            "dict_to_message_or_choice",
            "dict_to_trajectory",
            "dict_to_trajectory_group",
            "history_to_dict",
            "message_or_choice_to_dict",
            "migrate_all_models",
            "migrate_jsonl_to_parquet",
            "migrate_model_dir",
            "migrate_trajectories_dir",
            "serialize_trajectory_groups",
            "trajectory_group_to_dict",
            "trajectory_to_dict",
        )
    },
    "art.utils.trajectory_logging": {
        "read_trajectory_groups_parquet": Use(_FILES, "read_trajectory_groups_parquet"),
        "write_trajectory_groups_parquet": Use(_FILES, "write_trajectory_groups_parquet"),
    },
    "art.utils.sft": {
        **{
            name: Use("arthex.utils.sft", name)
            for name in (
                "SFTChunk",
                "create_sft_dataset_iterator",
                "get_file_row_count",
                "iterate_file",
                "resolve_sft_batch_size",
                "train_sft_from_file",
            )
        },
        "create_lr_schedule": Use("arthex.core.sft", "create_lr_schedule"),
    },
    "art.yield_trajectory": {
        name: Use(_YIELDING, name)
        for name in (
            "YieldTrajectoryContext",
            "capture_yielded_trajectory",
            "yield_trajectory",
            "yield_trajectory_context_var",
        )
    },
}


# -- the runtime side: what the module files call ---------------------------------------------

PREFIX = "arthex."


def art_path(module: str) -> str:
    """`arthex.art.types` -> `art.types`."""
    return module.removeprefix(PREFIX)


def refused_module(path: str) -> str | None:
    """What to use instead of ART's module `path`, if arthex refuses it (or a package above)."""
    if path in REFUSED_MODULES:
        return REFUSED_MODULES[path]
    for package, instead in REFUSED_PACKAGES.items():
        if path == package or path.startswith(package + "."):
            return instead
    return None


def refusal(what: str, instead: str) -> NotInArthexError:
    return NotInArthexError(f"ART's {what} is not in arthex: {instead} (see {GUIDE})")


def refuse_module(module: str) -> NoReturn:
    """Called by a refused module's file as it is imported."""
    path = art_path(module)
    instead = refused_module(path)
    raise refusal(f"module {path}", instead if instead is not None else _INTERNAL)


def children(path: str) -> list[str]:
    """The modules directly under ART's module `path` that the table knows."""
    known = [*MODULES, *REFUSED_MODULES, *REFUSED_PACKAGES]
    depth = path.count(".") + 1
    return sorted(
        {k.split(".")[depth] for k in known if k.startswith(path + ".") and k.count(".") >= depth}
    )


def supported(path: str) -> list[str]:
    return sorted(name for name, entry in MODULES[path].items() if isinstance(entry, Use))


def module_attributes(
    module: str,
) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` for the module file of ART's module."""
    path = art_path(module)
    entries = MODULES[path]
    below = children(path)
    names = supported(path)
    # A name that is also a submodule (`art.utils.iterate_dataset`, `art.rewards.ruler`): ART's
    # package binds the name as it imports the submodule, so the name wins. Import the
    # submodule now and drop the attribute the import system set, so the name's entry rules.
    namespace = vars(sys.modules[module])
    for name in sorted(set(entries) & set(below)):
        if refused_module(f"{path}.{name}") is None:
            importlib.import_module(f"{module}.{name}")
            namespace.pop(name, None)

    def __getattr__(name: str) -> Any:
        entry = entries.get(name)
        if isinstance(entry, Use):
            value = entry.resolve()
            setattr(sys.modules[module], name, value)
            return value
        if isinstance(entry, Refuse):
            raise refusal(f"{path}.{name}", entry.instead)
        if name in below:
            return importlib.import_module(f"{module}.{name}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        modules = [c for c in below if refused_module(f"{path}.{c}") is None and c not in entries]
        return sorted({*names, *modules})

    return __getattr__, __dir__, names
