"""The tinker emulator's service: the protocol behind the HTTP server, routed to its parts.

sessions.py (client sessions), training_runs.py (training runs, their requests and the REST
view of their checkpoints), sampling_sessions.py (samplers and `asample`), futures.py (every
training, saving and sampling request is a promise resolved on the one compute thread, and
read through `retrieve_future`). Checkpoints are folders under
`root/runs/<run id>/{weights,sampler_weights}/<name>` with a `run.json` per run (store.py), so
a restarted emulator still lists, serves and resumes them.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .base_model import BaseModel
from .errors import FILES_PREFIX, HttpError
from .external import ExternalWeights
from .futures import Futures
from .sampling_sessions import SamplingSessions
from .sessions import Sessions
from .store import RunStore
from .training_runs import TrainingRuns
from .wire import Reply, json_body

API = "/api/v1"


class TinkerService:
    """The protocol behind the HTTP server; `handle` answers one request."""

    def __init__(
        self,
        base: BaseModel,
        root: Path,
        *,
        names: set[str],
        model_name: str,
        client_config: Mapping[str, Any],
        long_poll_s: float,
    ) -> None:
        self._base = base
        self.model_name = model_name
        self.client_config = dict(client_config)
        self.long_poll_s = long_poll_s
        self.store = store = RunStore(root)
        self._futures = Futures(long_poll_s)
        self._sessions = Sessions()
        self._runs = TrainingRuns(
            base, store, self._futures, self._sessions, names=names, model_name=model_name
        )
        self._samplers = SamplingSessions(base, store, self._futures, self._sessions, self._runs)
        self.external = ExternalWeights(store, self._runs)
        self._lock = threading.Lock()
        self.route_counts: Counter[str] = Counter()  # "METHOD route" -> requests served

    def close(self) -> None:
        """Finish the running work, drop the queued work, fail what is still pending."""
        self._futures.close()

    def handle(self, method: str, target: str, headers: Mapping[str, str], body: bytes) -> Reply:
        path = urlsplit(target).path
        if method == "GET" and path.startswith(FILES_PREFIX):
            with self._lock:
                self.route_counts["GET files"] += 1
            return self.external.download(target)
        if not path.startswith(API + "/"):
            raise HttpError(404, f"no route {method} {path}")
        route = path[len(API) + 1 :]
        with self._lock:
            self.route_counts[f"{method} {route}"] += 1
        if method == "POST":
            if route == "forward_backward":
                return self._runs.forward_backward(body, headers)
            handler = self._posts().get(route)
            if handler is not None:
                return handler(json_body(body))
            match = re.fullmatch(r"sessions/([^/]+)/finish", route)
            if match:
                return self._sessions.finish(match.group(1))
        elif method == "GET":
            if route == "healthz":
                return Reply.json({"status": "ok"})
            if route == "get_server_capabilities":
                return self._capabilities()
            match = re.fullmatch(r"samplers/([^/]+)", route)
            if match:
                return self._samplers.get_sampler(match.group(1))
            match = re.fullmatch(
                r"training_runs/([^/]+)/checkpoints/external_weights(?:/|%2F)([^/]+)"
                r"/external_weights_urls",
                route,
            )
            if match:
                return self.external.urls(match.group(1), match.group(2), headers)
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints", route)
            if match:
                return self._runs.list_checkpoints(match.group(1))
            match = re.fullmatch(r"training_runs/([^/]+)", route)
            if match:
                return self._runs.get_training_run(match.group(1))
        elif method == "PUT":
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)/ttl", route)
            if match:
                run_id, segment, name = match.groups()
                return self._runs.set_checkpoint_ttl(run_id, segment, name, json_body(body))
        elif method == "DELETE":
            match = re.fullmatch(r"training_runs/([^/]+)/checkpoints/([^/]+)/([^/]+)", route)
            if match:
                return self._runs.delete_checkpoint(*match.groups())
        raise HttpError(404, f"the tinker emulator has no route {method} /api/v1/{route}")

    def _posts(self) -> dict[str, Callable[[dict[str, Any]], Reply]]:
        return {
            "client/config": lambda _b: Reply.json(self.client_config),
            "client/dynamic_config": lambda _b: Reply.json({}),
            "create_session": self._sessions.create,
            "session_heartbeat": self._sessions.heartbeat,
            "telemetry": lambda _b: Reply.json({"status": "accepted"}),
            "create_model": self._runs.create_model,
            "get_info": self._runs.get_info,
            "optim_step": self._runs.optim_step,
            "save_weights": self._runs.save_weights,
            "save_weights_for_sampler": self._samplers.save_weights_for_sampler,
            "save_weights_external": self.external.save,
            "load_weights": self._runs.load_weights,
            "create_sampling_session": self._samplers.create_sampling_session,
            "asample": self._samplers.asample,
            "retrieve_future": self._futures.retrieve,
            "cancel_future": lambda _b: Reply.json({}),
        }

    def _capabilities(self) -> Reply:
        return Reply.json(
            {
                "supported_models": [
                    {
                        "model_name": self.model_name,
                        "max_context_length": self._base.context_length,
                        "trainable": True,
                        "sampleable": True,
                    }
                ]
            }
        )
