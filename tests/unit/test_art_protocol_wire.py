"""The ART protocol's request shapes, as ART 0.5.17's client sends them through NAT 1.9.0's
RemoteBackend (recorded: tests/unit/data/art_protocol/), parsed without a server or NAT's
venv; the token ids of NAT-shaped Choices against the tiny model's own chat template; and
`arthex serve --protocol art`'s options."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest
from openai.types.chat.chat_completion import Choice

from arthex.apps.cli.serve import parse
from arthex.apps.server.art_protocol.sampled_ids import fill_sampled_ids
from arthex.apps.server.art_protocol.wire import (
    ART_DEFAULT_LEARNING_RATE,
    parse_groups,
    parse_model,
    parse_steps,
    train_config,
)
from arthex.core.errors import InvalidInputError
from arthex.core.identity import RunRef
from arthex.testing.tiny_model import tiny_model
from tests._art_server import RECORDED_BASE_MODEL, recorded_requests

NAT_LEARNING_RATE = 1e-4  # what the recording's NAT config sets under `training:`
NAT_CONFIG_LEARNING_RATE = 5e-05  # what NAT's adapter always puts in `config`


@pytest.fixture(scope="module")
def requests() -> list[dict[str, Any]]:
    return recorded_requests(RECORDED_BASE_MODEL)


def bodies(requests: list[dict[str, Any]], path: str) -> list[Any]:
    return [r["body"] for r in requests if r.get("path") == path]


def test_the_recording_is_the_session_nat_drives(requests: list[dict[str, Any]]) -> None:
    """The order NAT's adapter calls in (initialize, then two submissions with
    delete_old_checkpoints), over JSON with no Authorization header on the ART API, and the
    health check on the inference port with `Bearer default`."""
    calls = [(r["port"], r["method"], r["path"]) for r in requests]
    assert calls[:3] == [
        ("api", "POST", "/register"),
        ("api", "POST", "/_prepare_backend_for_training"),
        ("inference", "GET", "/v1/models"),
    ]
    submission = [
        ("api", "POST", "/_get_step"),
        ("api", "POST", "/_delete_checkpoint_files"),
        ("api", "POST", "/_train_model"),
        ("api", "POST", "/_get_step"),
    ]
    assert calls[3:] == submission * 2
    api = [r for r in requests if r["port"] == "api"]
    assert {r["authorization"] for r in api} == {None}
    assert {r["content_type"] for r in api} == {"application/json"}
    assert requests[2]["authorization"] == "Bearer default"


def test_every_model_body_parses_to_the_run(requests: list[dict[str, Any]]) -> None:
    models = bodies(requests, "/register") + bodies(requests, "/_get_step")
    models += [b["model"] for b in requests_with_model(requests)]
    assert len(models) == 10  # register, 4 get_step, prepare, 2 deletes, 2 trains
    for model in models:
        parsed = parse_model(model)
        assert parsed.run == RunRef("nat-project", "agent")
        assert parsed.base_model == RECORDED_BASE_MODEL
        assert parsed.trainable is True
        assert parsed.trainer_args == {"learning_rate": NAT_LEARNING_RATE}
        # the client's own folder travels in the body and is not the server's to use
        assert model["base_path"] == ".art"


def requests_with_model(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    paths = ("/_prepare_backend_for_training", "/_delete_checkpoint_files", "/_train_model")
    return [r["body"] for r in requests if r.get("path") in paths]


def test_the_learning_rate_nat_configures_wins_over_the_one_it_always_sends(
    requests: list[dict[str, Any]],
) -> None:
    body = bodies(requests, "/_train_model")[0]
    assert body["config"]["learning_rate"] == NAT_CONFIG_LEARNING_RATE
    model = parse_model(body["model"])
    config = train_config(body["config"], body["dev_config"], model)
    assert config.learning_rate == NAT_LEARNING_RATE
    assert config.kl_penalty_coef == 0.0
    # without trainer_args, the request's config is used (plain ART's TrainableModel.train)
    plain = parse_model({**body["model"], "_internal_config": None})
    assert train_config(body["config"], {}, plain).learning_rate == NAT_CONFIG_LEARNING_RATE
    assert train_config({}, {}, plain).learning_rate == ART_DEFAULT_LEARNING_RATE


def test_dev_config_keys_map_onto_arthex_options() -> None:
    model = parse_model({"name": "a", "project": "p", "trainable": True, "base_model": "m"})
    config = train_config(
        {"learning_rate": 1e-5},
        {"ppo": True, "epsilon": 0.3, "scale_rewards": False, "precalculate_logprobs": True},
        model,
    )
    assert (config.loss_fn, config.epsilon, config.scale_rewards) == ("ppo", 0.3, False)


def test_the_recorded_groups_parse_with_their_choices(requests: list[dict[str, Any]]) -> None:
    groups = parse_groups(bodies(requests, "/_train_model")[0]["trajectory_groups"])
    assert [len(g.trajectories) for g in groups] == [2, 2]
    choices = [[len(list(t.choices())) for t in g.trajectories] for g in groups]
    assert choices == [[1, 1], [2, 1]]
    # NAT's tool result arrives as a plain assistant message: context, not a Choice
    tool = groups[1].trajectories[0].messages_and_choices[2]
    assert tool == {"role": "assistant", "content": "4"}
    for group in groups:
        for trajectory in group.trajectories:
            for choice in trajectory.choices():
                extra = choice.model_extra or {}
                assert "prompt_token_ids" not in extra and "token_ids" not in extra


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_model(tmp_path_factory.mktemp("tiny") / "model")


def test_nat_choices_get_the_sampled_ids_and_the_rendered_prompt(
    requests: list[dict[str, Any]], tiny: str
) -> None:
    """Sampled ids: the N of each `token_id:N`, read from the raw JSON here. Prompt ids: the
    tiny model's tokenizer applying its chat template to the messages before the turn, with
    the generation prompt, called directly (not through arthex)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    raw = bodies(requests, "/_train_model")[0]["trajectory_groups"]
    groups = parse_groups(raw)

    def render(messages: Any, tools: Any) -> list[int]:
        ids = cast(
            list[Any],
            tokenizer.apply_chat_template(
                list(messages), tools=tools, add_generation_prompt=True, tokenize=True,
                return_dict=False,
            ),
        )  # fmt: skip
        return [int(i) for i in ids]

    filled, count = fill_sampled_ids(groups, lambda: render, lambda: len(tokenizer))
    assert count == 5
    for g, group in enumerate(filled):
        for t, trajectory in enumerate(group.trajectories):
            items = trajectory.messages_and_choices
            raw_items = raw[g]["trajectories"][t]["messages_and_choices"]
            for i, item in enumerate(items):
                if not isinstance(item, Choice):
                    continue
                extra = item.model_extra or {}
                tokens = [e["token"] for e in raw_items[i]["logprobs"]["content"]]
                assert extra["token_ids"] == [int(re.sub("^token_id:", "", x)) for x in tokens]
                before = [
                    {"role": "assistant", "content": x["message"]["content"]}
                    if "finish_reason" in x
                    else {"role": x["role"], "content": x["content"]}
                    for x in raw_items[:i]
                ]
                expected = tokenizer.apply_chat_template(
                    before, add_generation_prompt=True, tokenize=True, return_dict=False
                )
                assert extra["prompt_token_ids"] == list(expected)
    # the input was not changed in place
    untouched = groups[0].trajectories[0].choices()
    assert all("token_ids" not in (c.model_extra or {}) for c in untouched)


