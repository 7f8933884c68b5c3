"""ART's metric-key sets (`art.model`), the judge's reply model (`art.rewards.ruler.Response`)
and `art.utils.log_http_errors` under arthex, on worked examples: which keys keep their
prefix under a split, a judge reply read back, and the one line an HTTP error becomes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from arthex.art.model import METRIC_SECTIONS, METRIC_SPLITS
from arthex.art.rewards.ruler import Response, TrajectoryScore
from arthex.art.utils import log_http_errors
from arthex.core.errors import BackendError, NotInArthexError
from arthex.core.metrics import qualify_key

ARTS_SECTIONS = {
    "loss", "objective", "offpolicy", "pipeline", "pipeline_settings", "queue",
    "sample_efficiency", "throughput", "costs", "discarded", "time", "data", "vllm",
}  # fmt: skip  # ART 0.5.23's art/model.py, written out


def test_arts_sections_and_splits_are_kept_as_they_are() -> None:
    assert {"train", "val", "test"} == METRIC_SPLITS
    assert ARTS_SECTIONS <= METRIC_SECTIONS
    assert {"optim", "diagnostics"} == METRIC_SECTIONS - ARTS_SECTIONS  # arthex's own
    assert qualify_key("vllm/kv_cache_usage_perc", "train") == "vllm/kv_cache_usage_perc"
    assert qualify_key("sample_efficiency/batch_factor", "val") == "sample_efficiency/batch_factor"
    assert qualify_key("test/reward", "val") == "test/reward"
    assert qualify_key("judge/score", "val") == "val/judge/score"


def test_the_judges_reply_reads_back_as_scores() -> None:
    reply = Response.model_validate_json(
        '{"scores": [{"trajectory_id": "1", "explanation": "solved", "score": 0.9}]}'
    )
    assert reply.scores == [TrajectoryScore(trajectory_id="1", explanation="solved", score=0.9)]
    with pytest.raises(ValueError, match="scores"):
        Response.model_validate({"score": []})


def failing(status: int, body: bytes, content_type: str = "application/json") -> Any:
    request = httpx.Request("POST", "http://trainer.test/v1/jobs")
    response = httpx.Response(
        status, content=body, headers={"content-type": content_type}, request=request
    )

    @log_http_errors
    async def call() -> None:
        response.raise_for_status()

    return call


@pytest.mark.parametrize(
    ("status", "body", "line"),
    [
        (
            404,
            b'{"detail": "no such model"}',
            "[HTTP 404] http://trainer.test/v1/jobs no such model",
        ),
        (
            400,
            b'{"error": {"message": "bad step"}}',
            "[HTTP 400] http://trainer.test/v1/jobs bad step",
        ),
        (409, b"{}", "[HTTP 409] http://trainer.test/v1/jobs"),
    ],
    ids=["detail", "openai-error", "no-detail"],
)
def test_an_http_error_with_a_json_body_becomes_one_line(
    status: int, body: bytes, line: str
) -> None:
    with pytest.raises(BackendError) as caught:
        asyncio.run(failing(status, body)())
    assert str(caught.value) == line
    assert isinstance(caught.value.__cause__, httpx.HTTPStatusError)


def test_a_body_that_is_not_a_json_object_keeps_the_original_error() -> None:
    for body in (b"<html>oops</html>", b"[1, 2]"):
        with pytest.raises(httpx.HTTPStatusError):
            asyncio.run(failing(500, body)())


def test_a_call_that_succeeds_returns_its_value() -> None:
    @log_http_errors
    async def ok(x: int) -> int:
        return x + 1

    assert asyncio.run(ok(1)) == 2


def test_the_names_without_arthex_meaning_stay_refused() -> None:
    import arthex.art.model as model

    for module, name, says in [
        (model, "METRICS_BUILDER_STATE_KEY", "saves none there"),
        (model, "WANDB_CANONICAL_METRIC_KEYS", "mirrors every key"),
    ]:
        with pytest.raises(NotInArthexError, match=says):
            getattr(module, name)
