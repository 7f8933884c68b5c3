"""Run `utils.model_config` and `utils.cache_dirs` (ART's, or arthex's under `arthex.art`: the
first argument names the package) on the cases read as JSON from stdin, and print what each
gave, as JSON: the markers (or the error) for each chat template and model id, the cache
variables `configure_model_cache_env` leaves in each starting environment (and the root it
returns), `compiler_cache_root`, and the filesystem type and warning for each path.

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys
from types import SimpleNamespace


def _outcome(call, *args):
    try:
        return {"value": list(call(*args))}
    except ValueError as error:
        return {"error": type(error).__name__, "message": str(error)}


def run(lib, cases):
    config = importlib.import_module(f"{lib}.utils.model_config")
    caches = importlib.import_module(f"{lib}.utils.cache_dirs")
    out = {"detect": [], "parts": [], "configs": {}, "env": [], "compiled": [], "fs": []}
    for template in cases["templates"]:
        tokenizer = SimpleNamespace(chat_template=template)
        out["detect"].append(_outcome(config.detect_chat_template_parts, tokenizer))
        for model_id in cases["model_ids"]:
            out["parts"].append(
                _outcome(config.get_instruction_response_parts, model_id, tokenizer)
            )
    out["detect"].append(_outcome(config.detect_chat_template_parts, object()))
    for model_id, entry in config.MODEL_CONFIGS.items():
        out["configs"][model_id] = [entry.instruction_part, entry.response_part]
    for environ, cache_root in cases["environs"]:
        env = dict(environ)
        if cache_root is None:
            root = caches.configure_model_cache_env(env)
        else:
            root = caches.configure_model_cache_env(env, cache_root=cache_root)
        out["env"].append([str(root), env])
        again = dict(env)
        caches.configure_model_cache_env(again)  # a second call changes nothing
        out["env"].append(again == env)
    for root, environ in cases["compiled"]:
        out["compiled"].append(str(caches.compiler_cache_root(root, dict(environ))))
    for path in cases["paths"]:
        warned = caches.network_cache_warning(path) is not None  # the wording is each one's own
        out["fs"].append([caches.cache_filesystem_type(path), warned])
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
