"""Which ranks train a run, where they run, and where they meet: checked before any process starts.

Torch-free on purpose: the backend validates its arguments at construction, before importing
torch, and the node launcher on other machines reads the same description.

The frontend (the process that built the LocalBackend) always runs ranks 0..local-1 on its own
machine, so rank 0 can read and write the run's checkpoint folder; ranks local..size-1, if
any, join from other machines (see `launch.py`). Everyone meets at the frontend's store,
`master_addr:master_port`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from typing import Literal

import attrs

from ....core.errors import InvalidInputError

CommBackend = Literal["gloo", "nccl"]

LOOPBACK = "127.0.0.1"
DEFAULT_HEARTBEAT_TIMEOUT_S = 15.0
DEFAULT_JOIN_TIMEOUT_S = 600.0
# Standard torch.distributed variables first; the ARTHEX_ ones win, so a launcher that sets
# the standard ones to its own rendezvous (torchrun) can still point ranks at the frontend.
_ENV_PREFIXES = ("ARTHEX_", "")


@attrs.frozen
class World:
    """`size` ranks in all; this machine runs ranks 0..len(devices)-1, one per device."""

    size: int
    devices: tuple[str, ...]
    master_addr: str = LOOPBACK
    master_port: int = 0  # 0: a free port, chosen when the store starts (one machine only)
    heartbeat_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    join_timeout_s: float = DEFAULT_JOIN_TIMEOUT_S  # for ranks on other machines

    @property
    def local_ranks(self) -> int:
        return len(self.devices)

    @property
    def multi_node(self) -> bool:
        return self.size > self.local_ranks

    @property
    def comm_backend(self) -> CommBackend:
        """NCCL between GPUs, gloo between CPU processes (ranks never mix the two)."""
        return "nccl" if self.devices[0].startswith("cuda") else "gloo"


def _device_tuple(devices: Sequence[str] | None) -> tuple[str, ...] | None:
    if devices is None:
        return None
    if isinstance(devices, str):
        raise InvalidInputError(
            f"devices must be a list of device names, one rank each, got the string {devices!r}"
        )
    return tuple(str(d) for d in devices)


@attrs.frozen
class WorldRequest:
    """A LocalBackend's world arguments, checked at construction (before torch is imported)
    and planned into a World when a run registers."""

    world_size: int | None = None
    devices: tuple[str, ...] | None = attrs.field(default=None, converter=_device_tuple)
    master_addr: str | None = None
    master_port: int | None = None

    def __attrs_post_init__(self) -> None:
        check_world_arguments(self.world_size, self.devices, self.master_port)

    @property
    def requested(self) -> bool:
        """Whether runs train on rank processes (False: in the frontend's process)."""
        return self.world_size is not None or self.devices is not None

    def plan(self, device: str | None) -> World | None:
        """The world on this machine's GPUs (None: train in the frontend's process)."""
        if not self.requested:
            return None
        import torch

        return plan_world(
            world_size=self.world_size,
            devices=self.devices,
            device=device,
            master_addr=self.master_addr,
            master_port=self.master_port,
            cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        )


def check_world_arguments(
    world_size: int | None, devices: Sequence[str] | None, master_port: int | None
) -> None:
    """What can be checked before torch is imported (a LocalBackend's constructor)."""
    if world_size is not None and (isinstance(world_size, bool) or world_size < 1):
        raise InvalidInputError(f"world_size must be a whole number >= 1, got {world_size!r}")
    if devices is not None:
        local = tuple(str(d) for d in devices)
        if not local:
            raise InvalidInputError("devices is empty; list one device per local rank")
        _check_devices(local)
        if world_size is not None and world_size < len(local):
            raise InvalidInputError(
                f"world_size={world_size} is smaller than the {len(local)} devices given; "
                "world_size counts every rank on every node"
            )
    if master_port is not None:
        _port(str(master_port))


def plan_world(
    *,
    world_size: int | None,
    devices: Sequence[str] | None,
    device: str | None,
    master_addr: str | None = None,
    master_port: int | None = None,
    cuda_devices: int = 0,
    environ: Mapping[str, str] | None = None,
) -> World | None:
    """The world a LocalBackend's arguments ask for, or None for one in-process trainer.

    `devices` lists this machine's rank devices (one rank each); `world_size` alone means that
    many ranks here, on GPUs 0..N-1 when there are that many (`cuda_devices`) and `device` does
    not say "cpu", else on the CPU. A `world_size` above the local ranks is a multi-node world:
    the meeting point comes from `master_addr`/`master_port` or the environment's
    MASTER_ADDR/MASTER_PORT, and must be given."""
    env = os.environ if environ is None else environ
    if world_size is None and devices is None:
        return None
    check_world_arguments(world_size, devices, master_port)
    if devices is not None:
        local = tuple(str(d) for d in devices)
    else:
        assert world_size is not None
        on_cpu = device is not None and device.startswith("cpu")
        if not on_cpu and cuda_devices >= world_size:
            local = tuple(f"cuda:{i}" for i in range(world_size))
        elif not on_cpu and device is not None and device.startswith("cuda"):
            raise InvalidInputError(
                f"world_size={world_size} on {device!r} needs {world_size} GPUs, but "
                f"{cuda_devices} are visible; pass devices=[...] (one rank each) for this "
                "machine and run the remaining ranks on other nodes"
            )
        else:
            local = ("cpu",) * world_size
    size = world_size if world_size is not None else len(local)
    if size == len(local):
        return World(size=size, devices=local)
    addr = master_addr or _env(env, "MASTER_ADDR")
    port_text = str(master_port) if master_port is not None else _env(env, "MASTER_PORT")
    if not addr or not port_text:
        raise InvalidInputError(
            f"world_size={size} with {len(local)} ranks on this machine needs a meeting point "
            "for the other nodes: pass master_addr= and master_port= (or set MASTER_ADDR and "
            "MASTER_PORT), an address and port of this machine the other nodes can reach"
        )
    return World(
        size=size,
        devices=local,
        master_addr=addr,
        master_port=_port(port_text),
        heartbeat_timeout_s=_seconds(env, "ARTHEX_RANK_HEARTBEAT_TIMEOUT"),
    )


def _check_devices(devices: tuple[str, ...]) -> None:
    kinds = {d.split(":")[0] for d in devices}
    if not kinds <= {"cpu", "cuda"} or len(kinds) != 1:
        raise InvalidInputError(
            f"devices {list(devices)} must be all 'cpu' or all 'cuda:N' (one rank per entry)"
        )
    gpus = [d for d in devices if d.startswith("cuda")]
    if len(set(gpus)) != len(gpus) or any(d == "cuda" for d in gpus):
        raise InvalidInputError(
            f"devices {list(devices)} must name each GPU once, as 'cuda:N'; two ranks cannot "
            "share one GPU"
        )


@attrs.frozen
class RankPlace:
    """Where one rank process stands: read from its environment when it starts."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int
    device: str | None  # None: choose (cuda:LOCAL_RANK on a GPU machine, else cpu)


def rank_place(environ: Mapping[str, str]) -> RankPlace:
    """A rank's place from the standard variables (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
    LOCAL_RANK), overridden by ARTHEX_ ones; ARTHEX_RANK_OFFSET shifts RANK, so a launcher that
    numbers one node's ranks from 0 can start the ranks of a later node."""
    missing = [
        k for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK") if not _env(environ, k)
    ]
    if missing:
        raise InvalidInputError(
            f"the rank's environment lacks {', '.join(missing)}; a rank process needs "
            "MASTER_ADDR, MASTER_PORT (the frontend's store), WORLD_SIZE and RANK"
        )
    offset = int(_env(environ, "RANK_OFFSET") or 0)
    rank = int(_env(environ, "RANK")) + offset
    size = int(_env(environ, "WORLD_SIZE"))
    local = int(_env(environ, "LOCAL_RANK") or rank)
    if not 0 <= rank < size:
        raise InvalidInputError(f"RANK={rank} is outside WORLD_SIZE={size}")
    return RankPlace(
        rank=rank,
        world_size=size,
        local_rank=local,
        master_addr=_env(environ, "MASTER_ADDR"),
        master_port=_port(_env(environ, "MASTER_PORT")),
        device=environ.get("ARTHEX_DEVICE") or None,
    )


def _env(environ: Mapping[str, str], name: str) -> str:
    for prefix in _ENV_PREFIXES:
        value = environ.get(prefix + name)
        if value:
            return value
    return ""


def _seconds(environ: Mapping[str, str], name: str) -> float:
    """A timeout from the environment (seconds > 0), or the default."""
    text = environ.get(name)
    if not text:
        return DEFAULT_HEARTBEAT_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InvalidInputError(f"{name}={text!r} must be a number of seconds > 0")
    return value


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise InvalidInputError(f"master port {text!r} is not a TCP port (1..65535)")
    return port


def listen_socket(addr: str, port: int) -> socket.socket:
    """A listening socket for the store, bound to `addr` only (loopback for one machine)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((addr, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise InvalidInputError(
            f"cannot listen on {addr}:{port} for the trainer ranks: {exc}; pass a master_addr "
            "of this machine and a free master_port"
        ) from exc
    return sock
