"""The training server's Prometheus metrics (`GET /metrics`, admin key only).

- `arthex_requests_total{method, route, status}`: every request, by route template (never
  the raw path: a client must not be able to grow the label set), `unmatched` for a path
  no route knows, `-` for a request refused before its head was read (431);
- `arthex_jobs_running`, `arthex_jobs_queued`: jobs training now, and jobs waiting for a
  slot under `--max-running-jobs` (the queue depth);
- `arthex_checkpoint_bytes{tenant}`: bytes each tenant's models keep on the server's disk,
  measured when scraped;
- `arthex_rate_limited_total`: requests refused by a key's rate limit.

Each app has its own CollectorRegistry (not the process-wide default), so two servers in one
process, as in tests, do not share or clash.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

__all__ = ["ServerMetrics"]


class ServerMetrics:
    def __init__(
        self,
        *,
        jobs_running: Callable[[], int],
        jobs_queued: Callable[[], int],
        bytes_by_tenant: Callable[[], Mapping[str, int]],
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge
        from prometheus_client.core import GaugeMetricFamily

        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "arthex_requests",
            "HTTP requests by method, route template and status",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.rate_limited = Counter(
            "arthex_rate_limited",
            "Requests refused by a key's rate limit",
            registry=self.registry,
        )
        running = Gauge("arthex_jobs_running", "Training jobs running", registry=self.registry)
        running.set_function(lambda: float(jobs_running()))
        queued = Gauge(
            "arthex_jobs_queued",
            "Training jobs waiting for a slot (--max-running-jobs)",
            registry=self.registry,
        )
        queued.set_function(lambda: float(jobs_queued()))

        class _Stored:
            def collect(self) -> Iterator[Any]:
                family = GaugeMetricFamily(
                    "arthex_checkpoint_bytes",
                    "Bytes each tenant's models keep on the server's disk",
                    labels=["tenant"],
                )
                for tenant, size in sorted(bytes_by_tenant().items()):
                    family.add_metric([tenant], float(size))
                yield family

            def describe(self) -> list[Any]:
                return []

        self.registry.register(_Stored())

    def count(self, method: str, route: str, status: int) -> None:
        self.requests.labels(method=method, route=route, status=str(status)).inc()

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
