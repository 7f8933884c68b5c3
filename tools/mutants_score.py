"""Print the score of a `make mutants` run: killed mutants over all mutants, from mutmut's
`results --all true` listing (one `name: status` line per mutant)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

KILLED = {"killed", "timeout", "segfault"}  # a mutant that made the tests fail, one way or another


def main(work: str) -> None:
    mutmut = Path(sys.executable).with_name("mutmut")
    listing = subprocess.run(
        [str(mutmut), "results", "--all", "true"],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statuses = Counter(
        line.rsplit(": ", 1)[1].strip() for line in listing.splitlines() if ": " in line
    )
    total = sum(statuses.values())
    killed = sum(count for status, count in statuses.items() if status in KILLED)
    print(", ".join(f"{status}: {count}" for status, count in sorted(statuses.items())))
    if total:
        print(f"score: {killed} of {total} mutants killed ({100 * killed / total:.1f}%)")
    survivors = [
        line.split(":")[0].strip() for line in listing.splitlines() if line.endswith(": survived")
    ]
    (Path(work) / "survivors.txt").write_text("\n".join(survivors) + "\n")
    print(f"{len(survivors)} survivors listed in {work}/survivors.txt")


if __name__ == "__main__":
    main(sys.argv[1])