def _choice(tokens: list[str]) -> dict[str, Any]:
    return {
        "index": 0,
        "finish_reason": "stop",
        "message": {"role": "assistant", "content": "x"},
        "logprobs": {
            "content": [
                {"token": t, "logprob": -1.0, "bytes": None, "top_logprobs": []} for t in tokens
            ]
        },
    }


def _groups(choice: dict[str, Any]) -> list[Any]:
    trajectory = {"messages_and_choices": [{"role": "user", "content": "hi"}, choice]}
    return parse_groups([{"trajectories": [trajectory, {**trajectory, "reward": 1.0}]}])


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (["hello"], "not spelled 'token_id:N'"),
        (["token_id:-3"], "not spelled 'token_id:N'"),
        (["token_id:99999"], "outside the base model's vocabulary of 768"),
    ],
)
def test_bad_logprob_tokens_are_refused_naming_the_choice(tokens: list[str], message: str) -> None:
    def render(messages: Any, tools: Any) -> list[int]:
        return [1, 2, 3]

    with pytest.raises(InvalidInputError, match=message) as caught:
        fill_sampled_ids(_groups(_choice(tokens)), lambda: render, lambda: 768)
    assert "group 0, trajectory 0, choice 0" in str(caught.value)


def test_choices_that_have_ids_are_left_alone() -> None:
    choice = {**_choice(["token_id:5"]), "prompt_token_ids": [9], "token_ids": [5]}

    def never() -> Any:
        raise AssertionError("no tokenizer is needed")

    groups = _groups(choice)
    filled, count = fill_sampled_ids(groups, never, never)
    assert count == 0 and filled == groups


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ([], "must be a JSON object"),
        ({"project": "p"}, "has no 'name'"),
        ({"name": "../up", "project": "p"}, "not a safe path segment"),
        ({"name": "a", "project": "p", "trainable": "yes"}, "trainable must be true or false"),
        ({"name": "a", "project": "p", "trainable": True}, "has no base_model"),
        ({"name": "a", "project": "p", "_internal_config": []}, "_internal_config must be"),
    ],
)
def test_bad_models_are_refused(payload: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        parse_model(payload)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("0", "must be a list"),
        ([1, "2"], "holds '2'"),
        ([True], "holds True"),
        ([-1], "holds -1"),
    ],
)
def test_bad_steps_to_keep_are_refused(payload: object, message: str) -> None:
    with pytest.raises(InvalidInputError, match=re.escape(message)):
        parse_steps(payload)


