"""The pieces of sharded training that need no second process: planning the world from the
backend's arguments, a rank's place from its environment, how a step's rows are split over
ranks, the filler pass, and what travels through the store."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from torch._C._distributed_c10d import HashStore  # noqa: E402

from arthex.adapters.local.distributed.channel import (  # noqa: E402
    PART_BYTES,
    Channel,
    decode_batch,
    encode_batch,
)
from arthex.adapters.local.distributed.sharded import RankShare  # noqa: E402
from arthex.adapters.local.distributed.world import (  # noqa: E402
    World,
    WorldRequest,
    check_world_arguments,
    plan_world,
    rank_place,
)
from arthex.adapters.local.loss import LossSettings, policy_loss  # noqa: E402
from arthex.adapters.local.packing import pack  # noqa: E402
from arthex.adapters.local.step_plan import WholeBatch, part_of  # noqa: E402
from arthex.core.config import TrainConfig  # noqa: E402
from arthex.core.errors import InvalidInputError  # noqa: E402
from arthex.testing.builders import synthetic_groups  # noqa: E402

# --- the world -----------------------------------------------------------------------------


def plan(**kwargs: object) -> World | None:
    args: dict[str, object] = {"world_size": None, "devices": None, "device": None}
    args.update(kwargs)
    args.setdefault("environ", {})
    return plan_world(**args)  # type: ignore[arg-type]


def test_no_world_arguments_means_one_process() -> None:
    assert plan() is None
    assert WorldRequest().plan(device=None) is None


def test_world_size_uses_that_many_gpus_when_there_are_enough() -> None:
    world = plan(world_size=2, cuda_devices=4)
    assert world == World(size=2, devices=("cuda:0", "cuda:1"))
    assert world.comm_backend == "nccl" and not world.multi_node


def test_world_size_without_enough_gpus_runs_cpu_ranks_on_gloo() -> None:
    world = plan(world_size=3, cuda_devices=1)
    assert world is not None and world.devices == ("cpu",) * 3
    assert world.comm_backend == "gloo"


def test_device_cpu_keeps_ranks_on_the_cpu_even_with_gpus() -> None:
    world = plan(world_size=2, cuda_devices=8, device="cpu")
    assert world is not None and world.devices == ("cpu", "cpu")


def test_asking_for_more_gpus_than_there_are_names_the_count() -> None:
    with pytest.raises(InvalidInputError, match="needs 4 GPUs, but 2 are visible"):
        plan(world_size=4, cuda_devices=2, device="cuda")


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (["cpu", "cuda:0"], "all 'cpu' or all 'cuda:N'"),
        (["cuda:0", "cuda:0"], "each GPU once"),
        (["cuda", "cuda"], "each GPU once"),
        (["tpu:0"], "all 'cpu' or all 'cuda:N'"),
        ([], "devices is empty"),
    ],
)
def test_bad_device_lists_are_refused(devices: list[str], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        check_world_arguments(None, devices, None)


@pytest.mark.parametrize("size", [0, -1, True])
def test_world_size_must_be_a_positive_number(size: int) -> None:
    with pytest.raises(InvalidInputError, match="world_size"):
        check_world_arguments(size, None, None)


def test_a_string_is_not_a_device_list() -> None:
    with pytest.raises(InvalidInputError, match="the string 'cuda:0'"):
        WorldRequest(devices="cuda:0")


def test_world_size_below_the_local_devices_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="smaller than the 2 devices"):
        check_world_arguments(1, ["cuda:0", "cuda:1"], None)


def test_more_ranks_than_devices_needs_a_meeting_point() -> None:
    with pytest.raises(InvalidInputError, match="master_addr= and master_port="):
        plan(world_size=4, devices=["cpu", "cpu"])


def test_the_meeting_point_comes_from_arguments_or_the_environment() -> None:
    given = plan(world_size=4, devices=["cuda:0"], master_addr="10.0.0.1", master_port=29500)
    assert given == World(size=4, devices=("cuda:0",), master_addr="10.0.0.1", master_port=29500)
    assert given.multi_node and given.local_ranks == 1
    env = {"MASTER_ADDR": "node0", "MASTER_PORT": "29600"}
    from_env = plan(world_size=2, devices=["cpu"], environ=env)
    assert from_env is not None
    assert (from_env.master_addr, from_env.master_port) == ("node0", 29600)


def test_the_heartbeat_timeout_of_remote_ranks_can_be_set() -> None:
    env = {"MASTER_ADDR": "node0", "MASTER_PORT": "29600", "ARTHEX_RANK_HEARTBEAT_TIMEOUT": "4.5"}
    world = plan(world_size=2, devices=["cpu"], environ=env)
    assert world is not None and world.heartbeat_timeout_s == 4.5
    with pytest.raises(InvalidInputError, match="ARTHEX_RANK_HEARTBEAT_TIMEOUT='0'"):
        plan(world_size=2, devices=["cpu"], environ={**env, "ARTHEX_RANK_HEARTBEAT_TIMEOUT": "0"})


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_a_bad_master_port_is_refused(port: str) -> None:
    env = {"MASTER_ADDR": "node0", "MASTER_PORT": port}
    with pytest.raises(InvalidInputError, match="not a TCP port"):
        plan(world_size=2, devices=["cpu"], environ=env)


# --- a rank's place ------------------------------------------------------------------------

STANDARD = {"MASTER_ADDR": "node0", "MASTER_PORT": "29500", "WORLD_SIZE": "4", "RANK": "2"}


def test_a_rank_reads_torchs_standard_variables() -> None:
    place = rank_place({**STANDARD, "LOCAL_RANK": "0"})
    assert (place.rank, place.world_size, place.local_rank) == (2, 4, 0)
    assert (place.master_addr, place.master_port, place.device) == ("node0", 29500, None)


def test_arthex_variables_win_and_the_offset_shifts_the_rank() -> None:
    # what torchrun on a second node looks like: its own RANK/WORLD_SIZE/MASTER_*, plus ours
    env = {
        **STANDARD,
        "RANK": "1",
        "WORLD_SIZE": "2",
        "ARTHEX_MASTER_ADDR": "frontend",
        "ARTHEX_MASTER_PORT": "29400",
        "ARTHEX_WORLD_SIZE": "4",
        "ARTHEX_RANK_OFFSET": "2",
        "ARTHEX_DEVICE": "cuda:1",
    }
    place = rank_place(env)
    assert (place.rank, place.world_size, place.master_addr, place.master_port) == (
        3,
        4,
        "frontend",
        29400,
    )
    assert place.device == "cuda:1"


def test_a_rank_without_its_variables_names_them() -> None:
    with pytest.raises(InvalidInputError, match="lacks WORLD_SIZE, RANK"):
        rank_place({"MASTER_ADDR": "a", "MASTER_PORT": "1"})


def test_a_rank_outside_the_world_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="RANK=4 is outside WORLD_SIZE=4"):
        rank_place({**STANDARD, "RANK": "4"})


# --- splitting a step's rows ---------------------------------------------------------------


def plans(rows: list[int], micro: int, size: int, *, whole: bool) -> list[list[list[int]]]:
    return [
        RankShare(r, size, torch.device("cpu")).plan(rows, micro, whole_micro_batches=whole)
        for r in range(size)
    ]


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("rows", [1, 2, 7, 16])
@pytest.mark.parametrize("micro", [1, 3, 64])
def test_ranks_split_rows_into_contiguous_blocks_with_equal_pass_counts(
    size: int, rows: int, micro: int
) -> None:
    chunk = list(range(10, 10 + rows))
    per_rank = plans(chunk, micro, size, whole=False)
    trained = [row for plan in per_rank for micro_rows in plan for row in micro_rows]
    assert trained == chunk, "every row once, in order, rank by rank"
    assert len({len(plan) for plan in per_rank}) == 1, "every rank runs as many passes"
    sizes = [sum(len(m) for m in plan) for plan in per_rank]
    assert max(sizes) - min(sizes) <= 1
    assert all(len(m) <= micro for plan in per_rank for m in plan)
    busiest = max(math.ceil(n / micro) for n in sizes)
    assert len(per_rank[0]) == busiest, "no pass more than the busiest rank needs"


@pytest.mark.parametrize("size", [1, 2, 3])
@pytest.mark.parametrize("rows", [1, 5, 9])
def test_with_the_kl_penalty_ranks_keep_the_single_process_micro_batches(
    size: int, rows: int
) -> None:
    chunk = list(range(rows))
    single = WholeBatch().plan(chunk, 2, whole_micro_batches=True)
    per_rank = plans(chunk, 2, size, whole=True)
    kept = [m for plan in per_rank for m in plan if m]
    assert kept == single
    assert len({len(plan) for plan in per_rank}) == 1


def test_the_filler_pass_adds_nothing_to_the_gradient() -> None:
    config = TrainConfig(learning_rate=1e-3)
    batch = pack(synthetic_groups(2, 4), config, max_length=128, pad_token_id=0)
    filler = part_of(batch, [], [3, 4])
    assert filler.num_rows == 1 and not bool(filler.mask.any())
    logits = torch.randn(1, batch.seq_len, 64, requires_grad=True)
    loss, stats = policy_loss(logits, filler, LossSettings(), normalizer=10.0)
    loss.backward()  # type: ignore[no-untyped-call]
    assert float(loss.detach()) == 0.0 and stats.tokens == 0
    assert logits.grad is not None and not bool(logits.grad.any())


# --- the channel ---------------------------------------------------------------------------


def test_blobs_larger_than_a_store_message_travel_in_parts() -> None:
    channel = Channel(HashStore(), generation=3)
    data = bytes(range(256)) * (PART_BYTES // 256 * 2 + 7)
    channel.put_blob("cmd/0/blob", data)
    assert channel.get_blob("cmd/0/blob") == data
    assert int(channel.store.get("cmd/0/blob")) == 3
    channel.delete_blob("cmd/0/blob")
    assert not channel.has("cmd/0/blob") and not channel.has("cmd/0/blob/0")


def test_generations_do_not_see_each_others_keys() -> None:
    store = HashStore()
    Channel(store, 1).put_json("cmd/0", {"op": "stop"})
    assert not Channel(store, 2).has("cmd/0")
    assert Channel(store, 1).get_json("cmd/0") == {"op": "stop"}


def test_a_packed_batch_survives_the_trip_to_the_ranks() -> None:
    config = TrainConfig(learning_rate=1e-3)
    batch = pack(synthetic_groups(2, 4), config, max_length=128, pad_token_id=0, shuffle_seed=1)
    back = decode_batch(encode_batch(batch))
    names = ("tokens", "mask", "old_logprobs", "advantages", "weights", "position_ids")
    for name in (*names, "segment_ids"):
        a, b = getattr(back, name), getattr(batch, name)
        assert a.dtype == b.dtype and a.shape == b.shape, name
        assert torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)), name
    assert (back.num_groups, back.num_groups_trainable, back.num_dropped_too_long) == (
        batch.num_groups,
        batch.num_groups_trainable,
        batch.num_dropped_too_long,
    )
