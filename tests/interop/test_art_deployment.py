"""ART 0.5.23's `deploy_model(..., "together", ...)` and arthex's under `arthex.art` deploy the
same checkpoint folders to the same loopback Together (tests/_together_server.py) through the
same moto S3 server (ART's by the `aws` command, arthex's by pyarrow and boto3), one script for
both (art/deploy_script.py), and what each sent is compared request by request: method, path,
bearer key, content type, the upload's JSON body, and the archive Together fetched from the
presigned URL.

Two differences are on purpose (docs/migrating-from-art.md): ART finds a step's earlier job by
any model name containing `{project}-{run}-{step}` (step 1 takes step 12's job and returns
its model), arthex by the exact name; and ART uploads the archive to S3, and asks Together for
its jobs, before it checks the base model, arthex refuses first and sends nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._s3_server import BUCKET, S3
from tests._together_server import API_KEY, USER, Together

from .art_env import SCRIPTS, art_environment, art_python

PROJECT, RUN = "proj", "agent"
BASE = "Qwen/Qwen2.5-14B-Instruct"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[S3, Together]]:
    s3, together = S3(), Together()
    yield s3, together
    together.stop()
    s3.stop()


def art_checkpoint(root: Path, step: int) -> str:
    """A step as ART's LocalBackend leaves it: the PEFT adapter's files."""
    folder = root / PROJECT / "models" / RUN / "checkpoints" / f"{step:04d}"
    folder.mkdir(parents=True)
    weights = b"".join(hashlib.sha256(f"{step}-{n}".encode()).digest() for n in range(100))
    (folder / "adapter_model.safetensors").write_bytes(weights)  # the same bytes for both
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base": BASE}))
    (folder / "README.md").write_text(f"step {step}\n")
    return str(folder)


def cases(root: Path, lib: str) -> list[dict[str, Any]]:
    at = {"project": PROJECT, "run": RUN, "bucket": BUCKET, "prefix": f"deploy-{lib}"}
    made = {step: art_checkpoint(root / lib, step) for step in (3, 1, 4, 5, 7, 6)}
    return [
        {**at, "step": 3, "checkpoint": made[3], "base_model": BASE, "wait": True},
        {**at, "step": 1, "checkpoint": made[1], "base_model": BASE, "wait": True},
        {**at, "step": 4, "checkpoint": made[4], "base_model": BASE, "wait": True},
        {**at, "step": 5, "checkpoint": made[5], "base_model": BASE, "wait": False},
        {**at, "step": 7, "checkpoint": made[7], "base_model": BASE, "wait": True},
        {**at, "step": 6, "checkpoint": made[6], "base_model": "Qwen/Qwen3-8B", "wait": True},
    ]


def earlier_jobs(together: Together) -> None:
    together.reset()
    together.statuses = [("Complete", "Model upload complete")]  # ART polls every 15 s
    together.add_job(f"{PROJECT}-{RUN}-12", [("Complete", "Model upload complete")])
    together.add_job(f"{PROJECT}-{RUN}-4", [("Error", "the archive could not be read")])
    together.add_job(f"{PROJECT}-{RUN}-7", [("Running", "Downloading"), ("Complete", "done")])


def deployments(together: Together) -> list[list[tuple[Any, ...]]]:
    """What was sent, one list per deployment (each begins by listing the jobs); job ids by
    order of appearance, each fetched archive as its files' sha256."""
    ids: dict[str, str] = {}
    found: list[list[tuple[Any, ...]]] = []
    for request in together.requests:
        path = request.path
        if path.startswith("/v1/jobs/"):
            job = path.removeprefix("/v1/jobs/")
            path = "/v1/jobs/" + ids.setdefault(job, f"job-{len(ids)}")
        body = request.body
        if isinstance(body, dict) and "model_source" in body:
            body = {**body, "model_source": archive(together.fetched[body["model_name"]])}
        if path == "/v1/jobs":
            found.append([])
        found[-1].append((request.method, path, request.authorization, request.content_type,
                          body))  # fmt: skip
    return found


def archive(data: bytes) -> dict[str, str]:
    with zipfile.ZipFile(io.BytesIO(data)) as zipped:
        return {n: hashlib.sha256(zipped.read(n)).hexdigest() for n in sorted(zipped.namelist())}


