"""ART's `art.dev.openai_server`, under arthex: `OpenAIServerConfig` and `ServerArgs`,
TypedDicts with ART's keys. arthex's servers need no configuration passed to `register()`:
`TrainableModel` and the backends take none of it. `get_openai_server_config` raises a
one-line error saying what to use instead (the table: arthex/art/_table.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypedDict

from arthex.art._table import module_attributes
from arthex.art.dev.engine import EngineArgs


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
