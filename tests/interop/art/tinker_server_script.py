"""One sequence of calls with the Tinker server's client, `TinkerAsyncOpenAI` of
`{lib}.tinker.client` (ART's, or arthex's under `arthex.art`: the first argument names the
package), against a running Tinker OpenAI-compatible server; prints what each call gave, as
JSON.

The calls: put an alias onto a sampler path, list and retrieve it, a greedy chat completion
through it with logprobs, re-point it (raw response) and complete again, score the first
completion's choice under the alias and the base model (`with_logprobs`, one renamed by
`model_aliases`), delete the alias, and be refused: an unknown model, a retrieve after the
delete, a key that is not a Tinker key. An error is given as the exception's class name.

Run by ART's interpreter for ART; the interop test runs arthex's in its own process.
"""

import asyncio
import importlib
import json
import sys

MESSAGES = [{"role": "user", "content": "Hello! How can I help you today?"}]


async def outcome(call):
    try:
        return await call
    except Exception as error:  # the class is the outcome
        return {"error": type(error).__name__}


def choice_of(completion):
    choice = completion.choices[0]
    return {
        "finish_reason": choice.finish_reason,
        "content": choice.message.content,
        "tokens": [entry.token for entry in choice.logprobs.content],
        "logprobs": [entry.logprob for entry in choice.logprobs.content],
        "token_ids": (choice.model_extra or {}).get("token_ids"),
        "prompt_token_ids": (choice.model_extra or {}).get("prompt_token_ids"),
    }


async def calls(lib, cases):
    client_module = importlib.import_module(f"{lib}.tinker.client")
    client = client_module.TinkerAsyncOpenAI(
        base_url=cases["base_url"], api_key=cases["api_key"], max_retries=0
    )
    out = {"client": [type(client).__name__, type(client.models).__name__]}
    put = await client.models.put("agent", target=cases["before"])
    out["put"] = [put.id, put.object, put.owned_by, put.created > 0]
    listed = await client.models.list()
    out["listed"] = [model.id for model in listed.data]
    out["retrieved"] = (await client.models.retrieve("agent")).id
    first = await client.chat.completions.create(
        model="agent", messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True
    )
    out["first"] = choice_of(first)
    out["first_model"] = first.model
    raw = await client.models.with_raw_response.put("agent", target=cases["after"])
    out["raw"] = [raw.status_code, raw.parse().id]
    second = await client.chat.completions.create(
        model="agent", messages=MESSAGES, max_tokens=6, temperature=0, logprobs=True
    )
    out["second"] = choice_of(second)
    # the before path again, to score the first choice under the weights that sampled it
    await client.models.put("agent", target=cases["before"])
    scored = await client.messages_and_choices.with_logprobs(
        [*MESSAGES, first.choices[0]],
        models=["agent", cases["base_model"]],
        model_aliases={cases["base_model"]: "base"},
        tools=None,
    )
    out["scored_types"] = [type(item).__name__ for item in scored.messages_and_choices]
    back = scored.messages_and_choices[1]
    out["extra_logprobs"] = [entry.model_extra["extra_logprobs"] for entry in back.logprobs.content]
    out["usages"] = [[u.prompt_tokens, u.completion_tokens] for u in scored.usages]
    deleted = await client.models.delete("agent")
    out["deleted"] = [deleted.id, deleted.deleted]
    out["after_delete"] = await outcome(client.models.retrieve("agent"))
    out["unknown"] = await outcome(
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=2)
    )
    await client.close()
    stranger = client_module.TinkerAsyncOpenAI(
        base_url=cases["base_url"], api_key="sk-not-tinker", max_retries=0
    )
    out["stranger"] = await outcome(stranger.models.list())
    await stranger.close()
    return out


def run(lib, cases):
    return asyncio.run(calls(lib, cases))


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.loads(sys.stdin.read()))))
