"""`arthex serve --protocol tinker` as a real process on loopback, driven by the unmodified
tinker SDK: two base models each served under its name, two tenants training at once on one
of them (each sees only its own runs; each run's result is the result of the same run trained
alone on a server of its own), keys, body cap, rate limit, the audit log, and option errors."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

pytest.importorskip("tinker")
pytest.importorskip("torch")

from tests._tinker import (
    REPO,
    TinkerServer,
    keys_file,
    serve_command,
    server_environment,
    start_tinker_server,
)

pytestmark = pytest.mark.e2e

TIMEOUT_S = 120.0
ALPHA = "tml-alpha-tenant-key-0001"
BETA = "tml-beta-tenant-key-00001"
SOLO = "tml-solo-tenant-key-00001"
GAMMA = "tml-gamma-tenant-key-0001"  # the quota tests' tenant
MAX_CHECKPOINT_BYTES = 2_000_000
OTHER_CONTEXT = 96  # the second model's max_position_embeddings, set in its config.json
STEPS = 3
MAX_BODY = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_TELEMETRY", "0")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> str:
    from arthex.testing.tiny_model import tiny_model

    return tiny_model(tmp_path_factory.getbasetemp() / "tiny-model")


@pytest.fixture(scope="module")
def other(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A second tiny model (other weights) whose config says a shorter context."""
    from arthex.testing.tiny_model import tiny_model

    folder = tiny_model(tmp_path_factory.getbasetemp() / "other-model", seed=1)
    config = Path(folder) / "config.json"
    data = json.loads(config.read_text())
    data["max_position_embeddings"] = OTHER_CONTEXT
    config.write_text(json.dumps(data))
    return folder


@pytest.fixture(scope="module")
def server(
    tiny: str, other: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TinkerServer]:
    folder = tmp_path_factory.mktemp("tenants")
    keys = keys_file(folder, {"alpha": ALPHA, "beta": BETA, "gamma": GAMMA})
    limits = {
        "--max-body-bytes": MAX_BODY,
        "--max-models-per-tenant": 1,
        "--max-checkpoint-bytes-per-tenant": MAX_CHECKPOINT_BYTES,
    }
    extra = [str(part) for option in limits.items() for part in option]
    running = start_tinker_server(folder / "state", [tiny, other], keys, extra_args=extra)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def solo(tiny: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TinkerServer]:
    """The oracle's server: one tenant, one model, one run at a time."""
    folder = tmp_path_factory.mktemp("solo")
    running = start_tinker_server(folder / "state", [tiny], keys_file(folder, {"solo": SOLO}))
    try:
        yield running
    finally:
        running.stop()


@attrs.frozen
class Trained:
    model_id: str
    losses: list[float]
    logprobs: list[float]
    state_path: str
    sampler_path: str


def datum(tokens: list[int]) -> Any:
    import numpy as np
    from tinker import types

    targets = np.asarray(tokens[1:], dtype=np.int64)
    weights = np.ones(len(tokens) - 1, dtype=np.float32)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(targets),
            "weights": types.TensorData.from_numpy(weights),
        },
    )


PROBE = [5, 17, 33, 2, 41, 8, 19, 27]
DATA = {
    "alpha": [3, 14, 15, 92, 65, 35, 89, 79, 32, 38],
    "beta": [27, 18, 28, 18, 28, 45, 90, 45, 23, 53],
}
SEEDS = {"alpha": 11, "beta": 22}


def train(url: str, key: str, base_model: str, seed: int, tokens: list[int]) -> Trained:
    """STEPS steps of cross-entropy on `tokens`, then the logprobs of PROBE, a saved state and
    saved sampler weights."""
    import tinker
    from tinker import types

    service = tinker.ServiceClient(base_url=url, api_key=key)
    try:
        created = service.create_lora_training_client(base_model, rank=4, seed=seed)
        client = created.result(TIMEOUT_S)
        losses = []
        for _ in range(STEPS):
            out = client.forward_backward([datum(tokens)], "cross_entropy").result(TIMEOUT_S)
            client.optim_step(types.AdamParams(learning_rate=1e-2)).result(TIMEOUT_S)
            losses.append(float(out.metrics["loss:sum"]))
        probe = client.forward([datum(PROBE)], "cross_entropy").result(TIMEOUT_S)
        logprobs = [float(v) for v in probe.loss_fn_outputs[0]["logprobs"].tolist()]
        state = client.save_state("after").result(TIMEOUT_S).path
        sampler = client.save_weights_for_sampler("after").result(TIMEOUT_S).path
        return Trained(client.model_id, losses, logprobs, state, sampler)
    finally:
        service.close("success").result(TIMEOUT_S)


