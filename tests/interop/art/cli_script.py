"""Run `migrate` of ART's command line (ART's `art.cli.app`, or arthex's under `arthex.art`:
the first argument names the package) through typer's CliRunner on old runs written from the
cases read as JSON from stdin, and print what each invocation gave, as JSON: exit code, the
lines printed (paths under the folder made ROOT; the measured "Space saved" figures, which
depend on each library's parquet writer, made X), the files left, and the rewards and answers
read back from the parquet files with the same library's reader.

Each library works in its own folder, `{root}/{package}`, on its own copy of the runs. Run by
ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import re
import sys
from pathlib import Path

from typer.testing import CliRunner


def write(folder, files):
    for relative, groups in files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(g) + "\n" for g in groups) if groups else "{broken\n")


def shown(text, root):
    text = text.replace(str(root), "ROOT")
    text = re.sub(
        r"Space saved: .* MB \(.*x compression\)", "Space saved: X MB (Xx compression)", text
    )
    return re.sub(r"(Error migrating \S+?): .*", r"\1: ...", text)


def read_back(logging, folder):
    found = {}
    for path in sorted(folder.rglob("*.parquet")):
        found[str(path.relative_to(folder))] = [
            [t.reward, t.messages_and_choices[-1]["content"]]
            for g in logging.read_trajectory_groups_parquet(path)
            for t in g.trajectories
        ]
    return found


def run(lib, cases):
    cli = importlib.import_module(f"{lib}.cli")
    logging = importlib.import_module(f"{lib}.utils.trajectory_logging")
    root = Path(cases["root"]) / lib
    runner = CliRunner()
    out = []
    for case in cases["invocations"]:
        folder = root / case["name"]
        write(folder, case["files"])
        args = [a.replace("ROOT", str(folder)) for a in case["args"]]
        done = runner.invoke(cli.app, args)
        stdout = shown(done.stdout, folder).splitlines()
        out.append(
            {
                "exit_code": done.exit_code,
                "stdout": sorted(stdout) if case.get("any_order") else stdout,
                "stderr": shown(done.stderr, folder).splitlines(),
                "files": sorted(str(p.relative_to(folder)) for p in folder.rglob("*.*")),
                "read_back": read_back(logging, folder),
            }
        )
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
