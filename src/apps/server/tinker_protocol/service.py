"""The Tinker protocol's service: what an HTTP front hands it, routed to its parts.

sessions.py (client sessions), training_runs.py (training runs, their requests and the REST
view of their checkpoints), sampling_sessions.py (samplers and `asample`), futures.py (every
training, saving and sampling request is a promise resolved on the one compute thread, and
read through `retrieve_future`), served.py (the base models, by name). Checkpoints are
folders under `root/runs/<run id>/{weights,sampler_weights}/<name>` with a `run.json` per run
(store.py), so a restarted server still lists, serves and resumes them.

Every request comes with the tenant the front authenticated. Sessions, runs (and so their
checkpoints and external weights), samplers and promises are the tenant's that made them;
to another tenant each answers 404 with the body of a missing one, and listings hold only
the tenant's own.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ..guard import OPEN_TENANT
from .errors import FILES_PREFIX, HttpError
from .external import ExternalWeights
from .futures import BATCH_WINDOW_S, MAX_KEPT_RESULTS, Futures
from .quota import TinkerQuotas
from .sampling_sessions import SamplingSessions
from .served import ServedModels
from .sessions import Sessions
from .store import RunStore
from .training_runs import TrainingRuns
from .wire import Reply, json_body

API = "/api/v1"


class TinkerService:
    """The protocol behind the HTTP server; `handle` answers one request."""

    def __init__(
        self,
        models: ServedModels,
        root: Path,
        *,
        client_config: Mapping[str, Any],
        long_poll_s: float,
        quotas: Callable[[RunStore], TinkerQuotas] | None = None,
        batch_window_s: float = BATCH_WINDOW_S,
    ) -> None:
        self.models = models
        self.client_config = dict(client_config)
        self.long_poll_s = long_poll_s
        self.store = store = RunStore(root)
        self.quotas = quotas(store) if quotas is not None else None
        self._futures = Futures(long_poll_s, batch_window_s=batch_window_s)
        self._sessions = Sessions()
        self._runs = TrainingRuns(models, store, self._futures, self._sessions, quotas=self.quotas)
        self._samplers = SamplingSessions(models, self._futures, self._sessions, self._runs)
        self.external = ExternalWeights(store, self._runs)
        self._lock = threading.Lock()
        self.route_counts: Counter[str] = Counter()  # "METHOD route" -> requests served
        # request id -> the tenant whose request made the promise (the last ones kept)
        self._promised: OrderedDict[str, str] = OrderedDict()
        self.closed = False

    def close(self) -> None:
        """Finish the running work, drop the queued work, fail what is still pending; later
        requests are the front's to refuse (`closed`)."""
        self.closed = True
        self._futures.close()

    def handle(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes,
        tenant: str = OPEN_TENANT,
    ) -> Reply:
        """Answer one request of `tenant`. `target` is the raw request target (path and
        query, as sent)."""
        parts = urlsplit(target)
        path = parts.path
        if method == "GET" and path.startswith(FILES_PREFIX):
            with self._lock:
                self.route_counts["GET files"] += 1
            return self.external.download(target)
        if not path.startswith(API + "/"):
            raise HttpError(404, f"no route {method} {path}")
        route = path[len(API) + 1 :]
        with self._lock:
            self.route_counts[f"{method} {route}"] += 1
        reply = self._route(method, route, parts.query, headers, body, tenant)
        self._note_promise(reply, tenant)
        return reply

    def _route(
        self,
        method: str,
        route: str,
        query: str,
        headers: Mapping[str, str],
        body: bytes,
        tenant: str,
    ) -> Reply:
        if method == "POST":
            if route == "forward_backward":
                return self._runs.forward_backward(body, headers, tenant)
            handler = self._posts().get(route)
            if handler is not None:
                return handler(json_body(body), tenant)
            match = re.fullmatch(r"sessions/([^/]+)/finish", route)
            if match:
                return self._sessions.finish(match.group(1), tenant)
        elif method == "GET":
            if route == "healthz":
                return Reply.json({"status": "ok"})
            if route == "get_server_capabilities":
                return Reply.json(self.models.capabilities())
            params = dict(parse_qsl(query))
            if route == "training_runs":
                return self._runs.list_training_runs(params, tenant)
            if route == "checkpoints":
                return self._runs.list_user_checkpoints(params, tenant)
            match = re.fullmatch(r"samplers/([^/]+)", route)
            if match:
                return self._samplers.get_sampler(match.group(1), tenant)
            match = re.fullmatch(
                r"training_runs/([^/]+)/checkpoints/external_weights(?:/|%2F)([^/]+)"
                r"/external_weights_urls",
                route,
            )
            if match:
                return self.external.urls(match.group(1), match.group(2), headers, tenant)
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints", route)
            if match:
                return self._runs.list_checkpoints(match.group(1), tenant)
            match = re.fullmatch(r"training_runs/([^/]+)", route)
            if match:
                return self._runs.get_training_run(match.group(1), tenant)
        elif method == "PUT":
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)/ttl", route)
            if match:
                run_id, segment, name = match.groups()
                return self._runs.set_checkpoint_ttl(run_id, segment, name, json_body(body), tenant)
        elif method == "DELETE":
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)", route)
            if match:
                run_id, segment, name = match.groups()
                return self._runs.delete_checkpoint(run_id, segment, name, tenant)
        raise HttpError(404, f"this server has no route {method} /api/v1/{route}")

    def _posts(self) -> dict[str, Callable[[dict[str, Any], str], Reply]]:
        return {
            "client/config": lambda _b, _t: Reply.json(self.client_config),
            "client/dynamic_config": lambda _b, _t: Reply.json({}),
            "create_session": self._sessions.create,
            "session_heartbeat": self._sessions.heartbeat,
            "telemetry": lambda _b, _t: Reply.json({"status": "accepted"}),
            "create_model": self._runs.create_model,
            "get_info": self._runs.get_info,
            "optim_step": self._runs.optim_step,
            "save_weights": self._runs.save_weights,
            "save_weights_for_sampler": self._samplers.save_weights_for_sampler,
            "save_weights_external": self.external.save,
            "load_weights": self._runs.load_weights,
            "create_sampling_session": self._samplers.create_sampling_session,
            "asample": self._samplers.asample,
            "retrieve_future": self._retrieve,
            "cancel_future": lambda _b, _t: Reply.json({}),
        }

    def _retrieve(self, body: dict[str, Any], tenant: str) -> Reply:
        """`retrieve_future` of the tenant's own promise; another tenant's is unknown. A
        promise this server did not make (a previous life's) is the futures' to answer."""
        owner = self._promised.get(str(body.get("request_id")))
        if owner is not None and owner != tenant:
            raise HttpError(404, f"unknown request_id {str(body.get('request_id'))!r}")
        return self._futures.retrieve(body)

    def _note_promise(self, reply: Reply, tenant: str) -> None:
        """Remember whose promise a reply hands out (a JSON reply with a `request_id`)."""
        if reply.content_type != "application/json" or b'"request_id"' not in reply.body:
            return
        try:
            request_id = json.loads(reply.body).get("request_id")
        except (ValueError, AttributeError):
            return
        if not isinstance(request_id, str) or request_id in self._promised:
            return
        with self._lock:
            self._promised[request_id] = tenant
            while len(self._promised) > 2 * MAX_KEPT_RESULTS:
                self._promised.popitem(last=False)
