"""The pipeline's durable record: where the scenario stream stands and what became of every
scenario taken from it, written to the run directory after each step (atomically, by a
`PipelineStateStore`).

Scenarios are known by their index in the stream (0, 1, 2, ...). At any moment each index below
`offset` is in exactly one of three places:

- trained: in a batch whose update is durable (the trajectory store holds it under the train
  split, stamped with its index; the record only counts these),
- discarded: listed under its reason (`stale`, `zero_variance`, `errored`),
- pending: taken from the stream but not yet trained or discarded: a rollout in flight, a
  group in the queue, a group discarded whose count is not yet in the history, or the batch
  of the update in progress (`in_flight`).

A scenario is listed as discarded only once the history holds its count (the pipeline row of
the update it was discarded before), so the ledger and the record never disagree: the
discards of the update in progress travel with it in `in_flight` and become discarded when
its row is written, or pending again if the update never started.

A record carried over from a trainer that counted its discards without listing them (see
`discarded_unlisted`) adds those counts to the listed ones; their scenarios lie below `offset`
and are listed nowhere, like the trained ones.

Indices at or above `offset` were never taken. A resumed run replays the pending indices first
and then reads the stream from `offset`, so a scenario lost in a crash (a rollout in flight, a
queued group) is sampled again and no scenario is trained twice or skipped. `in_flight` is
written before an update starts: after a crash the resume compares it with the backend's step
to tell an update that became durable from one that did not (see pipeline/resume.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .errors import CorruptDataError

RECORD_VERSION = 1
DISCARD_REASONS: tuple[str, ...] = ("stale", "zero_variance", "errored")


def _indices(values: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted(set(values)))


def _discards(values: Mapping[str, Iterable[int]]) -> dict[str, tuple[int, ...]]:
    return {reason: _indices(values.get(reason, ())) for reason in DISCARD_REASONS}


def _counts(values: Mapping[str, int]) -> dict[str, int]:
    unknown = set(values) - set(DISCARD_REASONS)
    if unknown:
        raise ValueError(f"unknown discard reasons {sorted(unknown)}")
    return {reason: _int(values.get(reason, 0)) for reason in DISCARD_REASONS}


@attrs.frozen
class InFlight:
    """The update in progress: the batch's scenario indices, the step it trains from, the
    pipeline metrics measured before it started (written at the new step once it is durable)
    and the scenarios discarded while its batch was collected (counted in those metrics).

    With no indices it is the discards at the end of the stream, which no update follows:
    their row is written at `step` itself."""

    step: int
    indices: tuple[int, ...] = attrs.field(converter=_indices)
    metrics: Mapping[str, float] = attrs.field(factory=dict)
    discarded: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict, converter=_discards)


@attrs.frozen
class PipelineRecord:
    """Everything a resumed pipeline needs; see the module docstring."""

    step: int = 0
    offset: int = 0
    pending: tuple[int, ...] = attrs.field(default=(), converter=_indices)
    discarded: Mapping[str, tuple[int, ...]] = attrs.field(factory=dict, converter=_discards)
    trained_groups: int = 0
    in_flight: InFlight | None = None
    stop_at_step: int | None = None
    evaluations_due: tuple[int, ...] = attrs.field(default=(), converter=_indices)
    last_eval_step: int | None = None
    best_eval: tuple[int, float] | None = None
    totals: Mapping[str, float] = attrs.field(factory=dict)
    # discards counted by an earlier record that did not list their scenarios, per reason
    discarded_unlisted: Mapping[str, int] = attrs.field(factory=dict, converter=_counts)
    # steps whose evaluation finished (retention treats them as evaluated checkpoints)
    evaluated: tuple[int, ...] = attrs.field(default=(), converter=_indices)

    def discarded_count(self, reason: str | None = None) -> int:
        if reason is not None:
            return len(self.discarded[reason]) + self.discarded_unlisted[reason]
        return sum(self.discarded_count(r) for r in DISCARD_REASONS)

    def to_json(self) -> dict[str, Any]:
        flight = self.in_flight
        return {
            "version": RECORD_VERSION,
            "step": self.step,
            "offset": self.offset,
            "pending": _ranges(self.pending),
            "discarded": {reason: _ranges(self.discarded[reason]) for reason in DISCARD_REASONS},
            "trained_groups": self.trained_groups,
            "in_flight": None
            if flight is None
            else {
                "step": flight.step,
                "indices": _ranges(flight.indices),
                "metrics": dict(flight.metrics),
                "discarded": {
                    reason: _ranges(flight.discarded[reason]) for reason in DISCARD_REASONS
                },
            },
            "stop_at_step": self.stop_at_step,
            "evaluations_due": list(self.evaluations_due),
            "last_eval_step": self.last_eval_step,
            "best_eval": None if self.best_eval is None else list(self.best_eval),
            "totals": dict(self.totals),
            "discarded_unlisted": dict(self.discarded_unlisted),
            "evaluated": list(self.evaluated),
        }

    @classmethod
    def from_json(
        cls, data: Mapping[str, Any], where: str = "the pipeline record"
    ) -> PipelineRecord:
        """Read a record written by `to_json`; anything else is CorruptDataError naming `where`."""
        try:
            if data.get("version") != RECORD_VERSION:
                raise ValueError(f"unknown version {data.get('version')!r}")
            flight = data.get("in_flight")
            best = data.get("best_eval")
            record = cls(
                step=_int(data["step"]),
                offset=_int(data["offset"]),
                pending=_from_ranges(data["pending"]),
                discarded={
                    reason: _from_ranges(data["discarded"].get(reason, []))
                    for reason in DISCARD_REASONS
                },
                trained_groups=_int(data["trained_groups"]),
                in_flight=None
                if flight is None
                else InFlight(
                    step=_int(flight["step"]),
                    indices=_from_ranges(flight["indices"]),
                    metrics={str(k): float(v) for k, v in flight["metrics"].items()},
                    discarded={
                        reason: _from_ranges(flight.get("discarded", {}).get(reason, []))
                        for reason in DISCARD_REASONS
                    },
                ),
                stop_at_step=_optional_int(data.get("stop_at_step")),
                evaluations_due=[_int(s) for s in data.get("evaluations_due", [])],
                last_eval_step=_optional_int(data.get("last_eval_step")),
                best_eval=None if best is None else (_int(best[0]), float(best[1])),
                totals={str(k): float(v) for k, v in data.get("totals", {}).items()},
                discarded_unlisted={
                    str(k): _int(v) for k, v in data.get("discarded_unlisted", {}).items()
                },
                evaluated=[_int(s) for s in data.get("evaluated", [])],
            )
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as error:
            raise CorruptDataError(
                f"{where} cannot be read ({error}); it was not written by this version of "
                "arthex, or was edited. Move it aside to start the scenario stream over."
            ) from error
        record.check()
        return record

    def check(self) -> None:
        """The places of the indices do not overlap and lie below `offset`."""
        seen: dict[int, str] = {}
        places: list[tuple[str, Iterable[int]]] = [("pending", self.pending)]
        places += [(f"discarded/{r}", self.discarded[r]) for r in DISCARD_REASONS]
        if self.in_flight is not None:
            places.append(("in_flight", self.in_flight.indices))
            places += [
                (f"in_flight/discarded/{r}", self.in_flight.discarded[r]) for r in DISCARD_REASONS
            ]
        for place, indices in places:
            for index in indices:
                if index < 0 or index >= self.offset:
                    raise CorruptDataError(
                        f"scenario {index} is {place} but the stream offset is {self.offset}"
                    )
                if index in seen:
                    raise CorruptDataError(
                        f"scenario {index} is both {seen[index]} and {place} in the pipeline record"
                    )
                seen[index] = place


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"expected an integer >= 0, got {value!r}")
    return value


def _optional_int(value: Any) -> int | None:
    return None if value is None else _int(value)


def _ranges(indices: Iterable[int]) -> list[list[int]]:
    """Sorted indices as [start, stop) runs: a run of a million consecutive discards is one
    pair, so the record stays small however long the stream."""
    runs: list[list[int]] = []
    for index in sorted(indices):
        if runs and runs[-1][1] == index:
            runs[-1][1] = index + 1
        else:
            runs.append([index, index + 1])
    return runs


def _from_ranges(runs: Any) -> list[int]:
    indices: list[int] = []
    for start, stop in runs:
        if _int(start) >= _int(stop):
            raise ValueError(f"empty range [{start}, {stop})")
        indices.extend(range(start, stop))
    return indices
