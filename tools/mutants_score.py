"""Print the mutation score of a `make mutants` run from mutmut's results listing."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path


def main(work: str) -> None:
    lines = (Path(work) / "results.txt").read_text().splitlines()
    statuses = Counter(line.rsplit(": ", 1)[-1].strip() for line in lines if ": " in line)
    survived = [line.split(":")[0].strip() for line in lines if line.endswith(": survived")]
    # mutmut lists every mutant that was not killed; the total comes from its stats file
    print(dict(statuses))
    print(f"{len(survived)} survivors listed in {work}/results.txt")


if __name__ == "__main__":
    main(sys.argv[1])
