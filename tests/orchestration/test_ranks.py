"""Worker order and ranks as Ray Train assigns them: pure, no Ray."""

from __future__ import annotations

import dataclasses

import pytest

from wgstore.orchestration.runtimes.ranks import ActorMetadata, assign_ranks, sort_workers


def meta(name: str, node: str, ip: str, gpus: tuple[str, ...] = ()) -> ActorMetadata:
    return ActorMetadata(
        actor_name=name, actor_id=name, node_id=node, node_ip=ip, pid=1, gpu_ids=gpus
    )


def test_workers_are_grouped_by_node_in_first_seen_order_then_sorted_by_lowest_gpu() -> None:
    # Ray's own docstring example: [w0(node 1, gpu 1), w1(node 0, gpu 0), w2(node 1, gpu 0), w3(node 0, gpu 1)]
    workers = [
        meta("w0", "1", "ip1", ("1",)),
        meta("w1", "0", "ip0", ("0",)),
        meta("w2", "1", "ip1", ("0",)),
        meta("w3", "0", "ip0", ("1",)),
    ]
    assert [w.actor_name for w in sort_workers(workers)] == ["w2", "w0", "w1", "w3"]


def test_a_given_first_node_goes_first_and_gpu_ids_compare_as_numbers() -> None:
    workers = [
        meta("a", "x", "ip1", ("10",)),
        meta("b", "y", "ip2", ("2",)),
        meta("c", "x", "ip1", ("9",)),
    ]
    assert [w.actor_name for w in sort_workers(workers, first_node_id="y")] == ["b", "c", "a"]


def test_ranks_count_local_workers_per_node_ip_and_number_the_nodes() -> None:
    workers = [
        meta("a", "n1", "10.0.0.1"),
        meta("b", "n2", "10.0.0.2"),
        meta("c", "n1", "10.0.0.1"),
        meta("d", "n2", "10.0.0.2"),
        meta("e", "n1", "10.0.0.1"),
    ]
    infos = assign_ranks(workers)
    table = [
        (i.actor_name, i.world_rank, i.local_rank, i.local_world_size, i.node_rank, i.world_size)
        for i in infos
    ]
    assert table == [
        ("a", 0, 0, 3, 0, 5),
        ("c", 1, 1, 3, 0, 5),
        ("e", 2, 2, 3, 0, 5),
        ("b", 3, 0, 2, 1, 5),
        ("d", 4, 1, 2, 1, 5),
    ]


def test_workers_without_gpus_keep_their_arrival_order() -> None:
    workers = [meta(f"w{i}", "n", "ip") for i in range(4)]
    assert [i.actor_name for i in assign_ranks(workers)] == ["w0", "w1", "w2", "w3"]


def test_non_numeric_gpu_ids_compare_as_strings() -> None:
    workers = [
        meta("b", "n", "ip", ("GPU-b",)),
        meta("a", "n", "ip", ("GPU-c", "GPU-a")),
        meta("c", "n", "ip", ("GPU-bb",)),
    ]
    assert [w.actor_name for w in sort_workers(workers)] == ["a", "b", "c"]
    assert assign_ranks(workers)[0].gpu_ids == ("GPU-c", "GPU-a")  # kept as given


def test_a_worker_without_gpus_sorts_as_gpu_zero() -> None:
    workers = [
        meta("none", "n", "ip"),
        meta("gpu0", "n", "ip", ("0",)),
        meta("gpu1", "n", "ip", ("1",)),
    ]
    assert [w.actor_name for w in sort_workers(workers)] == ["none", "gpu0", "gpu1"]
    workers = [meta("gpu1", "n", "ip", ("1",)), meta("none", "n", "ip")]
    assert [w.actor_name for w in sort_workers(workers)] == ["none", "gpu1"]


def test_actor_metadata_is_a_frozen_keyword_only_value_with_defaults() -> None:
    info = ActorMetadata(actor_name="a", actor_id="i", node_id="n", node_ip="ip", pid=7)
    assert (info.hostname, info.gpu_ids) == ("", ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.pid = 8  # type: ignore[misc]
    assert not hasattr(info, "__dict__")
    with pytest.raises(TypeError):
        ActorMetadata("a", "i", "n", "ip", 7)  # type: ignore[misc]
