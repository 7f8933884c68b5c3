"""Run ART's S3 helpers (ART's, or arthex's under `arthex.art`: the first argument names the
package) on the cases read as JSON from stdin, and print what each gave, as JSON: the keys of
`build_s3_path` and `build_s3_zipped_step_path`; then, against the S3 server the AWS
environment names, the steps `get_latest_checkpoint_step_from_s3` and
`get_checkpoint_step_not_after_from_s3` find, the files `pull_model_from_s3` brings (sha256 by
relative path, pulled under `{root}/{package}`), and the prefixes `push_model_to_s3` wrote to
(`{prefix}-{package}`).

Run by ART's interpreter for ART (whose S3 helpers run the `aws` command); the interop test
runs arthex's cases in its own process.
"""

import asyncio
import hashlib
import importlib
import json
import os
import sys


def digests(folder):
    found = {}
    for where, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(where, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, folder)] = hashlib.sha256(handle.read()).hexdigest()
    return dict(sorted(found.items()))


def run(lib, cases):
    s3 = importlib.import_module(f"{lib}.utils.s3")
    steps = importlib.import_module(f"{lib}.utils.s3_checkpoint_utils")
    tag = lib.replace(".", "-")
    out = {
        "paths": [s3.build_s3_path(**case) for case in cases["paths"]],
        "zipped": [s3.build_s3_zipped_step_path(**case) for case in cases["zipped"]],
        "latest": [],
        "not_after": [],
        "pulled": [],
        "pushed": [],
    }
    for case in cases.get("listings", []):
        where = (case["model"], case["project"])
        at = {"s3_bucket": case["bucket"], "prefix": case["prefix"]}
        out["latest"].append(asyncio.run(steps.get_latest_checkpoint_step_from_s3(*where, **at)))
        out["not_after"].append(
            [
                asyncio.run(steps.get_checkpoint_step_not_after_from_s3(*where, n, **at))
                for n in case["not_after"]
            ]
        )
    for n, case in enumerate(cases.get("pulls", [])):
        art_path = os.path.join(case["root"], f"{tag}-{n}")
        local = asyncio.run(
            s3.pull_model_from_s3(
                case["model"], case["project"], step=case["step"], s3_bucket=case["bucket"],
                prefix=case["prefix"], art_path=art_path, exclude=case["exclude"],
            )
        )  # fmt: skip
        out["pulled"].append(digests(local))
    for case in cases.get("pushes", []):
        prefix = f"{case['prefix']}-{tag}"
        asyncio.run(
            s3.push_model_to_s3(
                case["model"], case["project"], case["bucket"], prefix, art_path=case["art_path"]
            )
        )
        out["pushed"].append(prefix)
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
