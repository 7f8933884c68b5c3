"""`arthex view`'s JSON API, over real HTTP from the real command, on runs the frontend wrote.

The expected values come from the files themselves (history.jsonl read as JSON lines), from
what the builders logged (`VAL_MEANS`, `SPREAD`) and from the GRPO advantage written out by
hand, never from the viewer's own code.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._view_runs import (
    PLANTED,
    SCRIPT,
    SPREAD,
    VAL_MEANS,
    Viewer,
    build_runs,
    snapshot,
    viewer,
)

pytestmark = pytest.mark.e2e

AGENT = "/api/runs/proj/agent"


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_runs(tmp_path_factory.mktemp("runs"))


@pytest.fixture(scope="module")
def before(base: Path) -> dict[str, tuple[int, str]]:
    return snapshot(base)


@pytest.fixture(scope="module")
def view(base: Path, before: dict[str, tuple[int, str]]) -> Iterator[Viewer]:
    with viewer([str(base)]) as running:
        yield running


def file_rows(base: Path, run: str = "proj/models/agent") -> list[dict[str, object]]:
    lines = (base / run / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_runs_lists_every_model_with_its_step_best_and_checkpoints(
    view: Viewer, base: Path
) -> None:
    assert view.url == f"{view.base}/"
    assert view.base.startswith("http://127.0.0.1:")
    runs = {f"{r['project']}/{r['name']}": r for r in view.json("/api/runs")["runs"]}
    assert set(runs) == {"proj/agent", "other/evals"}
    agent = runs["proj/agent"]
    assert agent["step"] == len(VAL_MEANS) - 1  # the newest checkpoint
    assert agent["best"] == {
        "metric": "val/reward",
        "direction": "max",
        "step": VAL_MEANS.index(max(VAL_MEANS)),
        "value": pytest.approx(max(VAL_MEANS)),
    }
    assert agent["checkpoints"] == len(VAL_MEANS)
    assert agent["splits"] == {"train": [0, 1, 2], "val": [0, 1, 2, 3]}
    assert agent["updated"] == str(file_rows(base)[-1]["recorded_at"])  # the newest row
    assert agent["errors"] == [] and agent["lease"] is None
    lowest = view.json("/api/runs", metric="val/reward", direction="min")["runs"]
    assert {r["name"]: r["best"] for r in lowest}["agent"]["step"] == 0
    assert runs["other/evals"]["step"] == 0 and runs["other/evals"]["checkpoints"] == 0


def test_an_idle_connection_stays_open_past_httpxs_own_keep_alive(view: Viewer) -> None:
    import asyncio

    import httpx

    from tests._serverless import statuses_around_an_idle_wait

    expiry = httpx.Limits().keepalive_expiry  # how long an httpx client reuses a connection
    assert expiry is not None
    statuses = asyncio.run(statuses_around_an_idle_wait(view.base, "/api/runs", expiry + 1.0))
    assert statuses == [b"HTTP/1.1 200 OK"] * 2  # the second on the same, still open, one


def test_history_returns_the_rows_as_written_with_keys_and_since(view: Viewer, base: Path) -> None:
    expected = file_rows(base)
    answer = view.json(f"{AGENT}/history")
    assert answer["rows"] == expected
    assert answer["next"] == (base / "proj/models/agent/history.jsonl").stat().st_size
    val = view.json(f"{AGENT}/history", keys="val/reward,loss/*")["rows"]
    wanted = [r for r in expected if "val/reward" in r or any(k.startswith("loss/") for k in r)]
    assert [r["step"] for r in val] == [r["step"] for r in wanted]
    assert all(set(r) - {"step", "training_step", "recorded_at"} for r in val)
    assert {k for r in val for k in r} <= {"step", "training_step", "recorded_at", "val/reward"} | {
        k for r in expected for k in r if k.startswith("loss/")
    }
    assert view.json(f"{AGENT}/history", since=answer["next"])["rows"] == []


def test_trajectories_pages_groups_with_rewards_advantages_and_messages(view: Viewer) -> None:
    page = view.json(f"{AGENT}/trajectories", split="val", step=2, limit=1)
    assert page["total"] == 2 and len(page["groups"]) == 1
    weather = page["groups"][0]
    assert weather["index"] == 0
    assert [e["message"] for e in weather["exceptions"]] == ["rollout timed out"]
    rewards = [t["reward"] for t in weather["trajectories"]]
    assert rewards == pytest.approx([VAL_MEANS[2] - SPREAD, VAL_MEANS[2] + SPREAD])
    # GRPO: (r - mean) / (population std + 1e-6); two rewards SPREAD from their mean: -1, +1.
    scale = SPREAD / (SPREAD + 1e-6)
    assert [t["advantage"] for t in weather["trajectories"]] == pytest.approx([-scale, scale])
    messages = weather["trajectories"][0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"] == [
        {"id": "call_0", "name": "get_weather", "arguments": '{"city": "Paris-0"}'}
    ]
    assert messages[3]["tool_call_id"] == "call_0" and messages[3]["content"] == "sunny, 21 C"
    assert messages[4]["trainable"] and not messages[1]["trainable"]
    tokens = messages[4]["tokens"]
    assert "".join(t["token"] for t in tokens) == messages[4]["content"]
    assert tokens[2] == {"token": "sunny ", "logprob": -1.5}
    second = view.json(f"{AGENT}/trajectories", split="val", step=2, offset=1, limit=1)
    quiz = second["groups"][0]
    assert quiz["index"] == 1 and quiz["metadata"] == {"scenario": "atlantis"}
    assert [t["messages"][-1]["content"] for t in quiz["trajectories"]] == [PLANTED, SCRIPT]
    latest = view.json(f"{AGENT}/trajectories")
    assert (latest["split"], latest["step"]) == ("train", 2)  # train first, its last step


def test_search_finds_the_groups_holding_a_text_across_a_step(view: Viewer) -> None:
    found = view.json(f"{AGENT}/trajectories", split="val", step=2, q="poseidonia-7731")
    assert found["total"] == 1 and [g["index"] for g in found["groups"]] == [1]
    assert (
        view.json(f"{AGENT}/trajectories", split="val", step=1, q="Poseidonia-7731")["total"] == 0
    )
    quoted = view.json(f"{AGENT}/trajectories", split="val", step=2, q="document.title='pwned'")
    assert quoted["total"] == 1


def test_checkpoints_say_which_retention_keeps_and_why(view: Viewer) -> None:
    answer = view.json(f"{AGENT}/checkpoints")
    rows = {c["step"]: c for c in answer["checkpoints"]}
    assert sorted(rows) == [0, 1, 2, 3]
    assert answer["best_step"] == 1 and answer["metric"] == "val/reward"
    assert {s for s, c in rows.items() if c["kept"]} == {1, 3}  # the best and the latest
    assert rows[3]["why"] == ["latest"] and rows[1]["why"] == ["best val/reward"]
    assert rows[2]["metric"] == pytest.approx(VAL_MEANS[2])
    assert rows[0]["bytes"] == 1000 + len(json.dumps({"step": 0}))
    assert answer["pipeline"] is None
    kept = view.json(f"{AGENT}/checkpoints", keep_last=2)
    assert {c["step"] for c in kept["checkpoints"] if c["kept"]} == {1, 2, 3}


@pytest.mark.parametrize(
    ("path", "params", "status"),
    [
        ("/api/runs/..%2F..%2F..%2Fetc/passwd/history", {}, 404),
        ("/api/runs/../../etc/history", {}, 404),
        ("/api/runs/proj/..%2Fagent/history", {}, 404),
        ("/api/runs/proj/%2E%2E/history", {}, 400),
        ("/api/runs/proj/agent/trajectories", {"split": "../../../etc"}, 400),
        ("/api/runs/proj/agent/trajectories", {"split": "val", "step": -1}, 400),
        ("/api/runs/proj/agent/trajectories", {"split": "val", "step": 99}, 404),
        ("/api/runs/proj/agent/trajectories", {"limit": 100000}, 400),
        ("/api/runs/nobody/agent/history", {}, 404),
        ("/static/..%2F..%2F..%2F..%2Fpyproject.toml", {}, 404),
        ("/static/../app.py", {}, 404),
    ],
)
def test_a_path_that_climbs_out_of_path_is_refused(
    view: Viewer, path: str, params: dict[str, str | int], status: int
) -> None:
    import httpx

    # httpx would normalise `..` away: send the raw target as a browser's address bar can.
    url = httpx.URL(view.base).copy_with(raw_path=path.encode())
    response = httpx.get(url, params=params, timeout=30)
    assert response.status_code == status, response.text
    assert "root:" not in response.text and "[build-system]" not in response.text


# Every query parameter of every endpoint, given a value of the wrong kind or out of range:
# 400 and one line naming the parameter (docs/view.md), never FastAPI's 422 and its list.
BAD_PARAMETERS = [
    ("/api/runs", "direction", "up"),
    (f"{AGENT}/history", "since", "abc"),
    (f"{AGENT}/history", "since", "1.5"),
    (f"{AGENT}/history", "since", "-1"),
    (f"{AGENT}/trajectories", "step", "abc"),
    (f"{AGENT}/trajectories", "step", "-1"),
    (f"{AGENT}/trajectories", "offset", "x"),
    (f"{AGENT}/trajectories", "offset", "-3"),
    (f"{AGENT}/trajectories", "limit", "ten"),
    (f"{AGENT}/trajectories", "limit", "0"),
    (f"{AGENT}/trajectories", "split", "../x"),
    (f"{AGENT}/checkpoints", "keep_last", "two"),
    (f"{AGENT}/checkpoints", "keep_last", "0"),
    (f"{AGENT}/checkpoints", "direction", "sideways"),
]


@pytest.mark.parametrize(("path", "name", "value"), BAD_PARAMETERS)
def test_a_bad_parameter_is_400_with_one_line_naming_it(
    view: Viewer, path: str, name: str, value: str
) -> None:
    params = {"split": "val", name: value} if path.endswith("trajectories") else {name: value}
    response = view.get(path, **params)
    assert response.status_code == 400, response.text
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str), body
    assert "\n" not in body["error"] and name in body["error"], body
    assert value in body["error"] or "/" in value, body


def test_nothing_under_path_changed(
    view: Viewer, base: Path, before: dict[str, tuple[int, str]]
) -> None:
    for path in ("/", "/static/view.js", "/api/runs", f"{AGENT}/checkpoints"):
        assert view.get(path).status_code == 200
    for split, steps in view.json("/api/runs")["runs"][1]["splits"].items():
        for step in steps:
            view.json(f"{AGENT}/trajectories", split=split, step=step)
            view.json(f"{AGENT}/history", keys="*")
    assert snapshot(base) == before


# --- a damaged run ------------------------------------------------------------------------------


def test_a_damaged_run_names_each_bad_file_and_shows_the_rest(base: Path, tmp_path: Path) -> None:
    damaged = tmp_path / "runs"
    shutil.copytree(base, damaged)
    run = damaged / "proj/models/agent"
    history = run / "history.jsonl"
    lines = history.read_bytes().splitlines(keepends=True)
    history.write_bytes(b"".join([lines[0], b'{"step": 1, "val/rew\n', *lines[1:], b'{"step": 9']))
    bad = run / "trajectories/val/0002.parquet"
    bad.write_bytes(b"PAR1 this is not parquet at all PAR1")
    with viewer([str(damaged)]) as view:
        answer = view.json(f"{AGENT}/history")
        assert answer["rows"] == [json.loads(line) for line in lines]  # every good row
        assert len(answer["errors"]) == 1
        assert "line 2 of" in answer["errors"][0] and str(history) in answer["errors"][0]
        runs = {r["name"]: r for r in view.json("/api/runs")["runs"]}
        assert runs["agent"]["errors"] == answer["errors"]
        assert runs["agent"]["best"]["step"] == 1  # the rest still counts
        broken = view.json(f"{AGENT}/trajectories", split="val", step=2)
        assert broken["groups"] == [] and len(broken["errors"]) == 1
        assert str(bad) in broken["errors"][0]
        fine = view.json(f"{AGENT}/trajectories", split="val", step=1)
        assert fine["total"] == 2 and fine["errors"] == []
        assert view.json(f"{AGENT}/checkpoints")["best_step"] == 1


# --- a run written by another process while it is viewed ----------------------------------------

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    import arthex

    async def main(base, rows):
        model = arthex.Model(name="live", project="proj", base_path=base, report_metrics=[])
        for step in range(rows):
            await model.log(metrics={"reward": step / rows}, split="val", step=step)
            await asyncio.sleep(0.01)

    asyncio.run(main(sys.argv[1], int(sys.argv[2])))
    """
)