@pytest.fixture(scope="module")
def together(server: TinkerServer, tiny: str) -> dict[str, Trained]:
    """alpha and beta train at once, each on its own thread with its own key."""
    results: dict[str, Trained] = {}
    errors: list[BaseException] = []

    def run(tenant: str, key: str) -> None:
        try:
            results[tenant] = train(server.url, key, tiny, SEEDS[tenant], DATA[tenant])
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=run, args=("alpha", ALPHA)),
        threading.Thread(target=run, args=("beta", BETA)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return results


def rest(url: str, key: str) -> Any:
    import tinker

    return tinker.RestClient(base_url=url, api_key=key)


# --- base models ----------------------------------------------------------------------


def test_capabilities_list_every_base_model_with_its_configs_context(
    server: TinkerServer, tiny: str, other: str
) -> None:

    listed = rest(server.url, ALPHA).get_server_capabilities().result().supported_models
    contexts = {
        folder: json.loads((Path(folder) / "config.json").read_text())["max_position_embeddings"]
        for folder in (tiny, other)
    }
    assert [(m.model_name, m.max_context_length) for m in listed] == [
        (tiny, contexts[tiny]),
        (other, OTHER_CONTEXT),
    ]
    assert contexts[tiny] != OTHER_CONTEXT


def test_an_unknown_base_model_is_refused_naming_the_served_ones(
    server: TinkerServer, tiny: str, other: str
) -> None:
    import tinker

    service = tinker.ServiceClient(base_url=server.url, api_key=ALPHA)
    try:
        with pytest.raises(tinker.BadRequestError) as refused:
            service.create_lora_training_client("no-such-model", rank=4).result(TIMEOUT_S)
    finally:  # an open session's heartbeat outlives the server and warns in later tests
        service.close("success").result(TIMEOUT_S)
    message = str(refused.value)
    assert "no-such-model" in message and repr(tiny) in message and repr(other) in message


def test_each_base_model_trains_its_own_weights(
    server: TinkerServer, tiny: str, other: str
) -> None:
    """The same run on the two models starts from different weights: they are two models."""
    first = train(server.url, ALPHA, tiny, 1, DATA["alpha"])
    second = train(server.url, ALPHA, other, 1, DATA["alpha"])
    assert first.losses[0] != pytest.approx(second.losses[0], rel=1e-3)


# --- two tenants ----------------------------------------------------------------------


def test_each_tenants_run_equals_that_run_trained_alone(
    together: dict[str, Trained], solo: TinkerServer, tiny: str
) -> None:
    for tenant in ("alpha", "beta"):
        alone = train(solo.url, SOLO, tiny, SEEDS[tenant], DATA[tenant])
        assert together[tenant].losses == pytest.approx(alone.losses, rel=1e-6, abs=1e-7)
        assert together[tenant].logprobs == pytest.approx(alone.logprobs, rel=1e-6, abs=1e-7)
    # and the two runs are two: their adapters trained apart
    assert together["alpha"].logprobs != pytest.approx(together["beta"].logprobs, rel=1e-3)
    assert together["alpha"].losses[0] > together["alpha"].losses[-1]


def test_another_tenants_run_is_missing_and_never_listed(
    together: dict[str, Trained], server: TinkerServer
) -> None:
    import tinker

    alpha, beta = together["alpha"], together["beta"]
    owner, stranger = rest(server.url, ALPHA), rest(server.url, BETA)
    # the owner sees its run; the other tenant's listings never hold it
    assert owner.get_training_run(alpha.model_id).result().model_owner == "alpha"
    assert owner.list_checkpoints(alpha.model_id).result().checkpoints
    owned = {r.training_run_id for r in owner.list_training_runs().result().training_runs}
    seen = {r.training_run_id for r in stranger.list_training_runs().result().training_runs}
    assert alpha.model_id in owned and beta.model_id not in owned
    assert beta.model_id in seen and alpha.model_id not in seen
    paths = {c.tinker_path for c in stranger.list_user_checkpoints().result().checkpoints}
    assert beta.state_path in paths and alpha.state_path not in paths
    # every way to reach it by id or path is a 404
    calls: list[Callable[[], object]] = [
        lambda: stranger.get_training_run(alpha.model_id).result(),
        lambda: stranger.list_checkpoints(alpha.model_id).result(),
        lambda: stranger.delete_checkpoint_from_tinker_path(alpha.state_path).result(),
        lambda: stranger.set_checkpoint_ttl_from_tinker_path(alpha.state_path, 7200).result(),
    ]
    for call in calls:
        with pytest.raises(tinker.NotFoundError):
            call()
    service = tinker.ServiceClient(base_url=server.url, api_key=BETA)
    try:
        with pytest.raises(tinker.NotFoundError):
            service.create_training_client_from_state(alpha.state_path).result(TIMEOUT_S)
        with pytest.raises(tinker.NotFoundError):
            service.create_sampling_client(model_path=alpha.sampler_path).result(TIMEOUT_S)
    finally:
        service.close("success").result(TIMEOUT_S)
    # the owner's checkpoint is still there, and run.json names its tenant (for a restart)
    assert alpha.state_path in {
        c.tinker_path for c in owner.list_checkpoints(alpha.model_id).result().checkpoints
    }
    record = server.state_dir / "runs" / alpha.model_id / "run.json"
    assert json.loads(record.read_text())["tenant"] == "alpha"


def test_a_strangers_404_is_the_body_of_a_missing_id(
    together: dict[str, Trained], server: TinkerServer
) -> None:
    """Nothing in the answer tells another tenant's id from one that never was; promises and
    samplers too."""
    alpha = together["alpha"]
    http = httpx.Client(base_url=server.url + "/api/v1", timeout=TIMEOUT_S)
    as_alpha, as_beta = {"X-API-Key": ALPHA}, {"X-API-Key": BETA}
    missing = str(uuid.uuid4())
    for template in ("training_runs/{}", "training_runs/{}/checkpoints"):
        theirs = http.get(template.format(alpha.model_id), headers=as_beta)
        nobody = http.get(template.format(missing), headers=as_beta)
        assert theirs.status_code == nobody.status_code == 404
        assert theirs.json() == json.loads(nobody.text.replace(missing, alpha.model_id))
    # a promise: alpha's sampling request, retrieved by beta and by alpha
    session = http.post(
        "create_session",
        json={"tags": [], "user_metadata": None, "sdk_version": "0.38.0", "type": "create_session"},
        headers=as_alpha,
    ).json()["session_id"]
    sampler = http.post(
        "create_sampling_session",
        json={
            "session_id": session,
            "sampling_session_seq_id": 0,
            "model_path": alpha.sampler_path,
        },
        headers=as_alpha,
    ).json()["sampling_session_id"]
    assert http.get(f"samplers/{sampler}", headers=as_alpha).status_code == 200
    assert http.get(f"samplers/{sampler}", headers=as_beta).status_code == 404
    request = http.post(
        "asample",
        json={
            "sampling_session_id": sampler,
            "seq_id": 1,
            "num_samples": 1,
            "prompt": {"chunks": [{"type": "encoded_text", "tokens": [1, 2, 3]}]},
            "sampling_params": {"max_tokens": 2, "temperature": 1.0},
        },
        headers=as_alpha,
    ).json()["request_id"]
    theirs = http.post("retrieve_future", json={"request_id": request}, headers=as_beta)
    nobody = http.post("retrieve_future", json={"request_id": missing}, headers=as_beta)
    assert theirs.status_code == nobody.status_code == 404
    assert theirs.json() == json.loads(nobody.text.replace(missing, request))
    mine = http.post("retrieve_future", json={"request_id": request}, headers=as_alpha)
    assert mine.status_code == 200 and mine.headers["content-type"] != "application/json"


# --- the guard and the audit log ------------------------------------------------------


def test_a_missing_or_unknown_key_is_401_and_a_long_body_413(server: TinkerServer) -> None:
    http = httpx.Client(base_url=server.url + "/api/v1", timeout=TIMEOUT_S)
    assert http.get("get_server_capabilities").status_code == 401
    wrong = http.get("get_server_capabilities", headers={"X-API-Key": "tml-unknown-key-000000"})
    assert wrong.status_code == 401 and "X-API-Key" in wrong.json()["detail"]
    long = http.post(
        "create_session", content=b"{" + b" " * MAX_BODY + b"}", headers={"X-API-Key": ALPHA}
    )
    assert long.status_code == 413


def test_a_tenants_open_runs_and_checkpoint_bytes_are_capped_without_retries(
    server: TinkerServer, tiny: str
) -> None:
    """One open run per tenant here: a second while the first's session lives is refused at
    once (a 403: the SDK retries 429s and 5xxs for minutes); once that session finished, a
    new one may start. Saves are refused once the tenant's run folders hold
    MAX_CHECKPOINT_BYTES."""
    import tinker

    first = tinker.ServiceClient(base_url=server.url, api_key=GAMMA)
    client = first.create_lora_training_client(tiny, rank=4).result(TIMEOUT_S)
    second = tinker.ServiceClient(base_url=server.url, api_key=GAMMA)
    try:
        with pytest.raises(tinker.PermissionDeniedError, match="models"):
            second.create_lora_training_client(tiny, rank=4).result(TIMEOUT_S)
    finally:
        second.close("success").result(TIMEOUT_S)
    saved = 0
    refused: Exception | None = None
    while refused is None and saved < 100:
        try:
            client.save_state(f"s{saved}").result(TIMEOUT_S)
            saved += 1
        except tinker.PermissionDeniedError as exc:
            refused = exc
    assert refused is not None and "quota" in str(refused)
    first.close("success").result(TIMEOUT_S)
    run_folder = server.state_dir / "runs" / client.model_id
    stored = sum(p.stat().st_size for p in run_folder.rglob("*") if p.is_file())
    one = stored / saved
    assert saved >= 2 and MAX_CHECKPOINT_BYTES - one <= stored <= MAX_CHECKPOINT_BYTES + one
    again = tinker.ServiceClient(base_url=server.url, api_key=GAMMA)
    try:
        assert again.create_lora_training_client(tiny, rank=4).result(TIMEOUT_S).model_id
    finally:
        again.close("success").result(TIMEOUT_S)
    refusals = [
        line for line in server.audit() if line["tenant"] == "gamma" and line["status"] >= 400
    ]
    assert [line["route"] for line in refusals] == ["/api/v1/create_model", "/api/v1/save_weights"]
    assert {line["status"] for line in refusals} == {403}  # each once: the SDK did not retry


def test_the_audit_log_names_tenant_and_route(
    together: dict[str, Trained], server: TinkerServer
) -> None:
    http = httpx.Client(base_url=server.url + "/api/v1", timeout=TIMEOUT_S)
    http.get(f"training_runs/{together['alpha'].model_id}", headers={"X-API-Key": BETA})
    lines = server.audit()
    trained = {
        (line["tenant"], line["model_id"])
        for line in lines
        if line["route"] == "/api/v1/forward_backward" and line["status"] == 200
    }
    assert ("alpha", together["alpha"].model_id) in trained
    assert ("beta", together["beta"].model_id) in trained
    assert any(
        line["tenant"] == "beta"
        and line["route"] == "/api/v1/training_runs/{run_id}"
        and line["status"] == 404
        for line in lines
    )
    assert all(ALPHA not in json.dumps(line) and BETA not in json.dumps(line) for line in lines)


def test_a_rate_limited_sdk_call_is_retried_until_it_passes(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:

    keys = keys_file(tmp_path, {"slow": ALPHA})
    limited = start_tinker_server(
        tmp_path / "state", [tiny], keys, extra_args=["--rate-limit", "2", "--rate-burst", "1"]
    )
    try:
        http = httpx.Client(base_url=limited.url + "/api/v1", timeout=TIMEOUT_S)
        answers = [
            http.get("get_server_capabilities", headers={"X-API-Key": ALPHA}) for _ in range(3)
        ]
        refused = [a for a in answers if a.status_code == 429]
        assert refused and all(int(a.headers["retry-after"]) >= 1 for a in refused)
        client = rest(limited.url, ALPHA)
        for _ in range(3):
            models = client.get_server_capabilities().result().supported_models
            assert [m.model_name for m in models] == [tiny]
        statuses = [line["status"] for line in limited.audit() if line["tenant"] == "slow"]
    finally:
        limited.stop()
    assert statuses.count(429) > len(refused)  # the SDK's calls were refused too, and retried


# --- options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ([], "--base-model"),
        (["--base-model", "/no/such/model-folder"], "/no/such/model-folder"),
        (["--base-model", "x", "--allow-base-model", "x"], "--allow-base-model"),
    ],
)
def test_an_option_error_is_one_line_and_exit_2(
    args: list[str], named: str, tmp_path: Path
) -> None:
    command = serve_command(*args, "--state-dir", str(tmp_path / "state"))
    done = subprocess.run(
        command, cwd=REPO, env=server_environment(), capture_output=True, timeout=120
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and named in lines[0], lines
    assert not (tmp_path / "state").exists()


def test_base_model_belongs_to_the_tinker_protocol(tmp_path: Path) -> None:
    command = [*serve_command("--base-model", "x")]
    command[command.index("tinker")] = "arthex"
    done = subprocess.run(
        command, cwd=REPO, env=server_environment(), capture_output=True, timeout=120
    )
    assert done.returncode == 2
    assert "--base-model is an option of --protocol tinker" in done.stderr.decode()
