"""ART 0.5.23's own `art.serverless.client.Client` and arthex's (`arthex.art.serverless.client`)
make the same sequence of calls (art/serverless_api_script.py, one script for both) against
one `arthex serve --backend local` with the tiny model, through a proxy that records every
request. The two request lists are equal: methods, paths, queries and JSON bodies, in order
(the server's model and job ids, different for each run, read as placeholders), and the
server answered each with the same status. What each call gave is the same too, but for the
errors' classes: arthex raises its own where ART raises openai's, one for one."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from tests._serverless import ServerProcess, local_tiny_server

from ._recording_proxy import Recorded, recording_proxy
from .art_env import art_outcome, arthex_outcome

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = "serverless_api_script"
# The error each of ART's openai errors is in arthex (docs/migrating-from-art.md says why).
ARTHEX_ERROR_OF = {
    "UnprocessableEntityError": "InvalidInputError",
    "NotFoundError": "NotRegisteredError",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from local_tiny_server(tmp_path_factory, "api")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory, server: ServerProcess) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


def choice(content: str, tokens: list[int], prompt: list[int]) -> dict[str, Any]:
    """A sampled Choice as an arthex inference server returns it (token ids and logprobs)."""
    return {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": content},
        "logprobs": {"content": [
            {"token": f"token_id:{t}", "logprob": -0.5 - 0.25 * i, "bytes": None,
             "top_logprobs": []}
            for i, t in enumerate(tokens)
        ]},
        "prompt_token_ids": prompt,
        "token_ids": tokens,
    }  # fmt: skip


GROUPS = [
    ["Say yes", [[choice("yes", [20, 21], [1, 11, 12]), 1.0],
                 [choice("no", [22], [1, 11, 12]), 0.0],
                 [choice("maybe", [23, 24, 25], [1, 11, 12]), 0.5]]],
    ["Say no", [[choice("no", [30], [1, 13, 12]), 1.0],
                [choice("yes", [31, 32], [1, 13, 12]), 0.0]]],
]  # fmt: skip

_IDS = re.compile(r"\b([mj])[0-9a-f]{24}\b")


def placeholders(value: Any, tenant: str, key: str) -> Any:
    """`value` with every server-made model and job id read as `{model}` / `{job}`, and the
    run's tenant and key as `{tenant}` / `{key}`."""
    text = _IDS.sub(lambda m: "{model}" if m.group(1) == "m" else "{job}", json.dumps(value))
    return json.loads(text.replace(key, "{key}").replace(f'"{tenant}"', '"{tenant}"'))


def as_sent(requests: list[Recorded], tenant: str, key: str) -> list[dict[str, Any]]:
    assert all(r.bearer == key for r in requests), "every request carries the key as a bearer"
    return [
        placeholders(attrs.asdict(r, filter=lambda a, _: a.name != "bearer"), tenant, key)
        for r in requests
    ]


def run_arts(cases: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = art_outcome(SCRIPT, cases, timeout_s=900)
    return result


def run_arthexs(cases: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = arthex_outcome(SCRIPT, cases)
    return result


def test_arts_client_and_arthexs_send_the_same_requests_and_read_the_same_answers(
    server: ServerProcess, tiny: str
) -> None:
    # a tenant each: both start from nothing
    (tenant, key), (our_tenant, our_key) = server.fresh_tenant(), server.fresh_tenant()
    with recording_proxy(server.url) as proxy:
        cases = {"base_url": proxy.url + "/v1", "server_url": server.url + "/v1",
                 "api_key": key, "base_model": tiny, "groups": GROUPS}  # fmt: skip
        arts = run_arts(cases)
        art_requests = as_sent(proxy.requests, tenant, key)
        proxy.requests.clear()
        ours = run_arthexs({**cases, "api_key": our_key})
        our_requests = as_sent(proxy.requests, our_tenant, our_key)

    assert len(our_requests) == len(art_requests)
    for art_request, our_request in zip(art_requests, our_requests, strict=True):
        assert our_request == art_request
    # the sequence is what the script says, and the server acted on it
    assert [(r["method"], r["path"], r["status"]) for r in art_requests][:4] == [
        ("POST", "/v1/preview/models", 201),
        ("POST", "/v1/preview/models", 200),
        ("POST", "/v1/preview/models", 422),
        ("POST", "/v1/preview/models/{model}/log", 200),
    ]
    train = next(r for r in art_requests if r["path"] == "/v1/preview/training-jobs")
    assert train["body"]["experimental_config"] == {"learning_rate": 1e-3, "loss_fn": "cispo"}
    assert len(train["body"]["trajectory_groups"]) == 2
    by_one = [r["query"] for r in art_requests if r["query"].get("limit") == ["1"]]
    assert {"after": ["{model}-step0"], "limit": ["1"]} in by_one  # a page after a cursor

    errors = ("twice", "sft", "unknown_job", "after_delete")
    assert {name: arts[name]["error"] for name in errors} == {
        "twice": "UnprocessableEntityError",
        "sft": "UnprocessableEntityError",
        "unknown_job": "NotFoundError",
        "after_delete": "NotFoundError",
    }
    for name in errors:
        assert ours[name] == {"error": ARTHEX_ERROR_OF[arts[name]["error"]]}, name
    # the same resources, methods, parameters and fields; arthex's Client takes three more
    # keyword arguments, each with a default
    art_init = arts["shapes"].pop("Client.__init__")
    our_init = ours["shapes"].pop("Client.__init__")
    assert our_init[1][: len(art_init[1])] == art_init[1]
    assert [p[0] for p in our_init[1][len(art_init[1]) :]] == [
        "timeout",
        "max_retries",
        "transport",
    ]
    assert all(p[1] == "KEYWORD_ONLY" and p[2] != "<required>" for p in our_init[1][3:])
    assert arts["shapes"]["attributes"]["Models"] == ["checkpoints"]
    arts_rest = {k: v for k, v in placeholders(arts, tenant, key).items() if k not in errors}
    ours_rest = {
        k: v for k, v in placeholders(ours, our_tenant, our_key).items() if k not in errors
    }
    assert ours_rest == arts_rest

    assert arts["created"]["entity"] == tenant and arts["status"] == "succeeded"
    kinds = [event[2] for event in arts["events"]]
    assert kinds[0] == "training_started" and kinds[-1] == "training_ended"
    assert arts["steps_by_one"] == [0, 1] and arts["older"] == [[0], False]
    assert arts["deleted"] == ["DeleteCheckpointsResponse", 1, [9]]
    assert arts["steps_after"] == [1]
    registry = json.loads((server.state_dir / "registry.json").read_text())
    assert not [m for m in registry["models"] if m["tenant"] in (tenant, our_tenant)]
