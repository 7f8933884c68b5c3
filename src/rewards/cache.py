"""Judge verdicts cached by the hash of everything that decides them, so re-scoring is free.

The key covers the judge model, the rubric, the request parameters, the number of
permutations and the trajectories as the judge reads them, in order: change any and it is a
new question. A cache lives in memory, and optionally in a directory (one JSON file per key,
written atomically), which several processes may share: two writers of one key write the same
verdict, and the last rename wins.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from .prompt import TrajectoryScore, View

_VERSION = 1


@attrs.frozen
class Verdict:
    scores: tuple[TrajectoryScore, ...]
    rank_agreement: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "scores": [s.model_dump() for s in self.scores],
            "rank_agreement": self.rank_agreement,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            tuple(TrajectoryScore.model_validate(s) for s in data["scores"]),
            data.get("rank_agreement"),
        )


def verdict_key(
    judge_model: str,
    rubric: str,
    params: Mapping[str, Any],
    permutations: int,
    views: Sequence[View],
) -> str:
    payload = json.dumps(
        {
            "version": _VERSION,
            "judge": judge_model,
            "rubric": rubric,
            "params": params,
            "permutations": permutations,
            "views": [view.key() for view in views],
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class JudgeCache:
    """Verdicts by key, in memory and, with `directory`, on disk."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self._memory: dict[str, Verdict] = {}
        self._directory = Path(directory) if directory is not None else None
        self._lock = threading.Lock()

    def get(self, key: str) -> Verdict | None:
        with self._lock:
            found = self._memory.get(key)
        if found is not None or self._directory is None:
            return found
        path = self._directory / f"{key}.json"
        try:
            found = Verdict.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None  # absent, or unreadable: ask the judge again and overwrite it
        with self._lock:
            self._memory[key] = found
        return found

    def put(self, key: str, verdict: Verdict) -> None:
        with self._lock:
            self._memory[key] = verdict
        if self._directory is None:
            return
        self._directory.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=self._directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                json.dump(verdict.to_json(), handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temp, self._directory / f"{key}.json")
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def __len__(self) -> int:
        with self._lock:
            return len(self._memory)


default_cache = JudgeCache()
"""The process-wide in-memory cache `ruler_score_group` uses unless told otherwise."""
