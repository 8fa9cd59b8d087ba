"""Worker order and ranks as Ray Train assigns them: pure, no Ray."""

from __future__ import annotations

from wgstore.orchestration.ranks import ActorMetadata, assign_ranks, sort_workers


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
