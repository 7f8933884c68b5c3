"""The capture scope as a transport hook drives it (`recorder_for` -> `begin` -> `finish`),
without HTTP: what is recorded, what is counted as skipped, how a scope closes, and when the
registered transport installers run."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

import pytest

import arthex
from arthex.core.capture import scope as scope_module
from arthex.core.capture.endpoints import EndpointFilter
from arthex.core.capture.scope import (
    SKIPPED_METRIC,
    add_transport_hook,
    close_scope,
    open_scope,
    recorder_for,
)
from arthex.core.errors import InvalidInputError
from arthex.core.trajectories import INCOMPLETE_KEY, Trajectory

URL = "http://agent.test/v1/chat/completions"
REQUEST = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
RESPONSE = json.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello"},
             "finish_reason": "stop"}
        ],
    }
).encode()  # fmt: skip


def call(status: int = 200, response: bytes = RESPONSE) -> None:
    """What the transport hook does for one POST made inside the current scope."""
    scope = recorder_for("POST", URL)
    assert scope is not None
    pending = scope.begin(REQUEST)
    assert pending is not None
    pending.finish(status, response)


def test_a_recorded_call_keeps_its_true_utc_start_and_end_on_a_machine_outside_utc(
    tokyo_clock: None,
) -> None:
    before = datetime.now(UTC)
    with arthex.capture(endpoints="any") as trajectory:
        call()
    after = datetime.now(UTC)
    (exchange,) = trajectory.exchanges.chat_completions
    assert before <= exchange.start_time <= exchange.end_time <= after
    assert exchange.request["messages"][0]["content"] == "hi"
    assert exchange.response.choices[0].message.content == "hello"


def test_only_a_2xx_response_is_recorded_and_a_redirect_is_not() -> None:
    with arthex.capture(endpoints="any") as trajectory:
        call(status=300)
        call(status=299)
    assert len(trajectory.exchanges.chat_completions) == 1
    assert SKIPPED_METRIC not in trajectory.metrics


def test_every_skipped_call_is_counted_on_the_trajectory() -> None:
    with arthex.capture(endpoints="any") as trajectory:
        call(response=b"<html>bad gateway</html>")
        call(response=b'{"not": "a completion"}')
        scope = recorder_for("POST", URL)
        assert scope is not None
        assert scope.begin(None) is None
        assert scope.begin(b"[1, 2]") is None
        assert scope.begin(b"{truncated") is None
    assert trajectory.metrics[SKIPPED_METRIC] == 5
    assert not trajectory.exchanges


def test_a_call_that_finishes_after_its_scope_closed_is_not_recorded() -> None:
    with arthex.capture(endpoints="any") as trajectory:
        scope = recorder_for("POST", URL)
        assert scope is not None
        pending = scope.begin(REQUEST)
        assert pending is not None
    pending.finish(200, RESPONSE)
    pending.skip("cancelled")
    assert not trajectory.exchanges and SKIPPED_METRIC not in trajectory.metrics
    assert recorder_for("POST", URL) is None


def test_the_duration_metric_is_the_time_the_scope_was_open() -> None:
    start = time.monotonic()
    with arthex.capture(endpoints="any") as trajectory:
        pass
    elapsed = time.monotonic() - start
    assert 0 <= trajectory.metrics["duration"] <= elapsed


def test_a_crash_is_written_to_the_trajectory_logs_with_its_type_and_message() -> None:
    with pytest.raises(KeyError), arthex.capture(endpoints="any") as trajectory:
        raise KeyError("tool exploded")
    assert trajectory.logs == ["capture ended by KeyError: 'tool exploded'"]
    assert trajectory.metadata["capture_error"] == "KeyError: 'tool exploded'"


def test_current_trajectory_outside_a_scope_says_how_to_open_one() -> None:
    assert arthex.current_trajectory() is None
    with pytest.raises(InvalidInputError, match=r"^no capture scope is open here; call this "
                       r"inside `async with arthex\.capture\(\)`$"):  # fmt: skip
        arthex.current_trajectory(require=True)


def test_a_trajectory_of_the_wrong_kind_or_a_hand_built_one_is_refused_by_name() -> None:
    endpoints = EndpointFilter("any")
    with pytest.raises(
        InvalidInputError, match=r"^trajectory must be an arthex Trajectory, got dict$"
    ):
        open_scope({"reward": 1.0}, endpoints)  # type: ignore[arg-type]
    legacy = Trajectory(messages_and_choices=[{"role": "user", "content": "x"}])
    expected = (
        "capture records into a trajectory without messages_and_choices, tools or "
        "additional_histories; pass a fresh Trajectory (or none)"
    )
    with pytest.raises(InvalidInputError) as refused:
        open_scope(legacy, endpoints)
    assert str(refused.value) == expected


def test_scopes_closed_out_of_order_are_refused_and_the_outer_one_keeps_its_error() -> None:
    endpoints = EndpointFilter("any")
    outer, outer_token = open_scope(None, endpoints)
    inner, inner_token = open_scope(None, endpoints)
    try:
        with pytest.raises(RuntimeError) as refused:
            close_scope(outer, outer_token, ValueError("agent failed"))
        assert str(refused.value) == (
            "capture scopes must close in the order they opened (innermost first)"
        )
        assert not outer.open and outer.trajectory.metadata[INCOMPLETE_KEY] is True
    finally:
        close_scope(inner, inner_token, None)
    assert arthex.current_trajectory() is outer.trajectory
    close_scope(outer, outer_token, None)
    assert arthex.current_trajectory() is None


@pytest.fixture
def no_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process where no transport installer has been registered or run yet."""
    monkeypatch.setattr(scope_module, "_hooks", [])
    monkeypatch.setattr(scope_module, "_hooks_done", set())


def test_a_registered_installer_runs_once_when_the_first_scope_opens(no_hooks: None) -> None:
    runs: list[str] = []

    def install() -> None:
        runs.append("installed")

    add_transport_hook(install)
    add_transport_hook(install)
    assert runs == []
    for _ in range(2):
        with arthex.capture(endpoints="any"):
            pass
    assert runs == ["installed"]


def test_a_scope_opened_with_no_installer_registered_warns_how_to_get_one(
    no_hooks: None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="arthex.capture"):
        with arthex.capture(endpoints="any"):
            pass
        assert "importing arthex.composition.capture registers the hook" in caplog.text
        caplog.clear()
        add_transport_hook(lambda: None)
        with arthex.capture(endpoints="any"):
            pass
    assert caplog.text == ""
