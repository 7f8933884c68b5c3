"""ART's `art.utils.lifecycle`, under arthex.

Each of ART's names here is arthex's own object, or raises a one-line error saying what
to use instead (the table: arthex/art/_table.py; docs/migrating-from-art.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from arthex.art._table import module_attributes

if TYPE_CHECKING:
    from arthex.utils.process_lifecycle import (
        PROCESS_SHUTDOWN_TIMEOUT_SECONDS as PROCESS_SHUTDOWN_TIMEOUT_SECONDS,
    )
    from arthex.utils.process_lifecycle import ChildProcessSupervisor as ChildProcessSupervisor
    from arthex.utils.process_lifecycle import ServiceLifecycle as ServiceLifecycle
    from arthex.utils.process_lifecycle import cleanup_after_failure as cleanup_after_failure
    from arthex.utils.process_lifecycle import complete_task as complete_task
    from arthex.utils.process_lifecycle import complete_to_thread as complete_to_thread
    from arthex.utils.process_lifecycle import consume_future_exception as consume_future_exception
    from arthex.utils.process_lifecycle import kill_process_group as kill_process_group
    from arthex.utils.process_lifecycle import managed_process_cmd as managed_process_cmd
    from arthex.utils.process_lifecycle import (
        process_shutdown_sweep_grace as process_shutdown_sweep_grace,
    )
    from arthex.utils.process_lifecycle import process_shutdown_timeout as process_shutdown_timeout
    from arthex.utils.process_lifecycle import (
        terminate_asyncio_process_group as terminate_asyncio_process_group,
    )
    from arthex.utils.process_lifecycle import (
        terminate_popen_process_group as terminate_popen_process_group,
    )

    __all__ = [
        "PROCESS_SHUTDOWN_TIMEOUT_SECONDS",
        "ChildProcessSupervisor",
        "ServiceLifecycle",
        "cleanup_after_failure",
        "complete_task",
        "complete_to_thread",
        "consume_future_exception",
        "kill_process_group",
        "managed_process_cmd",
        "process_shutdown_sweep_grace",
        "process_shutdown_timeout",
        "terminate_asyncio_process_group",
        "terminate_popen_process_group",
    ]
else:
    __getattr__, __dir__, __all__ = module_attributes(__name__)
