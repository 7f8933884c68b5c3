"""Bad input and fuzzing at the frontend and at the training server: every input gets a clear
error or is stored and read back exactly; nothing on disk is damaged by a failing call; the
server answers every request with a 4xx (never a 5xx) and keeps the connection usable."""

from __future__ import annotations

import asyncio
import json
import math
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arthex
from arthex.adapters.parquet.store import ParquetTrajectoryStore
from arthex.core.errors import ArthexError, InvalidNameError
from arthex.core.identity import validate_name
from arthex.core.metrics import qualify_key
from tests._serverless import RawConnection, ServerProcess, start_server

FUZZ = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

names = st.one_of(
    st.text(min_size=0, max_size=200),
    st.sampled_from(["..", ".", "a/b", "/abs", "a\x00b", "x" * 129, "con", "-rf", "ok-name"]),
)


@settings(max_examples=500, deadline=None)
@given(names)
def test_names_are_either_safe_segments_or_refused(name: str) -> None:
    try:
        validate_name(name)
    except InvalidNameError as error:
        assert str(error)
        return
    assert "/" not in name and "\\" not in name and "\x00" not in name
    assert name not in (".", "..") and not name.startswith(".")
    assert 1 <= len(name) <= 128
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in name)


@FUZZ
@given(split=names)
def test_fuzzed_splits_never_write_outside_the_run(tmp_path: Path, split: str) -> None:
    model = arthex.Model(name="m", project="p", base_path=str(tmp_path), report_metrics=[])
    traj = arthex.Trajectory(messages_and_choices=[{"role": "user", "content": "x"}], reward=1)
    try:
        asyncio.run(model.log([traj], split=split))
    except InvalidNameError:
        pass
    for path in tmp_path.rglob("*"):
        assert path.resolve().is_relative_to(
            (tmp_path / "p" / "models" / "m").resolve()
        ) or path.resolve() in {(tmp_path / "p").resolve(), (tmp_path / "p" / "models").resolve()}


metric_values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**53), 2**53),
    st.booleans(),
    st.none(),
    st.text(max_size=5),
)


@FUZZ
@given(metrics=st.dictionaries(st.text(max_size=30), metric_values, max_size=8))
def test_fuzzed_metric_rows_round_trip_or_are_refused_before_writing(
    tmp_path: Path, metrics: dict[str, Any]
) -> None:
    model = arthex.Model(name="fuzz", project="p", base_path=str(tmp_path), report_metrics=[])
    before = list(asyncio.run(model.history()))
    try:
        row = asyncio.run(model.log(metrics=metrics, split="val"))
    except ArthexError:
        assert list(asyncio.run(model.history())) == before  # nothing written
        return
    after = list(asyncio.run(model.history()))
    if row is None:
        assert after == before
        return
    assert after[-1].values == row.values
    qualified = [qualify_key(key, "val") for key in metrics]
    for key, value in metrics.items():
        if qualified.count(qualify_key(key, "val")) > 1:
            continue  # "x" and "val/x" name one metric; the later value wins
        stored = row.values[qualify_key(key, "val")]
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            assert stored is None
        else:
            assert stored == float(value)


json_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=300)
tool_calls = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.text(min_size=1, max_size=8),
            "type": st.just("function"),
            "function": st.fixed_dictionaries(
                {"name": st.text(min_size=1, max_size=12), "arguments": json_text}
            ),
        }
    ),
    max_size=2,
)
messages = st.lists(
    st.one_of(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "tool"]), "content": json_text}
        ),
        st.builds(
            lambda content, calls: {"role": "assistant", "content": content, "tool_calls": calls},
            json_text,
            tool_calls,
        ),
    ),
    max_size=5,
)
rewards = st.floats(allow_nan=True, allow_infinity=True, width=64)


