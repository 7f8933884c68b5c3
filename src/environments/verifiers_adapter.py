"""A verifiers environment (verifiers 0.4, `verifiers.v1`) as an arthex `Environment`.

`from_verifiers(env)` runs the environment's own episode (its harness, its runtime, its
taskset's tasks) and its own scoring (the task's `@vf.reward` and `@vf.metric` functions, its
judges), and returns a Trajectory that trains on exactly what the model sampled:

- The harness talks to verifiers' interception server, which relays each model call to the
  model's OpenAI-compatible endpoint with the trace's id in the `X-Session-ID` header. That
  relay runs outside the rollout's context, so the calls are recorded by a capture scope bound
  to the session id (`arthex.core.capture.scope.bind_session`): the trajectory holds the
  endpoint's own responses, with the prompt and sampled token ids and logprobs, as any captured
  trajectory does. Nothing is re-tokenized.
- The reward is the trace's (`trace.reward`: the sum of the weighted rewards); each reward
  function's score and each metric is a trajectory metric under its own name; the trace's
  `info` goes to the metadata (values that are not plain scalars as JSON text), with the
  trace id, task key and index, env id and stop condition under `verifiers_*` keys.

verifiers is imported when an adapter is built, never by `import arthex`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..composition import capture as _capture_hook  # noqa: F401  (registers the http hook)
from ..core.capture.endpoints import EndpointFilter
from ..core.capture.scope import (
    SKIPPED_METRIC,
    Scope,
    bind_session,
    close_session_scope,
    no_capture,
    open_session_scope,
)
from ..core.errors import InvalidInputError, MissingExtraError
from ..core.exchanges import TrajectoryExchanges
from ..core.model import Model
from ..core.trajectories import MetricValue, Trajectory
from .shared import EpisodeError, is_verifiers_environment, metadata_value

if TYPE_CHECKING:
    from verifiers.v1 import Env, Episode, Task, Trace

logger = logging.getLogger("arthex.environments")

EXTRA = "envs"
DEFAULT_SAMPLING: Mapping[str, Any] = {"logprobs": True}
KEY_VARIABLE_PREFIX = "ARTHEX_INFERENCE_API_KEY_"
"""verifiers reads an endpoint's key from an environment variable: the adapter sets one per
endpoint and key. Its name contains `API_KEY`, so verifiers' subprocess runtime does not pass
it on to the programs it starts."""


def _verifiers() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as error:
        raise MissingExtraError("verifiers", EXTRA) from error
    return vf


def from_verifiers(env: Any, *, eval_env: Any = None, **sampling: Any) -> VerifiersEnvironment:
    """An arthex `Environment` running `env`'s own episodes and scoring.

    `scenarios(split)` lists `env`'s tasks for every split (a taskset has no splits); with
    `eval_env`, every split but `"train"` lists `eval_env`'s tasks, and their rollouts run in
    `eval_env`. `sampling` is verifiers' `SamplingConfig` (`temperature=`, `max_tokens=`,
    ...), imposed on every model call; `logprobs=True` unless given, as training needs them.
    """
    vf = _verifiers()
    for name, value in (("env", env), ("eval_env", eval_env)):
        if value is None and name == "eval_env":
            continue
        if not is_verifiers_environment(value):
            kind = type(value)
            raise InvalidInputError(
                f"from_verifiers: {name} must be a verifiers environment (verifiers.v1.Env, "
                f"e.g. from vf.load_environment(...)), got {kind.__module__}.{kind.__qualname__}"
            )
    try:
        config = vf.SamplingConfig.model_validate({**DEFAULT_SAMPLING, **sampling})
    except ValueError as error:
        first = str(error).splitlines()
        raise InvalidInputError(
            f"from_verifiers: bad sampling {sampling!r}: {' '.join(first[1:3]) or error}"
        ) from None
    return VerifiersEnvironment(env, eval_env, config)


class _Serving:
    """`env.serving()` (verifiers' interception server) held open while rollouts use it.

    One task enters it at the first rollout and leaves it when the last rollout in flight
    finishes, so nothing outlives the rollouts (no server is left behind when the event loop
    ends), and concurrent rollouts share one server. A rollout on a new event loop starts a
    new one."""

    def __init__(self, env: Env[Any]) -> None:
        self.env = env
        self.users = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None] | None = None
        self._stop: asyncio.Event | None = None

    def _this_loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            old = self._loop
            if old is not None and self.users and old.is_running():
                raise InvalidInputError(
                    "a verifiers environment is rolled out on two event loops at once; use "
                    "one event loop (or one from_verifiers(...) per loop)"
                )
            self._loop, self._task, self._closing, self.users = loop, None, None, 0
        return loop

    async def acquire(self) -> None:
        loop = self._this_loop()
        while self._closing is not None:
            await asyncio.wait([self._closing])
        self.users += 1
        if self._task is None:
            self._ready = loop.create_future()
            self._stop = asyncio.Event()
            self._task = loop.create_task(self._hold(self._ready, self._stop))
        assert self._ready is not None
        try:
            await asyncio.shield(self._ready)
        except BaseException:
            await self.release()
            raise

    async def release(self) -> None:
        self.users -= 1
        if self.users > 0 or self._task is None:
            return
        task, stop = self._task, self._stop
        self._task = None
        assert stop is not None
        stop.set()
        self._closing = task
        try:
            await asyncio.wait([task])
        finally:
            if self._closing is task:
                self._closing = None

    async def _hold(self, ready: asyncio.Future[None], stop: asyncio.Event) -> None:
        try:
            # the server's tasks inherit this task's context: no capture scope of the first
            # rollout's caller may see the calls it relays (session scopes take them)
            with no_capture():
                async with self.env.serving():
                    ready.set_result(None)
                    await stop.wait()
        except BaseException as error:
            if not ready.done():
                ready.set_exception(error)
            else:
                logger.warning("closing a verifiers environment's server failed: %r", error)
            if not isinstance(error, Exception):
                raise


class VerifiersEnvironment:
    """A verifiers environment in arthex's terms (see `from_verifiers`). Scenarios are the
    taskset's `Task` values."""

    def __init__(self, env: Env[Any], eval_env: Env[Any] | None, sampling: Any) -> None:
        self.env = env
        self.eval_env = eval_env
        self.sampling = sampling
        self._serving = {id(env): _Serving(env)}
        if eval_env is not None:
            self._serving.setdefault(id(eval_env), _Serving(eval_env))
        self._tasks: dict[int, list[Task[Any, Any, Any]]] = {}

    def __repr__(self) -> str:
        name = self.env.config.env_id
        extra = f", eval_env={self.eval_env.config.env_id!r}" if self.eval_env else ""
        return f"from_verifiers({name!r}{extra})"

    def _env_for_split(self, split: str) -> Env[Any]:
        if self.eval_env is not None and split != "train":
            return self.eval_env
        return self.env

    def _listed(self, env: Env[Any]) -> list[Task[Any, Any, Any]]:
        tasks = self._tasks.get(id(env))
        if tasks is None:
            if not env.taskset.bounded:
                raise InvalidInputError(
                    f"the taskset of {env.config.env_id!r} is infinite; bound it with a view "
                    "(env.taskset = env.taskset.take(n)) before listing its scenarios"
                )
            tasks = self._tasks[id(env)] = list(env.taskset)
        return tasks

    def scenarios(self, split: str) -> Sequence[Task[Any, Any, Any]]:
        """The tasks of a split: the whole taskset for every split, or `eval_env`'s tasks for
        every split but `"train"` when one was given."""
        if not isinstance(split, str) or not split:
            raise InvalidInputError(f"split must be a non-empty string, got {split!r}")
        return list(self._listed(self._env_for_split(split)))

    def _env_for_task(self, task: object) -> Env[Any]:
        vf = _verifiers()
        if not isinstance(task, vf.Task):
            kind = type(task)
            raise InvalidInputError(
                "a verifiers scenario is a task of its taskset (environment.scenarios(split)), "
                f"got {kind.__module__}.{kind.__qualname__}"
            )
        if self.eval_env is not None and any(t is task for t in self._listed(self.eval_env)):
            return self.eval_env
        return self.env

    async def rollout(self, model: Model, scenario: Task[Any, Any, Any]) -> Trajectory:
        """One episode of `scenario` against `model`'s endpoint, scored by the environment;
        an episode that fails raises `EpisodeError`."""
        vf = _verifiers()
        env = self._env_for_task(scenario)
        base_url, key = model.inference_base_url, model.inference_api_key
        if base_url is None or key is None:
            raise InvalidInputError(
                f"model {model.name!r} has no inference endpoint: register it with a backend "
                "(await model.register(backend)) or pass inference_base_url= and "
                "inference_api_key="
            )
        context = vf.ModelContext(
            model=model.get_inference_name(),
            client=vf.EvalClientConfig(base_url=base_url, api_key_var=_key_variable(base_url, key)),
            sampling=self.sampling,
        )
        endpoints = EndpointFilter([base_url])
        scopes: dict[str, Scope] = {}

        def minted(trace: Trace[Any, Any, Any]) -> None:
            if trace.agent.trainable:
                scope = scopes[trace.id] = open_session_scope(None, endpoints)
                bind_session(scope, trace.id)

        started = time.monotonic()
        serving = self._serving[id(env)]
        error: BaseException | None = None
        await serving.acquire()
        try:
            episode = await env.run_episode(scenario, context, on_trace=minted)
        except BaseException as raised:
            error = raised
            raise
        finally:
            for scope in scopes.values():
                close_session_scope(scope, error)
            await serving.release()
        return _trajectory(episode, scopes, time.monotonic() - started)


def _key_variable(base_url: str, key: str) -> str:
    digest = hashlib.sha256(f"{base_url}\n{key}".encode()).hexdigest()[:16].upper()
    name = KEY_VARIABLE_PREFIX + digest
    if os.environ.get(name) != key:
        os.environ[name] = key
    return name


def _episode_error(episode: Episode[Any, Any, Any]) -> str:
    errors = [*episode.errors, *(e for trace in episode.traces for e in trace.errors)]
    if not errors:
        return "the episode did not complete"
    last = errors[-1]
    return f"{last.type}: {last.message}".splitlines()[0][:500]


def _trajectory(
    episode: Episode[Any, Any, Any], scopes: Mapping[str, Scope], duration: float
) -> Trajectory:
    traces = [trace for trace in episode.traces if trace.agent.trainable]
    if not episode.ok or not traces:
        raise EpisodeError(
            f"the verifiers episode of task {episode.task.key} failed: {_episode_error(episode)}"
        )
    several = len(traces) > 1
    metrics: dict[str, MetricValue] = {}
    metadata: dict[str, Any] = {}
    exchanges = []
    skipped = 0
    for trace in traces:
        prefix = f"{trace.agent.name}/" if several else ""
        for name, reward in trace.rewards.items():
            if reward is not None:
                metrics[prefix + name] = reward.score
        for name, value in trace.metrics.items():
            if value is not None:
                metrics.setdefault(prefix + name, value)
        metrics.setdefault(prefix + "num_turns", trace.num_turns)
        for key, value in trace.info.items():
            metadata[prefix + str(key)] = metadata_value(value)
        scope = scopes.get(trace.id)
        if scope is not None:
            exchanges.extend(scope.trajectory.exchanges.chat_completions)
            skipped += int(scope.trajectory.metrics.get(SKIPPED_METRIC, 0))
    if skipped:
        metrics[SKIPPED_METRIC] = skipped
    metrics.setdefault("duration", duration)
    first = traces[0]
    metadata.update(
        verifiers_env=episode.env.id,
        verifiers_trace_id=",".join(trace.id for trace in traces),
        verifiers_task_key=episode.task.key,
        verifiers_task_idx=episode.task.data.idx,
        verifiers_stop_condition=first.stop_condition,
    )
    reward = sum(trace.reward for trace in traces) / len(traces)
    exchanges.sort(key=lambda exchange: exchange.start_time)
    return Trajectory(
        exchanges=TrajectoryExchanges(chat_completions=exchanges),
        reward=reward,
        metrics=metrics,
        metadata=metadata,
    )
