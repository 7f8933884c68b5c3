"""Run ART's `art.dev.validate` checks on configs read as a JSON list from stdin and print, as
JSON, what each gave: per config, `is_external_vllm_mode`, `is_dedicated_mode` and
`validate_dedicated_config`, each its result, or "ValueError" when it raised one.

Run by ART's own interpreter.
"""

import json
import sys

from art.dev import is_dedicated_mode, is_external_vllm_mode, validate_dedicated_config


def outcome(check, config):
    try:
        return check(config)
    except ValueError:
        return "ValueError"


print(
    json.dumps(
        [
            [
                outcome(check, config)
                for check in (is_external_vllm_mode, is_dedicated_mode, validate_dedicated_config)
            ]
            for config in json.load(sys.stdin)
        ]
    )
)
