"""The frontend's side of a rank group: host the store, start and watch the ranks, send commands.

Every wait for a rank's reply also watches the ranks, so a failure ends the call instead of
hanging it:

- a local rank process that exits (a signal, an exception, anything) is seen at once;
- a rank that raised writes its error to the store first (see worker.py);
- a rank on another machine that stops bumping its heartbeat for `heartbeat_timeout_s` is
  taken for dead (its machine or the network is gone).

On the first sign, the supervisor waits up to a second for the rest of the story (the rank that
died first is the culprit; the others usually fail a moment later in a collective), then kills
every local rank (its whole process group) and reaps it, sets `abort` for the ranks elsewhere,
and raises a BackendError naming the culprit rank and its last error. Nothing is left running,
and the next `start` begins a new generation from scratch.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from torch._C._distributed_c10d import TCPStore

from ....core.errors import BackendError
from .channel import Channel
from .failures import Evidence, RankFailure, culprit, log_tail, never_joined, signal_text
from .processes import RankProcess, kill_group, let_go, start_rank
from .world import LOOPBACK, World, listen_socket

SETTLE_S = 1.0
STACKS_TIMEOUT_S = 3.0  # how long a rank may take to write its stacks
STOP_GRACE_S = 10.0


class Supervisor:
    """Starts generations of ranks for one run and carries commands to them."""

    def __init__(self, world: World, config: Mapping[str, Any], log_dir: Path) -> None:
        self.world = world
        self._config = dict(config)
        self._log_dir = log_dir
        self._lock = threading.RLock()
        self._store: Any = None
        self._port = world.master_port
        self._generation = 0
        self._channel: Channel | None = None
        self._procs: dict[int, RankProcess] = {}
        self._failure: RankFailure | None = None
        self._next_command = 0
        self._open: tuple[int, int] | None = None  # (command, replies read) still in flight
        self._beats: dict[int, tuple[int, float]] = {}
        self._beats_checked = 0.0
        self._started = 0.0
        self._joined = False

    @property
    def running(self) -> bool:
        return self._channel is not None and self._failure is None

    @property
    def failed(self) -> bool:
        """The current generation ended with a rank failure (until the next `start`)."""
        return self._failure is not None

    def rank_pids(self) -> dict[int, int]:
        """The local rank processes of the current generation (rank -> pid)."""
        return {rank: proc.pid for rank, proc in self._procs.items()}

    # --- starting -----------------------------------------------------------------------

    def start(self) -> None:
        """A new generation: announce it, then start this machine's ranks."""
        with self._lock:
            if self._channel is not None:
                self.stop()
            if self._store is None:
                self._store = self._host_store()
            self._generation += 1
            channel = Channel(self._store, self._generation)
            channel.put_json("config", {**self._config, "backend": self.world.comm_backend})
            self._store.set("generation", str(self._generation))
            self._channel = channel
            self._failure = None
            self._next_command = 0
            self._open = None
            self._beats = {}
            self._started = time.monotonic()
            self._joined = False
            try:
                for local, device in enumerate(self.world.devices):
                    self._procs[local] = self._spawn(local, device)
            except BaseException:
                # half a world would wait for the missing ranks forever
                self._kill_all()
                self._abort(channel)
                self._channel = None
                raise

    def _host_store(self) -> Any:
        sock = listen_socket(self.world.master_addr, self.world.master_port)
        self._port = sock.getsockname()[1]
        fd = sock.detach()  # the store owns the descriptor from here on
        return TCPStore(
            self.world.master_addr,
            self._port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=60),
            master_listen_fd=fd,
            use_libuv=False,
        )

    def _spawn(self, rank: int, device: str) -> RankProcess:
        world = self.world
        env = dict(os.environ)
        place = {
            "MASTER_ADDR": world.master_addr,
            "MASTER_PORT": str(self._port),
            "WORLD_SIZE": str(world.size),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
        }
        env.update(place)
        env.update({f"ARTHEX_{key}": value for key, value in place.items()})
        env.update(
            {
                "ARTHEX_RANK_OFFSET": "0",
                "ARTHEX_DEVICE": device,
                "ARTHEX_GENERATION": str(self._generation),
                "ARTHEX_PARENT_PID": str(os.getpid()),
            }
        )
        # CPU ranks share the cores, unless the frontend's environment says otherwise
        env.setdefault("ARTHEX_THREADS", str(max(1, (os.cpu_count() or 1) // world.local_ranks)))
        if world.master_addr == LOOPBACK and sys.platform == "linux":
            # one machine: keep the ranks' own connections on loopback too
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            env.setdefault("NCCL_SOCKET_IFNAME", "lo")
        env.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # logs hold errors, not bars
        env.setdefault("TQDM_DISABLE", "1")
        self._log_dir.mkdir(parents=True, exist_ok=True)
        stacks = self._stacks_path(rank)
        stacks.unlink(missing_ok=True)  # the rank writes its ready line when it can dump
        env["ARTHEX_STACKS_FILE"] = str(stacks)
        return start_rank(env, self._log_path(rank), self)

    def _log_path(self, rank: int) -> Path:
        return self._log_dir / f"g{self._generation}-rank{rank}.log"

    def _stacks_path(self, rank: int) -> Path:
        return self._log_dir / f"g{self._generation}-rank{rank}.stacks"

    # --- stacks for a hang report ----------------------------------------------------------

    def rank_stacks(self, timeout_s: float = STACKS_TIMEOUT_S) -> str | None:
        """Every local rank's thread stacks: each rank registered Python's faulthandler on
        SIGUSR1 (worker.py), writing to its stacks file; a rank that has not written its ready
        line yet is not signalled (SIGUSR1 would end it). None when no rank is running. Safe
        to call from another thread while a command is in flight; it takes no lock."""
        procs = dict(self._procs)
        if not procs or not hasattr(signal, "SIGUSR1"):
            return None
        parts = []
        for rank, proc in sorted(procs.items()):
            head = f"-- rank {rank}, pid {proc.pid} --"
            path = self._stacks_path(rank)
            try:
                before = path.stat().st_size
            except FileNotFoundError:
                before = 0
            if before == 0 or proc.poll() is not None:
                parts.append(f"{head}\n(not running, or not ready to dump its stacks yet)")
                continue
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except ProcessLookupError:
                parts.append(f"{head}\n(gone)")
                continue
            parts.append(f"{head}\n{_new_text(path, before, timeout_s)}")
        return "\n".join(parts) + "\n"

    # --- commands -----------------------------------------------------------------------

    def call(
        self, op: str, args: Mapping[str, Any] | None = None, blob: bytes | None = None
    ) -> Iterator[tuple[str, Any]]:
        """Send one command; yield rank 0's replies, ("step", data)... then ("done", data)."""
        with self._lock:
            channel = self._require()
            self._drain(channel)
            n = self._next_command
            self._next_command += 1
            if blob is not None:
                channel.put_blob(f"cmd/{n}/blob", blob)
            channel.put_json(f"cmd/{n}", {"op": op, "args": dict(args or {})})
            self._open = (n, 0)
        while True:
            with self._lock:
                if self._open is None or self._open[0] != n:
                    return  # drained by a later command after the caller stopped reading
                reply = self._next_reply(self._require())
            yield reply["kind"], reply["data"]
            if reply["kind"] == "done":
                return

    def run(self, op: str, args: Mapping[str, Any] | None = None) -> Any:
        """Send a command with no step replies and return its result."""
        result: Any = None
        for kind, data in self.call(op, args):
            if kind == "done":
                result = data
        return result

    def _next_reply(self, channel: Channel) -> Any:
        assert self._open is not None
        n, i = self._open
        key = f"out/{n}/{i}"
        reply = channel.wait_json(key, self.check)
        channel.delete(key)
        self._open = (n, i + 1)
        if reply["kind"] == "done":
            self._open = None
            channel.delete(f"cmd/{n}")
            channel.delete_blob(f"cmd/{n}/blob")
        return reply

    def _drain(self, channel: Channel) -> None:
        """Read what is left of a command whose caller stopped reading."""
        while self._open is not None:
            self._next_reply(channel)

    def _require(self) -> Channel:
        if self._failure is not None:
            raise self._failure.error(self.world.size)
        if self._channel is None:
            raise BackendError("the trainer ranks are not running; start them first")
        return self._channel

    # --- watching -----------------------------------------------------------------------

    def check(self) -> None:
        """Raise BackendError (after stopping every rank) if any rank has failed."""
        if self._failure is not None:
            raise self._failure.error(self.world.size)
        channel = self._channel
        if channel is None:
            return
        exited = any(proc.poll() is not None for proc in self._procs.values())
        if exited or channel.count("errors") > 0 or self._stale_ranks(channel):
            self._fail(channel)
        late = self._missing_ranks(channel)
        if late:
            self._kill_all()
            self._abort(channel)
            self._failure = never_joined(late, self.world, self._port)
            raise self._failure.error(self.world.size)

    def _missing_ranks(self, channel: Channel) -> list[int]:
        """Ranks on other machines that have not joined within the join timeout."""
        if not self.world.multi_node or self._joined:
            return []
        if time.monotonic() - self._started < self.world.join_timeout_s:
            return []
        missing = [
            rank
            for rank in range(self.world.local_ranks, self.world.size)
            if channel.count(f"joined/{rank}") == 0
        ]
        self._joined = not missing
        return missing

    def _stale_ranks(self, channel: Channel) -> list[int]:
        """Ranks on other machines whose heartbeat stood still for too long (checked once a
        second; local ranks are watched through their processes)."""
        now = time.monotonic()
        if now - self._beats_checked < 1.0:
            return []
        self._beats_checked = now
        stale = []
        for rank in range(self.world.local_ranks, self.world.size):
            beat = channel.count(f"hb/{rank}")
            if beat == 0:
                continue  # not joined yet
            seen, since = self._beats.get(rank, (-1, now))
            if beat != seen:
                self._beats[rank] = (beat, now)
            elif now - since > self.world.heartbeat_timeout_s:
                stale.append(rank)
        return stale

    def _fail(self, channel: Channel) -> None:
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.02)
        evidence = self._evidence(channel)
        self._kill_all()
        self._abort(channel)
        self._failure = culprit(evidence)
        raise self._failure.error(self.world.size)

    def _evidence(self, channel: Channel) -> list[Evidence]:
        """Every rank's side of the failure: its report, its exit, its heartbeat."""
        found: list[Evidence] = []
        reported: set[int] = set()
        for rank in range(self.world.size):
            key = f"err/{rank}"
            if channel.has(key):
                report = channel.get_json(key)
                reported.add(rank)
                log = self._log_path(rank) if rank in self._procs else None
                where = f" on {report.get('host')} (pid {report.get('pid')})"
                failure = RankFailure(rank, "failed" + where, str(report.get("error")), log)
                found.append(Evidence(4 if report.get("peer") else 1, report["time"], failure))
        now = time.time()
        for rank, proc in self._procs.items():
            code = proc.poll()
            if code is None or rank in reported:
                continue
            log = self._log_path(rank)
            if code < 0:
                found.append(
                    Evidence(0, now, RankFailure(rank, signal_text(-code), log_tail(log), log))
                )
            else:
                what = f"exited with status {code} (pid {proc.pid})"
                found.append(Evidence(2, now, RankFailure(rank, what, log_tail(log), log)))
        for rank in self._stale_ranks_now(channel):
            what = (
                f"stopped answering: no heartbeat for {self.world.heartbeat_timeout_s:.0f} s "
                "(is its machine or the network down?)"
            )
            found.append(Evidence(3, now, RankFailure(rank, what, "", None)))
        if not found:
            found.append(
                Evidence(5, now, RankFailure(0, "stopped for an unknown reason", "", None))
            )
        return found

    def _stale_ranks_now(self, channel: Channel) -> list[int]:
        self._beats_checked = 0.0
        return self._stale_ranks(channel)

    # --- stopping -----------------------------------------------------------------------

    def stop(self) -> None:
        """End the generation: ask the ranks to stop, then make sure they have."""
        with self._lock:
            channel = self._channel
            if channel is None:
                return
            if self._failure is None and self._open is None:
                # (a command still running is not waited for: its caller has left)
                try:
                    self._graceful_stop(channel)
                except BackendError:
                    pass  # already reported; everything is killed below either way
            self._kill_all()
            self._abort(channel)
            self._channel = None
            self._open = None

    def _graceful_stop(self, channel: Channel) -> None:
        deadline = time.monotonic() + STOP_GRACE_S

        def check() -> None:
            self.check()
            if time.monotonic() > deadline:
                raise BackendError("the trainer ranks did not stop in time; they were killed")

        n = self._next_command
        self._next_command += 1
        channel.put_json(f"cmd/{n}", {"op": "stop", "args": {}})
        channel.wait(f"out/{n}/0", check)
        while time.monotonic() < deadline and any(p.poll() is None for p in self._procs.values()):
            time.sleep(0.02)

    def _kill_all(self) -> None:
        for proc in self._procs.values():
            if proc.poll() is None:
                kill_group(proc.pid)
        for proc in self._procs.values():
            proc.wait()
        self._procs = {}

    def _abort(self, channel: Channel) -> None:
        try:
            channel.store.set("abort", "1")
        except Exception:  # the store is ours and local; nothing sensible to do if it is not
            pass

    def close(self) -> None:
        """Stop the ranks and the store, and let go of the zygote (the last group to let go
        closes it): nothing this group started is left running."""
        with self._lock:
            try:
                self.stop()
            finally:
                let_go(self)
            if self._store is not None:
                self._store.set("closed", "1")
                self._store = None


def _new_text(path: Path, offset: int, timeout_s: float) -> str:
    """What was appended to `path` after `offset`, once it stops growing (or at the deadline)."""
    deadline = time.monotonic() + timeout_s
    size = offset
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = path.stat().st_size
        if now > offset and now == size:
            break  # grew, then held still for a poll
        size = now
    with path.open("rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    return text or f"(no answer within {timeout_s:g}s)"
