"""ART's `art.dev.openai_server`, under arthex: `OpenAIServerConfig` and `ServerArgs`,
TypedDicts with ART's keys, and `get_openai_server_config`, what arthex's LocalBackend serves a
model with, in that shape.

arthex's servers need no configuration passed to `register()` (`TrainableModel` and the
backends take none of it): `get_openai_server_config` describes them, as
`arthex.art.dev.get_model_config` describes the trainer, with a config's keys laid over them as
ART lays them. Where arthex's server does what ART's vLLM server is told to, the keys are ART's:
token ids returned as `token_id:N` strings (`return_tokens_as_token_ids`), Hermes
`<tool_call>` blocks parsed into `tool_calls` when a request has tools
(`enable_auto_tool_choice`, `tool_call_parser="hermes"`), and a checkpoint served as
`{model_name}@{step}` (`lora_modules`, ART's JSON strings). Where it differs, the keys say what
arthex's server does:

- `host` "127.0.0.1" and `port` 0: arthex's server listens on loopback only, on a free port
  it picks (the model's `openai_client()` knows it);
- no `api_key`: each backend's servers take `LocalBackend(api_key=...)`, or a random key made
  for that backend (ART's vLLM takes the fixed key "default");
- `engine_args` are the arguments arthex starts vLLM with for `LocalBackend(engine="vllm")`
  with the backend's defaults (LoRA on, `max_lora_rank` from `lora_rank`, half the GPU, raw
  logprobs), and `served_model_name` is `model_name` whether or not a checkpoint is given:
  arthex points `{model_name}` at the newest step it serves, where ART serves the base model
  under its Hugging Face name once a LoRA is loaded. arthex leaves vLLM's `generation_config`
  as vLLM sets it (ART sets "vllm"): arthex passes every sampling parameter itself.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Literal, TypedDict, cast

from arthex.art._table import module_attributes
from arthex.art.dev.engine import EngineArgs
from arthex.core.errors import InvalidInputError


def _step_of(lora_path: str) -> int:
    name = os.path.basename(lora_path)
    if not (name.isascii() and name.isdigit()):
        raise InvalidInputError(
            f"lora_path must be a checkpoint's step folder (its name the step number, e.g. "
            f".../checkpoints/0003), got {lora_path!r}"
        )
    return int(name)


def get_openai_server_config(
    model_name: str,
    base_model: str,
    log_file: str,
    lora_path: str | None = None,
    config: OpenAIServerConfig | None = None,
) -> OpenAIServerConfig:
    """How arthex's LocalBackend serves `model_name` (`base_model`, with the checkpoint at
    `lora_path` when given) in ART's `OpenAIServerConfig` shape; `config`'s `log_file`,
    `server_args` and `engine_args` keys are laid over it as ART lays them. A `lora_path` whose
    folder name is no step number is refused (InvalidInputError, a ValueError as ART's)."""
    import inspect

    from arthex.adapters.inference.vllm_args import VllmSettings, engine_arguments
    from arthex.adapters.local import LocalBackend
    from arthex.core.identity import step_name

    config = config if config is not None else OpenAIServerConfig()
    lora_modules = None
    if lora_path:
        step = _step_of(lora_path)
        lora_modules = [json.dumps({"name": step_name(model_name, step), "path": lora_path})]
    server_args = ServerArgs(
        host="127.0.0.1",
        port=0,
        lora_modules=lora_modules,
        return_tokens_as_token_ids=True,
        enable_auto_tool_choice=True,
        tool_call_parser="hermes",
    )
    server_args.update(config.get("server_args", {}))
    backend = inspect.signature(LocalBackend.__init__).parameters
    settings = VllmSettings(
        gpu_memory_utilization=backend["gpu_memory_utilization"].default,
        enforce_eager=backend["enforce_eager"].default,
    )
    started: dict[str, Any] = engine_arguments(
        base_model, settings, device=None, lora_rank=backend["lora_rank"].default
    )
    engine_args = cast(EngineArgs, {**started, "served_model_name": model_name})
    engine_args.update(config.get("engine_args", {}))
    return OpenAIServerConfig(
        log_file=config.get("log_file", log_file),
        server_args=server_args,
        engine_args=engine_args,
    )


class OpenAIServerConfig(TypedDict, total=False):
    log_file: str
    server_args: ServerArgs
    engine_args: EngineArgs


class ServerArgs(TypedDict, total=False):
    host: str | None
    port: int
    uvicorn_log_level: Literal["debug", "info", "warning", "error", "critical", "trace"]
    allow_credentials: bool
    allowed_origins: str
    allowed_methods: str
    allowed_headers: str
    api_key: str | None
    lora_modules: list[str] | None
    prompt_adapters: list[str] | None
    chat_template: str | None
    chat_template_content_format: Literal["auto", "string", "openai"]
    response_role: str | None
    ssl_keyfile: str | None
    ssl_certfile: str | None
    ssl_ca_certs: str | None
    enable_ssl_refresh: bool
    ssl_cert_reqs: int
    root_path: str | None
    middleware: list[str]
    return_tokens_as_token_ids: bool
    disable_frontend_multiprocessing: bool
    enable_request_id_headers: bool
    enable_auto_tool_choice: bool
    tool_call_parser: str | None
    tool_parser_plugin: str
    max_log_len: int | None
    disable_fastapi_docs: bool
    enable_prompt_tokens_details: bool
    enable_server_load_tracking: bool
    enable_reasoning: bool
    reasoning_parser: str | None


if not TYPE_CHECKING:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
