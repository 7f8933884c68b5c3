"""Run ART's pipeline tuner configuration (ART's, or arthex's under `arthex.art`: the first
argument names the package) on the cases read as JSON from stdin, and print what each gave, as
JSON: `build_initial_settings`, `freshness_worker_limit` and `recommended_queue_size` on a grid,
`PipelineAutotuneConfig`'s checks on a list of settings, a profile saved and loaded with
`PipelineTunerProfileStore`, and a profile's settings applied to a run's policy-age limit (ART:
its attachment's `_settings_with_current_queue`, the step its profile mode takes; arthex:
`settings_for_profile`).

Run by ART's interpreter for ART; the interop test runs arthex's cases in its own process.
"""

import importlib
import json
import sys
import warnings


def _checked(make, *args):
    try:
        return {"ok": make(*args)}
    except Exception as error:  # pydantic's ValidationError or the tuner's ValueError
        errors = getattr(error, "errors", None)
        if callable(errors):
            return {"error": sorted(str(e["loc"][0]) if e["loc"] else "" for e in errors())}
        return {"error": type(error).__name__}


def _applied(lib, profile, config, limit):
    if lib == "art":
        attachment = importlib.import_module("art.pipeline_tuner.attachment")
        settings = attachment.PipelineAutotunerAttachment(config)._settings_with_current_queue(
            profile.settings, limit
        )
        return [
            settings.num_rollout_workers,
            settings.min_batch_size,
            settings.max_batch_size,
            settings.queue_maxsize,
        ]
    tuner = importlib.import_module("arthex.utils.pipeline_tuner")
    applied = tuner.settings_for_profile(profile, config, limit)
    return [
        applied.num_rollout_workers,
        applied.min_batch_size,
        applied.max_batch_size,
        applied.queue_maxsize,
    ]


def run(lib, cases):
    tuner = importlib.import_module(f"{lib}.pipeline_tuner")
    autotune = importlib.import_module(f"{lib}.pipeline_tuner.autotune")
    store = importlib.import_module(f"{lib}.pipeline_tuner.store")
    out = {"initial": [], "limit": [], "queue": [], "configs": [], "applied": []}
    for overrides, gpus, packed, limit, capacity in cases["initial"]:
        config = tuner.PipelineAutotuneConfig(**overrides)
        settings = autotune.build_initial_settings(
            config=config,
            inference_gpu_count=gpus,
            target_packed_sequences=packed,
            policy_age_limit_steps=limit,
            rollout_worker_capacity=capacity,
        )
        out["initial"].append(settings.model_dump())
    for target, limit, reserve, step in cases["limit"]:
        out["limit"].append(
            autotune.freshness_worker_limit(
                target_groups_per_step=target,
                limit_steps_off_policy=limit,
                running_reserve_fraction=reserve,
                worker_step=step,
            )
        )
    out["queue"] = [
        autotune.recommended_queue_size(target_groups_per_step=t) for t in cases["queue"]
    ]
    for settings in cases["configs"]:
        out["configs"].append(
            _checked(
                lambda given: tuner.PipelineAutotuneConfig(**given).model_dump(mode="json"),
                settings,
            )
        )
    profile = tuner.PipelineAutotunerProfile.model_validate(cases["profile"])
    saved = store.PipelineTunerProfileStore(cases["folder"])
    path = saved.save("tuned", profile)
    out["saved"] = [path.name, json.loads(path.read_text(encoding="utf-8"))]
    out["loaded"] = saved.load("tuned").model_dump(mode="json")
    for settings, overrides, limit in cases["applied"]:
        profile = tuner.PipelineAutotunerProfile(
            settings=tuner.PipelineTuneSettings(**settings),
            config=tuner.PipelineAutotuneConfig(),
        )
        config = tuner.PipelineAutotuneConfig(**overrides)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out["applied"].append(_checked(_applied, lib, profile, config, limit))
    return out


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], json.load(sys.stdin))))
