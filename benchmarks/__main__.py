"""`python -m benchmarks [name ...]`: run the benchmarks (all by default) and print tables."""

from __future__ import annotations

import importlib
import sys

BENCHMARKS = (
    "policies",
    "trainer",
    "inference",
    "logging",
    "steps",
    "s3",
    "pipeline",
    "server_memory",
    "distributed",
    "view",
    "diagnostics",
    "memory",
    "tinker_server",
)


def main(argv: list[str]) -> None:
    chosen = argv or list(BENCHMARKS)
    unknown = sorted(set(chosen) - set(BENCHMARKS))
    if unknown:
        raise SystemExit(f"unknown benchmarks {unknown}; known: {list(BENCHMARKS)}")
    for name in chosen:
        importlib.import_module(f"benchmarks.bench_{name}").main()


if __name__ == "__main__":
    main(sys.argv[1:])
