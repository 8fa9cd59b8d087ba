"""``preemption_notice()`` in a train function: what its run's controller recorded, read from
the log by the worker's own store connection (the one its reports go through). A real store on both backends; the worker's session is made as a Ray worker makes it,
without Ray."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.waiting import wait_until
from wgstore.events.run import PreemptionNoticed, RunCreated
from wgstore.events.streams import run_stream
from wgstore.orchestration.train_context import TrainContext, WorkerSession
from wgstore.orchestration.train_fn.report_writer import ReportWriter


def _session(store: Any, run_id: str | None) -> WorkerSession:
    writer = ReportWriter(store.url, group_id="g2", world_rank=0, metadata={})
    writer.wait_ready(30)
    context = TrainContext(
        group_id="g2",
        world_rank=0,
        local_rank=0,
        node_rank=0,
        world_size=2,
        local_world_size=2,
        run_id=run_id,
    )
    return WorkerSession(context, writer)


def test_a_worker_sees_its_groups_preemption_notice_and_no_other(store: Any) -> None:
    store.append(run_stream("r1"), [RunCreated(run_id="r1")])
    session = _session(store, "r1")
    assert session.preemption() is None
    deadline = datetime(2027, 1, 1, tzinfo=UTC)
    store.append(
        run_stream("r1"),
        [
            PreemptionNoticed(group_id="g1", nodes={"n9": (0,)}),  # another attempt's
            PreemptionNoticed(group_id="g2", nodes={"n2": (1,)}, deadline=deadline),
        ],
    )
    wait_until(lambda: session.preemption() is not None, timeout_s=10, what="the notice")
    notice = session.preemption()
    assert (notice.group_id, notice.ranks, notice.deadline) == ("g2", (1,), deadline)


def test_a_group_on_its_own_has_no_run_to_be_preempted_in(store: Any) -> None:
    assert _session(store, None).preemption() is None
