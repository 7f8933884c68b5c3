"""How ART's pipeline examples choose their backend and base model under arthex, and read
their settings from the environment.

ART 0.5.23's examples train on Tinker only (`TinkerNativeBackend`; without TINKER_API_KEY the
yes/no/maybe example stops). arthex keeps Tinker wherever ART would use it and adds the machine
the script runs on, chosen by `ARTHEX_BACKEND`:

- `tinker`: `arthex.TinkerBackend` (what `art.tinker_native.TinkerNativeBackend` is in arthex)
  on the example's own base model; TINKER_API_KEY is required, as in ART;
- `local`: `arthex.LocalBackend` (vLLM with a GPU, else torch) on `LOCAL_BASE_MODEL`, a model
  small enough for one consumer GPU (or, slowly, the CPU);
- unset: `tinker` when TINKER_API_KEY is set, else `local`, so an ART user with a Tinker key
  gets ART's run, and anyone else gets a run instead of an error.

`BASE_MODEL` overrides the base model on either backend. A `.env` file in the working
directory is read first, as ART's examples read theirs with python-dotenv (a variable already
set wins). A setting that does not parse is refused in one line naming the variable, before
anything is written.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Mapping, MutableMapping
from pathlib import Path
from typing import Any, Literal, TypeAlias

from ...core.errors import InvalidInputError
from ...ports.training_backend import TrainingBackend

BackendKind: TypeAlias = Literal["tinker", "local"]
BACKEND_ENV = "ARTHEX_BACKEND"
TINKER_KEY_ENV = "TINKER_API_KEY"
BASE_MODEL_ENV = "BASE_MODEL"
LOCAL_BASE_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
KINDS: tuple[BackendKind, ...] = ("tinker", "local")


def load_env_file(
    path: str | os.PathLike[str] = ".env", environ: MutableMapping[str, str] | None = None
) -> dict[str, str]:
    """Set the `KEY=VALUE` lines of `path` (when it exists) that `environ` (os.environ) lacks;
    what was set. Blank lines, `#` comment lines and lines without `=` are skipped; `export `,
    one pair of matching quotes around a value, and a ` #` comment after an unquoted value are
    dropped. Not python-dotenv: no `${VAR}` expansion, no multi-line values."""
    target = os.environ if environ is None else environ
    file = Path(path)
    if not file.is_file():
        return {}
    added: dict[str, str] = {}
    for number, raw in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.removeprefix("export ").partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            continue  # a bare name, as dotenv reads it: no value to set
        if not key.isidentifier():
            raise InvalidInputError(
                f"{file}:{number} is not a KEY=VALUE line: {raw!r:.80}; fix or remove it"
            )
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        if key not in target:
            target[key] = added[key] = value
    return added


def backend_kind(environ: Mapping[str, str] | None = None) -> BackendKind:
    """`ARTHEX_BACKEND`, else `tinker` with a TINKER_API_KEY and `local` without one."""
    env = os.environ if environ is None else environ
    given = env.get(BACKEND_ENV, "").strip().lower()
    if not given:
        return "tinker" if env.get(TINKER_KEY_ENV) else "local"
    for kind in KINDS:
        if given == kind:
            if kind == "tinker" and not env.get(TINKER_KEY_ENV):
                raise InvalidInputError(
                    f"{BACKEND_ENV}=tinker needs the {TINKER_KEY_ENV} environment variable; "
                    f"set it, or use {BACKEND_ENV}=local to train on this machine"
                )
            return kind
    raise InvalidInputError(
        f"{BACKEND_ENV} must be one of {', '.join(KINDS)}, got {env[BACKEND_ENV]!r}"
    )


def base_model(
    kind: BackendKind, tinker_default: str, environ: Mapping[str, str] | None = None
) -> str:
    """`BASE_MODEL`, else the example's Tinker model on Tinker and `LOCAL_BASE_MODEL` here."""
    env = os.environ if environ is None else environ
    given = env.get(BASE_MODEL_ENV, "").strip()
    if given:
        return given
    return tinker_default if kind == "tinker" else LOCAL_BASE_MODEL


def make_backend(
    kind: BackendKind, *, path: str | None = None, lora_rank: int | None = None
) -> TrainingBackend:
    """The backend of `kind`; `path` is the models' base path (ART's `path=`), `lora_rank`
    the adapter's rank (each backend's default when None)."""
    if kind == "tinker":
        from ...adapters.tinker import TinkerBackend

        # loss_fn=None: each update's own loss (the examples' "cispo"), as ART's Tinker backend
        if lora_rank is None:
            return TinkerBackend(path, loss_fn=None)
        return TinkerBackend(path, lora_rank=lora_rank, loss_fn=None)
    from ...adapters.local import LocalBackend

    if lora_rank is None:
        return LocalBackend(path)
    return LocalBackend(path, lora_rank=lora_rank)


def env_int(name: str, default: int, environ: Mapping[str, str] | None = None) -> int:
    text = _env(name, environ)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidInputError(f"{name} must be an integer, got {text!r}") from None


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    text = _env(name, environ)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise InvalidInputError(f"{name} must be a number, got {text!r}") from None


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool | None:
    """ART's flags: "1" is on, anything else off; None when unset."""
    text = _env(name, environ)
    return None if text is None else text == "1"


def _env(name: str, environ: Mapping[str, str] | None) -> str | None:
    env = os.environ if environ is None else environ
    return env.get(name)


def run_example(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run an example's `main()` from a terminal: a setting it refuses (a missing key, an
    unknown backend) is one line on stderr and exit status 2, not a traceback."""
    try:
        asyncio.run(main())
    except InvalidInputError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
