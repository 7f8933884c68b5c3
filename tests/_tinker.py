"""The Tinker test files' shared emulator: the unmodified SDK's server on the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from arthex.emulators.tinker import TinkerEmulator


def running_emulator(
    tiny: str, key: str, factory: pytest.TempPathFactory
) -> Iterator[TinkerEmulator]:
    """The emulator on `tiny` answering `key`, its state in a new folder, the SDK's telemetry
    off while it runs, one torch thread (the tests share two cores); stopped at the end."""
    from arthex.emulators.tinker import TinkerEmulator

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TINKER_TELEMETRY", "0")
        state = factory.mktemp("tinker-state")
        with TinkerEmulator(tiny, api_key=key, state_dir=str(state), torch_threads=1) as running:
            yield running
