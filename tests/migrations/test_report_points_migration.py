"""Migration 0011 fills ``wg_report_series`` / ``wg_report_points`` of a store whose read models
were caught up before it, in SQL, with the rows the projector writes: no refold, and the
projector goes on numbering from there."""

from __future__ import annotations

import sys
from pathlib import Path

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "projections"))

from projection_builders import Stream, append_stream

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerReported
from wgstore.migrations.runner import downgrade, upgrade
from wgstore.projections import catch_up_read_models, rebuild_read_models
from wgstore.projections.projector import read_model_rows


def _group(group_id: str, reports: int) -> Stream:
    stream = Stream(group_id, num_workers=2)
    stream.running().polled()
    for step in range(1, reports + 1):
        for rank in (0, 1):
            extra = {"eval": step // 2} if step % 3 == rank else {}  # ints, some reports only
            loss: object = "nan" if step == 4 and rank == 0 else 1 / step  # text once
            stream.reported(rank, loss=loss, ok=step % 2 == 0, note="x", **extra)
    return stream


def _rows(store: EventStore) -> object:
    with store.engine.connect() as connection:
        return read_model_rows(connection)


def _points(store: EventStore) -> object:
    with store.engine.connect() as connection:
        return {
            table: sorted(
                tuple(row) for row in connection.execute(sa.text(f"SELECT * FROM {table}"))
            )
            for table in ("wg_report_series", "wg_report_points")
        }


def test_upgrading_to_0011_backfills_the_points_the_projector_writes(store_url: str) -> None:
    with EventStore.open(store_url) as store:
        first, second = _group("g1", 40), _group("g2", 7)
        append_stream(store, first)
        append_stream(store, second)
        catch_up_read_models(store, batch_size=50)
        projected, points = _rows(store), _points(store)
        with store.engine.begin() as connection:
            downgrade(connection, "0010_committed_checkpoints")  # as a store caught up before
            assert not sa.inspect(connection).has_table("wg_report_points")
            upgrade(connection, "0011_report_points")
        assert _points(store) == points  # the backfill wrote what the projector wrote
        with store.engine.begin() as connection:
            upgrade(connection)  # 0012 empties the read models: the projector folds again
        catch_up_read_models(store)
        assert _rows(store) == projected
        more = [
            WorkerReported(world_rank=rank, index=41, metrics={"loss": 0.01, "eval": 5})
            for rank in (0, 1)
        ]
        store.append(first.stream_id, more)
        assert catch_up_read_models(store) == 2  # numbered on from the counts
        caught_up = _rows(store)
        rebuild_read_models(store)
        assert _rows(store) == caught_up