@FUZZ
@given(
    conversation=messages,
    reward=rewards,
    nested=st.lists(messages, max_size=2),
    long_text=st.text(min_size=0, max_size=20_000),
)
def test_fuzzed_trajectories_round_trip_or_are_refused(
    tmp_path: Path,
    conversation: list[dict[str, Any]],
    reward: float,
    nested: list[list[dict[str, Any]]],
    long_text: str,
) -> None:
    try:
        trajectory = arthex.Trajectory(
            messages_and_choices=[*conversation, {"role": "user", "content": long_text}],
            additional_histories=[{"messages_and_choices": m} for m in nested],
            reward=reward,
            logs=[long_text[:100]],
        )
    except ValueError as error:  # pydantic's ValidationError is a ValueError
        assert not math.isfinite(reward)
        assert "finite" in str(error)
        return
    model = arthex.Model(name="traj", project="p", base_path=str(tmp_path), report_metrics=[])
    store = ParquetTrajectoryStore(str(tmp_path))  # the default store reads what log wrote
    asyncio.run(model.log([trajectory], split="val", step=7))
    groups = asyncio.run(store.read(model.run, "val", 7))
    assert groups[-1].trajectories[0] == trajectory


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_are_refused_with_a_clear_message(bad: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        arthex.Trajectory(reward=bad)


# --- the training server ----------------------------------------------------------------------

HEADER_CAP = 64 * 1024  # the server's default


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    process = start_server(
        tmp_path_factory.mktemp("fuzz-server") / "state", extra_args=["--rate-limit", "0"]
    )
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def key(server: ServerProcess) -> str:
    return server.fresh_key()


def still_answers(conn: RawConnection, key: str) -> None:
    status, _, _ = conn.request("GET", "/preview/models", {"Authorization": f"Bearer {key}"})
    assert status == 200, "the connection stays usable after a refused request"


@pytest.mark.faults
@FUZZ
@given(
    depth=st.integers(1, 3000),
    opener=st.sampled_from([b"[", b'{"a":', b'[{"b":', b'{"project": "p", "name": "n", "config":']),
    closed=st.booleans(),
    route=st.sampled_from(["/preview/models", "/preview/training-jobs", "/v1/chat/completions"]),
)
def test_fuzzed_nesting_is_answered_below_500_on_a_connection_that_survives(
    server: ServerProcess, key: str, depth: int, opener: bytes, closed: bool, route: str
) -> None:
    closer = {b"[": b"]", b'{"a":': b"}", b'[{"b":': b"}]"}.get(opener, b"}")
    body = opener * depth + (b"0" + closer * depth if closed else b"")
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with RawConnection(server.url) as conn:
        status, _, answer = conn.request("POST", route, headers, body)
        assert status < 500, (status, answer[:200])  # shallow enough may be a valid register
        if depth > 201:
            assert status == 400 and b"nested" in answer
        still_answers(conn, key)


@pytest.mark.faults
@FUZZ
@given(size=st.integers(HEADER_CAP - 4096, HEADER_CAP + 4096), count=st.integers(1, 120))
def test_fuzzed_header_sizes_and_counts_are_401_or_431(
    server: ServerProcess, size: int, count: int
) -> None:
    headers = {f"X-F{i}": "1" for i in range(count - 1)}
    headers["X-Pad"] = "a" * size
    with RawConnection(server.url) as conn:
        conn.send_head("GET", "/preview/models", headers)
        status, _, answer = conn.read_response()
    if size > HEADER_CAP or count + 1 > 100:  # + Host
        assert status == 431, answer[:200]
        assert json.loads(answer)["error"]["type"] == "request_headers_too_large"
    elif size < HEADER_CAP - 2048:
        assert status == 401, answer[:200]
    else:
        assert status in (401, 431)


unicode_digits = st.text(
    alphabet=st.characters(categories=["Nd", "No", "Nl"], exclude_characters="0123456789"),
    min_size=1,
    max_size=6,
)


@pytest.mark.faults
@FUZZ
@given(
    digits=st.builds(lambda a, b, c: a + b + c, st.text("0123456789", max_size=3), unicode_digits,
                     st.text("0123456789", max_size=3)),
    name=st.sampled_from(["after", "limit", "wait"]),
)  # fmt: skip
def test_fuzzed_non_ascii_digits_in_queries_are_422(
    server: ServerProcess, key: str, digits: str, name: str
) -> None:
    job = "j" + "0" * 24  # the query is checked whether or not the job exists
    quoted = urllib.parse.quote(digits)
    headers = {"Authorization": f"Bearer {key}"}
    with RawConnection(server.url) as conn:
        status, _, answer = conn.request(
            "GET", f"/preview/training-jobs/{job}/events?{name}={quoted}", headers
        )
        assert status in (404, 422), answer[:200]
        body = json.dumps({"model": f"agent@{digits}", "messages": []}).encode()
        status, _, answer = conn.request("POST", "/v1/chat/completions", headers, body)
        assert status == 422, answer[:200]
        still_answers(conn, key)