def art_outcome(cases: list[dict[str, Any]]) -> list[dict[str, str]]:
    done = subprocess.run(
        [str(art_python()), str(SCRIPTS / "deploy_script.py"), "art"],
        input=json.dumps(cases), capture_output=True, text=True, env=art_environment(),
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    # ART prints its progress on stdout too; the outcome is the last line
    result: list[dict[str, str]] = json.loads(done.stdout.splitlines()[-1])
    return result


def arthex_outcome(cases: list[dict[str, Any]]) -> list[dict[str, str]]:
    sys.path.insert(0, str(SCRIPTS))
    try:
        from deploy_script import run  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(SCRIPTS))
    result: list[dict[str, str]] = run("arthex.art", cases)
    return result


def test_art_and_arthex_send_together_the_same_requests(
    servers: tuple[S3, Together], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if shutil.which("aws") is None:
        pytest.skip("ART's S3 helpers run the `aws` command (awscli), not found on PATH")
    s3, together = servers
    s3.use_from_environment(monkeypatch)
    monkeypatch.setenv("TOGETHER_BASE_URL", together.base)
    monkeypatch.setenv("TOGETHER_API_KEY", API_KEY)

    earlier_jobs(together)
    art = art_outcome(cases(tmp_path, "art"))
    sent_by_art = deployments(together)
    earlier_jobs(together)
    ours = arthex_outcome(cases(tmp_path, "arthex"))
    sent_by_arthex = deployments(together)

    name = f"{USER}/{PROJECT}-{RUN}"
    assert art[0] == ours[0] == {"name": f"{name}-3"}
    assert (art[1], ours[1]) == ({"name": f"{name}-12"}, {"name": f"{name}-1"})  # on purpose
    assert art[2] == ours[2] == {"name": f"{name}-4"}  # the failed job, uploaded again
    assert art[3] == ours[3] == {"name": f"{name}-5"}
    assert art[4] == ours[4] == {"name": f"{name}-7"}  # deployed before: not sent again
    assert art[5] == ours[5] and art[5]["error"] == "UnsupportedBaseModelDeploymentError"
    assert "Base model Qwen/Qwen3-8B is not supported" in art[5]["message"]

    new, from_12, again, unwaited, earlier = sent_by_arthex
    assert sent_by_art[0] == new and [r[:2] for r in new] == [
        ("GET", "/v1/jobs"), ("POST", "/v1/models"), ("GET", "/v1/jobs/job-0")
    ]  # fmt: skip
    assert new[1][2:4] == (f"Bearer {API_KEY}", "application/json")
    upload = new[1][4]
    assert upload["model_source"] == archive_of(tmp_path / "arthex", 3)  # the folder, whole
    assert sent_by_art[2] == again and sent_by_art[3] == unwaited and sent_by_art[4] == earlier
    assert [r[:2] for r in earlier] == [("GET", "/v1/jobs"), *[("GET", "/v1/jobs/job-5")] * 2]
    assert [r[:2] for r in sent_by_art[1]] == [
        ("GET", "/v1/jobs"),
        *[("GET", "/v1/jobs/job-1")] * 2,
    ]
    assert ("POST", "/v1/models") in [r[:2] for r in from_12]
    assert [r[:2] for r in sent_by_art[5]] == [("GET", "/v1/jobs")]  # arthex: nothing at all
    assert len(sent_by_art) == 6 and len(sent_by_arthex) == 5

    def zipped_steps(lib: str) -> list[str]:
        return s3.keys(f"{BUCKET}/deploy-{lib}/{PROJECT}/models/{RUN}")

    # ART uploads every archive first: the refused step's, and the one Together already has
    assert zipped_steps("art") == [f"zipped-steps/000{n}.zip" for n in (1, 3, 4, 5, 6, 7)]
    assert zipped_steps("arthex") == [f"zipped-steps/000{n}.zip" for n in (1, 3, 4, 5)]


def archive_of(root: Path, step: int) -> dict[str, str]:
    folder = root / PROJECT / "models" / RUN / "checkpoints" / f"{step:04d}"
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}
