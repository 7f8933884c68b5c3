"""Deploy checkpoint folders to Together with `deploy_model` (ART's, or arthex's under
`arthex.art`: the first argument names the package) on the cases read as JSON from stdin, and
print what each gave, as JSON: the inference model name, or the error's class and message.

Together is the loopback server $TOGETHER_BASE_URL names, S3 the one the AWS environment
names. ART's client calls https://api.together.xyz/v1 itself, so for ART the script sends
aiohttp's requests for that address to $TOGETHER_BASE_URL instead (only the address changes:
method, path, headers and body are ART's own). arthex reads $TOGETHER_BASE_URL.
"""

import asyncio
import importlib
import json
import os
import sys
import types

TOGETHER = "https://api.together.xyz/v1"


def send_together_to_loopback():
    import aiohttp

    request = aiohttp.ClientSession._request

    def redirected(self, method, url, *args, **kwargs):
        url = str(url)
        if url.startswith(TOGETHER):
            url = os.environ["TOGETHER_BASE_URL"] + url[len(TOGETHER) :]
        return request(self, method, url, *args, **kwargs)

    aiohttp.ClientSession._request = redirected


def run(lib, cases):
    if lib == "art":
        send_together_to_loopback()
    deployment = importlib.import_module(f"{lib}.utils.deployment")
    out = []
    for case in cases:
        model = types.SimpleNamespace(
            project=case["project"], run_name=case["run"], base_model=case["base_model"],
            entity=None, name=case["run"],
        )  # fmt: skip
        config = deployment.TogetherDeploymentConfig(
            s3_bucket=case["bucket"], prefix=case["prefix"],
            wait_for_completion=case["wait"],
        )  # fmt: skip
        deploying = deployment.deploy_model(
            model, case["checkpoint"], case["step"], "together", config
        )
        try:
            result = asyncio.run(deploying)
            out.append({"name": result.inference_model_name})
        except Exception as error:  # the outcome compared is the error itself
            out.append({"error": type(error).__name__, "message": str(error)})
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
