"""ART 0.5.23's renderer path of `art.tinker_native.data` and arthex's under `arthex.art` give
the same outcomes on the same cases, with tinker-cookbook 0.5.8's renderers (role_colon, Qwen3
without thinking, Qwen3 Instruct, Kimi K2) over one tokenizer: the tiny model's, with the
special tokens those renderers need. `find_last_choice`, `extract_logprobs_from_choice`,
`convert_openai_messages_to_renderer_format`, `create_conversation_prefix_with_tools`,
`parse_completion_to_openai_message` and `history_to_datum` (the Datum's ids, targets,
logprobs and advantages; arthex's Datum has no `mask`, see docs/migrating-from-art.md). One
script for both (art/tinker_native_data_script.py), run in the venv that has ART, tinker and
the cookbook (art_tinker_env.py), arthex from this checkout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from arthex.testing.tiny_model import tiny_model

from .art_env import SCRIPTS, art_environment, checkout_pyroot
from .art_tinker_env import art_tinker_python

RENDERERS = ["role_colon", "qwen3_disable_thinking", "qwen3_instruct", "kimi_k2"]
SPECIAL = [
    "<|im_start|>", "<|im_end|>", "<|im_system|>", "<|im_user|>", "<|im_assistant|>",
    "<|im_middle|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>",
    "</tool_response>", "<|endoftext|>",
]  # fmt: skip
WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}


def entry(token: str, logprob: float) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "bytes": None, "top_logprobs": []}


def choice(
    content: str | None, entries: list[dict[str, Any]] | None, **message: Any
) -> dict[str, Any]:
    return {
        "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
        "index": 0,
        "message": {"role": "assistant", "content": content, **message},
        "logprobs": None if entries is None else {"content": entries, "refusal": None},
    }


def tokenizer_dir(root: Path) -> tuple[str, Any]:
    from transformers import AutoTokenizer

    tokenizer: Any = AutoTokenizer.from_pretrained(tiny_model(root / "tiny"))
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL})
    tokenizer.save_pretrained(root / "tokenizer")
    return str(root / "tokenizer"), tokenizer


def cases(root: Path) -> dict[str, Any]:
    path, tokenizer = tokenizer_dir(root)
    pieces = tokenizer.convert_ids_to_tokens(
        tokenizer.encode("Sunny today", add_special_tokens=False)
    )
    sampled = [entry("token_id:41", -0.25), entry("token_id:7", -1.5), entry("token_id:9", -0.125)]
    by_string = [entry(piece, -0.5 - i) for i, piece in enumerate(pieces)]
    user = {"role": "user", "content": "Weather in Paris?"}
    system = {"role": "system", "content": "Be brief."}
    tool_reply = {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}
    return {
        "tokenizer": path,
        "renderers": RENDERERS,
        "conversations": [
            [],
            [user],
            [system, user, {"choice": choice("A", sampled)}],
            [user, {"choice": choice("A", sampled)}, user, {"choice": choice("B", None)}, user],
        ],
        "choices": [
            choice("A", sampled),
            choice("A", by_string),
            choice(
                "A",
                [
                    entry("token_id:x", -1.0),
                    entry("token_id:12:7", -2.0),
                    entry("no-such-token-here", -3.0),
                    entry("", -4.0),
                ],
            ),
            choice("A", []),
            choice("A", None),
            {**choice("A", None), "logprobs": {"content": None, "refusal": sampled}},
        ],
        "convert": [
            {"messages": [system, user], "tools": None},
            {"messages": [system, user], "tools": [{"type": "function", "function": WEATHER}]},
            {"messages": [user, system], "tools": [{"type": "function", "function": WEATHER}]},
            {"messages": [system, user], "tools": [WEATHER]},
            {
                "messages": [
                    user,
                    {"role": "assistant", "content": None, "tool_calls": [CALL]},
                    tool_reply,
                    {"role": "developer", "content": "dropped"},
                    {
                        "role": "assistant",
                        "content": "Sunny.",
                        "tool_calls": [
                            {"function": {"name": "get_weather", "arguments": {"city": "Rome"}}}
                        ],
                    },
                    {"role": "tool", "content": "Warm"},
                    {"role": "user"},
                ],
                "tools": [],
            },
        ],
        "prefix": [{"tools": [WEATHER], "system": []}, {"tools": [WEATHER], "system": ["Hi."]}],
        "completions": [
            "Sunny today.<|im_end|>",
            "Sunny today.",
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
            "</tool_call><|im_end|>",
            "<think>\nhot\n</think>\n\nSunny.<|im_end|>",
        ],
        "histories": [
            {
                "messages_and_choices": [system, user, {"choice": choice("A", sampled)}],
                "tools": None,
                "advantage": 1.5,
            },
            {
                "messages_and_choices": [
                    system,
                    user,
                    {"choice": choice(None, sampled, tool_calls=[CALL])},
                    tool_reply,
                    {"choice": choice("Sunny.", by_string)},
                ],
                "tools": [{"type": "function", "function": WEATHER}],
                "advantage": -0.75,
            },
            {
                "messages_and_choices": [user, {"choice": choice("A", None)}],
                "tools": None,
                "advantage": 1.0,
            },
            {"messages_and_choices": [user], "tools": None, "advantage": 1.0},
        ],
    }


def run_script(lib: str, payload: dict[str, Any], root: Path) -> Any:
    env = art_environment()
    if lib != "art":
        env["PYTHONPATH"] = str(checkout_pyroot(root))
    done = subprocess.run(
        [str(art_tinker_python()), str(SCRIPTS / "tinker_native_data_script.py"), lib],
        input=json.dumps(payload), capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    root = tmp_path_factory.mktemp("tinker-native-data")
    payload = cases(root)
    return run_script("art", payload, root), run_script("arthex.art", payload, root)


@pytest.mark.parametrize("part", ["last", "logprobs", "convert", "prefix", "parse", "datum"])
def test_the_renderer_path_gives_arts_outcomes(outcomes: tuple[Any, Any], part: str) -> None:
    art, ours = outcomes
    assert ours[part] == art[part]


def test_the_cases_reach_each_branch(outcomes: tuple[Any, Any]) -> None:
    art, _ = outcomes
    assert [None if found is None else found[0] for found in art["last"]] == [None, None, 2, 3]
    assert art["logprobs"][0] == {"ok": [[41, 7, 9], [-0.25, -1.5, -0.125]]}
    assert art["logprobs"][2] == {"ok": [[12], [-2.0]]}
    assert art["logprobs"][4] == {"ok": [[], []]}
    assert {"error": "NotImplementedError"} in art["prefix"]  # role_colon declares no tools
    ids, logprobs = art["logprobs"][1]["ok"]  # "Sunny today"'s pieces, through the tokenizer
    assert len(ids) >= 2 and logprobs == [-0.5 - i for i in range(len(ids))]
    datums = art["datum"]  # four histories for each renderer, role_colon's first
    assert datums[1] == {"error": "NotImplementedError"}  # role_colon declares no tools
    for first in range(0, len(datums), 4):
        assert datums[first]["ok"]["advantages"][-1] == 1.5
        assert datums[first + 2] == datums[first + 3] == {"ok": None}
    assert all(datums[i]["ok"]["advantages"][-1] == -0.75 for i in (5, 9, 13))
