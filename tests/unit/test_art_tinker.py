"""ART's Tinker names under `arthex.art`: `art.tinker.get_renderer_name` and
`art.tinker_native.data`'s conversions from trajectory groups to Tinker Datums, on worked
examples (each expected Datum is laid out by hand from ART's layout: `model_input` all tokens
but the last, `target_tokens` all but the first, logprobs and advantages zero over the
prompt's first P-1 positions). ART's renderer names are checked against ART's own code in
tests/interop/test_art_tinker_renderers.py."""

from __future__ import annotations

import importlib
import logging
import math
import re
from typing import Any

import pytest

import arthex
from arthex.art import tinker as art_tinker
from arthex.art.tinker import renderers
from arthex.core.errors import InvalidInputError, NotInArthexError
from arthex.core.trajectories import History, Trajectory, TrajectoryGroup
from arthex.testing.builders import make_choice, make_trajectory
from arthex.utils import tinker_renderers

# -- renderer names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_model", "renderer"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3"),
        ("Qwen/Qwen3.5-4B", "qwen3_5_disable_thinking"),
        ("Qwen/Qwen3-8B", "qwen3_disable_thinking"),
        ("Qwen/Qwen3-4B-Instruct-2507", "qwen3_instruct"),
        ("moonshotai/Kimi-K2.5", "kimi_k25"),
        ("moonshotai/Kimi-K2-Thinking", "kimi_k2"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseekv3_disable_thinking"),
        ("openai/gpt-oss-120b", "gpt_oss_no_sysprompt"),
    ],
)
def test_get_renderer_name_picks_the_familys_renderer(base_model: str, renderer: str) -> None:
    assert art_tinker.get_renderer_name(base_model) == renderer


def test_an_unknown_base_model_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=re.escape("'Qwen/Qwen2.5-7B'")):
        renderers.get_renderer_name("Qwen/Qwen2.5-7B")
    with pytest.raises(InvalidInputError, match="base_model must be a model name"):
        renderers.get_renderer_name(None)  # type: ignore[arg-type]
    assert renderers.is_qwen3_dot_family_model("Qwen/Qwen3.5-4B")
    assert not renderers.is_qwen3_dot_family_model("Qwen/Qwen3-8B")