def test_bad_configs_are_refused() -> None:
    model = parse_model({"name": "a", "project": "p", "trainable": True, "base_model": "m"})
    with pytest.raises(InvalidInputError, match=re.escape("config.learning_rate must be")):
        train_config({"learning_rate": "fast"}, {}, model)
    with pytest.raises(InvalidInputError, match="must be above 0"):
        train_config({"learning_rate": 0}, {}, model)
    nat = parse_model(
        {
            "name": "a",
            "project": "p",
            "trainable": True,
            "base_model": "m",
            "_internal_config": {"trainer_args": {"learning_rate": -1}},
        }
    )
    with pytest.raises(InvalidInputError, match=re.escape("trainer_args.learning_rate must be")):
        train_config({}, {}, nat)


# --- the command line -------------------------------------------------------------------


def test_art_mode_defaults_are_arts() -> None:
    options = parse(["--protocol", "art"])
    assert (options.host, options.listen_port, options.art_inference_port) == (
        "127.0.0.1",
        7999,
        8000,
    )
    assert options.art_base_path == ".art"
    assert parse([]).listen_port == 8000, "the arthex protocol keeps its own port"


@pytest.mark.parametrize("host", ["127.0.0.1", "127.31.4.9", "::1", "localhost"])
def test_loopback_hosts_need_no_flag(host: str) -> None:
    assert parse(["--protocol", "art", "--host", host]).host == host


def test_other_addresses_need_insecure_bind(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["--protocol", "art", "--host", "0.0.0.0"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--insecure-bind" in err and len(err.strip().splitlines()) == 1
    assert parse(["--protocol", "art", "--host", "0.0.0.0", "--insecure-bind"]).insecure_bind


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--inference-port", "9000"], "--inference-port is an option of --protocol art"),
        (["--base-path", "x"], "--base-path is an option of --protocol art"),
        (["--insecure-bind"], "--insecure-bind is an option of --protocol art"),
        (["--protocol", "grpc"], "--protocol must be one of arthex, art"),
        (["--protocol", "art", "--inference-port", "70000"], "65535"),
        (
            ["--protocol", "art", "--state-dir", "s"],
            "--state-dir is not an option of --protocol art",
        ),
        (["--protocol", "art", "--audit-log", "off"], "--audit-log is not an option of --protocol"),
        (["--protocol", "art", "--admin-keys", "k"], "--admin-keys is not an option of --protocol"),
        (["--protocol", "art", "--audit-backups", "2"], "--audit-backups is not an option of"),
    ],
)
def test_misplaced_options_are_one_line_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_base_path_under_a_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit):
        parse(["--protocol", "art", "--base-path", str(tmp_path / "file" / "runs")])
    assert "--base-path" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "dev_config"),
    [
        ({"learning_rate": 10**400}, {}),
        ({}, {"epsilon": 10**400}),
        ({"kl_penalty_coef": 10**400}, {}),
    ],
    ids=["learning_rate", "epsilon", "kl_penalty_coef"],
)
def test_a_number_too_big_for_a_float_is_refused_as_bad_input(
    config: dict[str, Any], dev_config: dict[str, Any]
) -> None:
    """JSON reads a long integer literal as an int no float holds: a 4xx, never a 500."""
    model = parse_model({"name": "a", "project": "p", "trainable": True, "base_model": "m"})
    with pytest.raises(InvalidInputError):
        train_config(config, dev_config, model)


def test_the_arthex_servers_config_refuses_a_number_too_big_for_a_float() -> None:
    from arthex.apps.server.runner import parse_config

    with pytest.raises(InvalidInputError, match="learning_rate"):
        parse_config({"learning_rate": 10**400})