def test_a_run_being_written_is_read_whole_rows_once_each(tmp_path: Path) -> None:
    rows = 150
    (tmp_path / "proj/models/live").mkdir(parents=True)
    (tmp_path / "proj/models/live/history.jsonl").touch()
    with viewer([str(tmp_path)]) as view:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path), str(rows)], env=dict(os.environ)
        )
        seen: list[dict[str, object]] = []
        cursor = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            answer = view.json("/api/runs/proj/live/history", since=cursor)
            seen.extend(answer["rows"])
            cursor = answer["next"]
            assert answer["errors"] == []
            if writer.poll() is not None and len(seen) >= rows:
                break
            time.sleep(0.05)
        assert writer.wait(timeout=60) == 0
        assert [r["step"] for r in seen] == list(range(rows))
        assert [r["val/reward"] for r in seen] == pytest.approx([s / rows for s in range(rows)])
        assert seen == file_rows(tmp_path, "proj/models/live")


# --- the command: host, token, stopping ---------------------------------------------------------


def test_on_another_address_every_request_needs_the_token(base: Path) -> None:
    import httpx

    with viewer([str(base)], "--host", "0.0.0.0") as view:
        assert "?token=" in view.url
        token = view.url.split("?token=", 1)[1]
        assert len(token) >= 24
        for path in ("/", "/api/runs", f"{AGENT}/history", "/static/view.js"):
            assert view.get(path).status_code == 401
            assert view.get(path, token="wrong").status_code == 401
            assert view.get(path, token=token).status_code == 200
        bearer = httpx.get(
            f"{view.base}/api/runs", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert bearer.status_code == 200
        first = httpx.get(view.url, timeout=30)  # the page's first load sets a cookie
        again = httpx.get(f"{view.base}/api/runs", cookies=first.cookies, timeout=30)
        assert again.status_code == 200
    with viewer([str(base)], "--token", "s3cret") as view:
        assert view.url.endswith("/?token=s3cret")
        assert view.get("/api/runs").status_code == 401
        assert view.get("/api/runs", token="s3cret").status_code == 200


def test_sigterm_stops_it_within_two_seconds(base: Path) -> None:
    view = Viewer([str(base)])
    assert view.get("/api/runs").status_code == 200
    elapsed = view.stop()
    assert view.process.returncode == 0
    assert elapsed < 5  # generous: the box is shared; it takes well under a second alone


def test_sigterm_under_load_ends_without_the_interpreters_teardown(
    base: Path, tmp_path: Path
) -> None:
    """Under load the interpreter's teardown after a stop took seconds (the readers' thread
    pools winding down). The viewer writes nothing, so a requested stop ends the process as
    soon as serving ends: here a teardown hook that would hang for minutes never runs."""
    import threading

    import httpx

    (tmp_path / "sitecustomize.py").write_text(
        "import atexit, time\natexit.register(time.sleep, 600)\n"
    )
    path = os.pathsep.join([str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])
    view = Viewer([str(base)], env={"PYTHONPATH": path})
    answered: list[int] = []
    done = threading.Event()

    def client() -> None:
        with httpx.Client(timeout=30) as http:
            while not done.is_set():
                try:
                    answered.append(http.get(f"{view.base}{AGENT}/history").status_code)
                    http.get(f"{view.base}{AGENT}/trajectories", params={"split": "val"})
                except httpx.HTTPError:
                    return  # the viewer stopped

    clients = [threading.Thread(target=client) for _ in range(8)]
    for thread in clients:
        thread.start()
    while len(answered) < 16:
        time.sleep(0.01)
    try:
        view.stop()  # SIGTERM, then waits 10 s at most for the process to end
    finally:
        done.set()
        for thread in clients:
            thread.join()
        view.process.kill()
    assert view.process.returncode == 0
    assert set(answered) == {200}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/runs"], "/nonexistent/runs is not a directory"),
        (["--token", ""], "--token must not be empty"),
        (["--port", "70000"], "--port"),
    ],
)
def test_bad_arguments_are_one_line_before_anything_listens(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "view", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr and done.stdout == ""


def test_a_run_directory_or_project_directory_is_a_path_too(base: Path) -> None:
    with viewer([str(base / "proj/models/agent"), str(base / "other")]) as view:
        names = [f"{r['project']}/{r['name']}" for r in view.json("/api/runs")["runs"]]
        assert names == ["other/evals", "proj/agent"]
        assert math.isclose(
            view.json(f"{AGENT}/checkpoints")["checkpoints"][1]["metric"], VAL_MEANS[1]
        )


def test_runs_history_and_trajectories_point_to_the_viewer_once(base: Path) -> None:
    model = base / "proj/models/agent"
    for args, where in (
        (["runs", "--base-path", str(base)], base),
        (["history", str(model)], model),
        (["trajectories", str(model)], model),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "arthex.apps.cli", *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stderr.count("arthex view") == 1 and "arthex view" not in done.stdout
        assert done.stderr.strip().endswith(f"arthex view {where}")
    csv = subprocess.run(
        [sys.executable, "-m", "arthex.apps.cli", "history", str(model), "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "arthex view" not in csv.stdout + csv.stderr  # machine output stays clean


def test_the_trainer_lease_and_the_pipeline_record_are_shown(base: Path, tmp_path: Path) -> None:
    import asyncio
    import socket

    from arthex.adapters.run_files.lease import FileRunLeases
    from arthex.adapters.run_files.pipeline import JsonPipelineStateStore
    from arthex.core.identity import RunRef
    from arthex.core.pipeline_record import PipelineRecord

    copy = tmp_path / "runs"
    shutil.copytree(base, copy)
    run = RunRef("proj", "agent")
    record = PipelineRecord(
        step=3, offset=20, pending=[18, 19], trained_groups=12, last_eval_step=2,
        discarded={"stale": [0], "zero_variance": [1, 2, 3], "errored": []},
        best_eval=(1, 0.9),
    )  # fmt: skip
    asyncio.run(JsonPipelineStateStore(str(copy)).save(run, record))
    lease = FileRunLeases(str(copy)).acquire_now(run)
    try:
        with viewer([str(copy)]) as view:
            shown = {r["name"]: r for r in view.json("/api/runs")["runs"]}["agent"]["lease"]
            assert shown["pid"] == os.getpid() and shown["alive"] is True
            assert shown["host"] == socket.gethostname()
            pipeline = view.json(f"{AGENT}/checkpoints")["pipeline"]
            assert pipeline["discarded"] == {"stale": 1, "zero_variance": 3, "errored": 0}
            assert (pipeline["step"], pipeline["offset"], pipeline["pending"]) == (3, 20, 2)
            assert pipeline["trained_groups"] == 12 and pipeline["best_eval"] == [1, 0.9]
            lease.release_now()
            assert {r["name"]: r for r in view.json("/api/runs")["runs"]}["agent"]["lease"] is None
    finally:
        lease.release_now()


def test_without_a_token_only_loopback_names_are_answered(view: Viewer) -> None:
    import httpx

    for host in ("127.0.0.1", "localhost"):
        port = view.base.rsplit(":", 1)[1]
        ok = httpx.get(f"{view.base}/api/runs", headers={"Host": f"{host}:{port}"}, timeout=30)
        assert ok.status_code == 200
    rebound = httpx.get(f"{view.base}/api/runs", headers={"Host": "evil.example"}, timeout=30)
    assert rebound.status_code == 400 and "runs" not in rebound.text


def test_an_unreadable_file_is_named_and_the_other_runs_still_show(tmp_path: Path) -> None:
    """A model.json that is a folder (as good as unreadable): /api/runs still lists every
    run, and the broken one says which file."""
    runs = tmp_path / "runs"
    for name in ("good", "broken"):
        (runs / "proj" / "models" / name).mkdir(parents=True)
        (runs / "proj" / "models" / name / "history.jsonl").write_text(
            '{"step": 0, "training_step": 0, "recorded_at": "2026-01-01T00:00:00+00:00", '
            '"train/reward": 0.5}\n'
        )
    (runs / "proj" / "models" / "broken" / "model.json").mkdir()
    with viewer([str(runs)]) as running:
        answer = running.get("/api/runs")
        assert answer.status_code == 200, answer.text
        listed = {run["name"]: run for run in answer.json()["runs"]}
    assert set(listed) == {"good", "broken"}
    assert any("model.json" in error for error in listed["broken"]["errors"])
    assert not listed["good"]["errors"]


def test_two_token_viewers_on_one_host_keep_their_own_cookies(tmp_path: Path) -> None:
    """Cookies are per host, not per port: each token's cookie has its own name."""
    from fastapi.testclient import TestClient

    from arthex.apps.view.app import create_app

    (tmp_path / "runs").mkdir()
    names = []
    for token in ("first-token", "second-token"):
        with TestClient(create_app([str(tmp_path / "runs")], token)) as client:
            answer = client.get("/api/runs", params={"token": token})
            assert answer.status_code == 200, answer.text
            (name,) = list(answer.cookies)
            names.append(name)
    assert names[0] != names[1]