def test_a_default_renderer_is_logged_not_printed(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    with caplog.at_level(logging.INFO, logger=tinker_renderers.__name__):
        assert renderers.get_renderer_name("Qwen/Qwen3-8B") == "qwen3_disable_thinking"
    assert "'qwen3_disable_thinking' for Qwen/Qwen3-8B" in caplog.text
    assert capsys.readouterr().out == ""


def test_the_paths_resolve_and_arts_internals_stay_refused() -> None:
    from arthex.art import tinker_native
    from arthex.art.tinker_native import backend

    assert art_tinker.get_renderer_name is tinker_renderers.get_renderer_name
    assert tinker_native.TinkerNativeBackend is arthex.TinkerBackend
    assert backend.TinkerNativeBackend is arthex.TinkerBackend
    # ART's state.json keys, read with ART's meaning (a run ART left is continued)
    assert (backend.STATE_KEY_RUN_IDS, backend.STATE_KEY_LATEST_STEP) == (
        "tinker_run_ids",
        "latest_step",
    )
    assert renderers.renderer_name_message is tinker_renderers.renderer_name_message
    from arthex.adapters.tinker.openai_server import TinkerOpenAIServer
    from arthex.art.tinker import server

    assert art_tinker.OpenAICompatibleTinkerServer is TinkerOpenAIServer
    assert server.OpenAICompatibleTinkerServer is TinkerOpenAIServer
    for module, name in [
        (server, "OpenAICompatibleTinkerServerWorker"),
        (server, "OpenAICompatibleTinkerServerSamplableModel"),
        (backend, "TinkerNativeModelConfig"),
        (backend, "ModelState"),
    ]:
        with pytest.raises(NotInArthexError, match="is not in arthex: "):
            getattr(module, name)
    with pytest.raises(NotInArthexError, match=r"ART's module art\.tinker\.service is not in"):
        importlib.import_module("arthex.art.tinker.service")


# -- Datums -----------------------------------------------------------------------------------

tinker = pytest.importorskip("tinker")

from arthex.art.tinker_native import data  # noqa: E402


def laid_out(datum: Any) -> dict[str, list[Any]]:
    inputs = datum.loss_fn_inputs
    assert set(inputs) == {"target_tokens", "logprobs", "advantages"}
    return {
        "input": datum.model_input.to_ints(),
        **{key: inputs[key].tolist() for key in ("target_tokens", "logprobs", "advantages")},
    }


def test_build_datum_lays_out_arts_datum() -> None:
    datum = data.build_datum([1, 2, 3], [4, 5], [-0.5, -0.25], 2.0)
    assert laid_out(datum) == {
        "input": [1, 2, 3, 4],
        "target_tokens": [2, 3, 4, 5],
        "logprobs": [0.0, 0.0, -0.5, -0.25],
        "advantages": [0.0, 0.0, 2.0, 2.0],
    }
    assert laid_out(data.build_datum([9], [8], [-1.0], -0.5)) == {
        "input": [9], "target_tokens": [8], "logprobs": [-1.0], "advantages": [-0.5],
    }  # fmt: skip
    assert data.build_datum([], [4], [-0.5], 1.0) is None
    assert data.build_datum([1], [], [], 1.0) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([1], [4, 5], [-0.5], 1.0), "1 logprobs for 2 completion tokens"),
        (([1, -2], [4], [-0.5], 1.0), "prompt_tokens must be token ids"),
        (([1], [True], [-0.5], 1.0), "completion_tokens must be token ids"),
        (([1], [4], [math.nan], 1.0), "logprob 0 is nan"),
        (([1], [4], [-0.5], math.inf), "advantage is inf"),
    ],
)
def test_build_datum_names_bad_input(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        data.build_datum(*args)


def test_compute_advantages_is_the_group_relative_rule() -> None:
    assert data.compute_advantages([]) == []
    assert data.compute_advantages([3.0]) == [0.0]
    assert data.compute_advantages([1.0, 1.0 + 1e-13]) == [0.0, 0.0]
    assert data.compute_advantages([1.0, 0.0], normalize_advantages=False) == [0.5, -0.5]
    std = math.sqrt(2 / 3)  # of [2, 0, 1] around its mean 1
    assert data.compute_advantages([2.0, 0.0, 1.0]) == pytest.approx(
        [1 / (std + 1e-6), -1 / (std + 1e-6), 0.0], abs=1e-12
    )


def two_turn_groups() -> tuple[list[TrajectoryGroup], History]:
    """Group 0: rewards 1 and 0; the second trajectory has an additional history. Group 1:
    equal rewards (no advantage, so no Datum)."""
    side = History(
        messages_and_choices=[
            {"role": "user", "content": "sub"},
            make_choice("s", prompt_token_ids=[7], token_ids=[8, 9], logprobs=[-0.4, -0.5]),
        ]
    )
    first = make_trajectory(
        1.0,
        messages=[
            {"role": "user", "content": "hi"},
            make_choice("a", prompt_token_ids=[1, 2], token_ids=[3, 4], logprobs=[-0.125, -0.25]),
        ],
    )
    second = make_trajectory(
        0.0,
        messages=[
            {"role": "user", "content": "hi"},
            make_choice("b", prompt_token_ids=[1, 2], token_ids=[5], logprobs=[-0.375]),
        ],
        additional_histories=[side],
    )
    same = [make_trajectory(0.5), make_trajectory(0.5)]
    return [TrajectoryGroup([first, second]), TrajectoryGroup(same)], side


def test_trajectory_groups_to_datums_gives_one_datum_per_trained_choice() -> None:
    groups, _ = two_turn_groups()
    datums = data.trajectory_groups_to_datums(groups, None, None, normalize_advantages=False)
    assert [laid_out(d) for d in datums] == [
        {"input": [1, 2, 3], "target_tokens": [2, 3, 4],
         "logprobs": [0.0, -0.125, -0.25], "advantages": [0.0, 0.5, 0.5]},
        {"input": [1, 2], "target_tokens": [2, 5],
         "logprobs": [0.0, -0.375], "advantages": [0.0, -0.5]},
        {"input": [7, 8], "target_tokens": [8, 9],
         "logprobs": [-0.4000000059604645, -0.5], "advantages": [-0.5, -0.5]},
    ]  # fmt: skip
    scaled = data.trajectory_groups_to_datums(groups)
    one = 0.5 / (0.5 + 1e-6)  # the population std of [1, 0] is 0.5
    assert laid_out(scaled[0])["advantages"] == pytest.approx([0.0, one, one], rel=1e-7)
    assert laid_out(scaled[2])["advantages"] == pytest.approx([-one, -one], rel=1e-7)
    assert data.trajectory_groups_to_datums([]) == []
    plain = make_trajectory(
        0.0, messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]
    )
    trained = data.trajectory_groups_to_datums(
        [TrajectoryGroup([groups[0].trajectories[0], plain])]
    )
    assert [laid_out(d)["input"] for d in trained] == [[1, 2, 3]]  # the plain one is skipped


def test_trajectory_groups_to_datums_names_a_choice_it_cannot_train() -> None:
    no_logprobs = make_trajectory(1.0, choice=make_choice("x", prompt_token_ids=[1], logprobs=None))
    with pytest.raises(InvalidInputError, match=r"group 0, trajectory 0, Choice 0: .*no logprobs"):
        data.trajectory_groups_to_datums([TrajectoryGroup([no_logprobs, make_trajectory(0.0)])])
    with pytest.raises(InvalidInputError, match="model='policy': arthex trains every Choice"):
        data.trajectory_groups_to_datums([], model="policy")
    no_prompt = make_trajectory(1.0, choice=make_choice("x"))
    with pytest.raises(InvalidInputError, match="prompt_token_ids is empty"):
        data.trajectory_groups_to_datums([TrajectoryGroup([no_prompt, make_trajectory(0.0)])])


def test_iter_trajectory_histories_gives_the_main_history_then_the_others() -> None:
    groups, side = two_turn_groups()
    second = groups[0].trajectories[1]
    assert isinstance(second, Trajectory)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    second = second.model_copy(update={"tools": tools})
    histories = list(data.iter_trajectory_histories(second))
    assert histories == [
        History(messages_and_choices=second.messages_and_choices, tools=tools),
        side,
    ]
