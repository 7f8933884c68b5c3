"""Hunt flaky tests: run the suite several times in a row while spinning processes keep the
CPUs busy, then list every test that failed in any run (and in which runs).

    tools/hunt.py                               # 5 runs of the whole suite, as `make test` runs it
    tools/hunt.py --runs 2 -- tests/unit/test_policies.py   # 2 runs of one file, serially
    tools/hunt.py --load 0 -- -k tinker         # no background load

Everything after `--` goes to pytest in place of the default arguments (the whole suite,
spread over the cores the way `make test` spreads it). Each run writes a JUnit XML report;
a test counts as failed in a run when the report has a failure or an error for it. A run
whose pytest exits non-zero with no failing test in its report (a crash at interpreter exit,
a collection error, a killed worker) is reported as a failure of the run itself.

The load is `--load` processes (default: one per core), each spinning for at most
`--load-limit` seconds and exiting on its own when this script's process is gone; they are
killed when the hunt ends, fails or is interrupted. Exit status: 0 when no test failed in any
run, 1 otherwise (2 for bad arguments).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PYTEST_ARGS = [
    "-q",
    "-n",
    "auto",
    "--maxprocesses",
    "4",
    "--dist",
    "loadfile",
    "--no-loadscope-reorder",
]

# A spinner: busy until its time is up or its parent (the hunt) is gone.
SPIN = """
import os, sys, time
parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end and os.getppid() == parent:
    for _ in range(200_000):
        pass
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(list(sys.argv[1:] if argv is None else argv))
    pytest_args = args.pytest_args or DEFAULT_PYTEST_ARGS
    failures: dict[str, list[int]] = {}
    started = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupted)  # run the cleanup below on a plain `kill` too
    with tempfile.TemporaryDirectory(prefix="arthex-hunt-") as scratch, _load(args):
        for run in range(1, args.runs + 1):
            report = Path(scratch) / f"run-{run}.xml"
            command = [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                f"--junitxml={report}",
                "-o",
                "junit_family=xunit1",  # its test cases name their file
                *pytest_args,
            ]
            print(f"hunt: run {run} of {args.runs}: {' '.join(command[1:])}", flush=True)
            run_started = time.monotonic()
            code = subprocess.call(command, cwd=ROOT)
            failed = failed_tests(report)
            if code != 0 and not failed:
                failed = [f"(the run itself: pytest exited with {code} and no failing test)"]
            for name in failed:
                failures.setdefault(name, []).append(run)
            took = time.monotonic() - run_started
            print(f"hunt: run {run}: exit {code}, {len(failed)} failed, {took:.0f}s", flush=True)
    print(_summary(failures, args.runs, time.monotonic() - started))
    return 1 if failures else 0


def failed_tests(report: Path) -> list[str]:
    """The tests with a failure or an error in a JUnit XML report, as `file::name` ids."""
    if not report.exists():
        return []
    failed = []
    for case in ET.parse(report).getroot().iter("testcase"):
        if case.find("failure") is None and case.find("error") is None:
            continue
        failed.append(_test_id(case.get("file"), case.get("classname", ""), case.get("name", "")))
    return sorted(set(failed))


def _test_id(file: str | None, classname: str, name: str) -> str:
    """The id pytest prints, `tests/unit/test_x.py::TestY::test_z`, from a report's `file`
    (`tests/unit/test_x.py`), `classname` (`tests.unit.test_x.TestY`) and `name`."""
    if not file:
        return f"{classname}::{name}" if classname else name
    module = file.removesuffix(".py").replace("/", ".")
    inner = classname[len(module) + 1 :] if classname.startswith(module + ".") else ""
    return "::".join(part for part in (file, *inner.split("."), name) if part)


def _summary(failures: dict[str, list[int]], runs: int, took_s: float) -> str:
    head = f"hunt: {runs} run(s) in {took_s / 60:.1f} min"
    if not failures:
        return f"{head}: no test failed"
    lines = [f"{head}: {len(failures)} test(s) failed:"]
    for name, where in sorted(failures.items()):
        lines.append(f"  {name}  (run {', '.join(map(str, where))})")
    return "\n".join(lines)


@contextmanager
def _load(args: argparse.Namespace) -> Iterator[None]:
    spinners = [
        subprocess.Popen([sys.executable, "-c", SPIN, str(os.getpid()), str(args.load_limit)])
        for _ in range(args.load)
    ]
    if spinners:
        print(f"hunt: {len(spinners)} spinning process(es), {args.load_limit:.0f}s at most")
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def _interrupted(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _parse(argv: list[str]) -> argparse.Namespace:
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of the suite (default 5)")
    parser.add_argument(
        "--load",
        type=int,
        default=os.cpu_count() or 1,
        help="spinning processes in the background (default: one per core; 0: none)",
    )
    parser.add_argument(
        "--load-limit",
        type=float,
        default=4 * 3600.0,
        help="seconds a spinner spins at most, whatever happens (default 4 h)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.load < 0:
        parser.error(f"--load must be 0 or more, got {args.load}")
    if args.load_limit <= 0:
        parser.error(f"--load-limit must be positive, got {args.load_limit}")
    args.pytest_args = pytest_args
    return args


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("hunt: interrupted; the background load is stopped", file=sys.stderr)
        sys.exit(130)
