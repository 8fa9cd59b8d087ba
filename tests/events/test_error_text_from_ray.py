"""Error text that comes from real Ray is stored without terminal colour codes.

Ray colours the actor name in its task errors (``\\x1b[36mray::WgstoreWorker...``); the HTML
report showed those codes as boxes. ``ErrorInfo`` strips them whoever makes it.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from tests.orchestration.conftest import REPO, make_context
from wgstore.events import EventStore

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_a_start_failure_raised_on_a_ray_actor_is_stored_without_escape_codes(
    store: EventStore, ray_session: None
) -> None:
    from wgstore.orchestration import RayExecutor, WorkerGroup, WorkerGroupStartError

    executor = RayExecutor(store, extra_sys_path=[str(REPO)]).start()
    try:
        with pytest.raises(WorkerGroupStartError) as caught:
            WorkerGroup.create(
                store,
                make_context(1, train_fn="examples.no_such_module:train_fn"),
                executor=executor,
            )
    finally:
        executor.stop()
    cause: Any = caught.value.cause
    assert "ray::WgstoreWorker.init_train_context()" in cause.traceback  # Ray's text, kept
    assert "\x1b" not in cause.traceback + cause.message
    data = "data::text" if store.is_postgres else "data"
    with store.engine.connect() as connection:
        stored = [
            row[0]
            for row in connection.execute(
                sa.text(f"SELECT {data} FROM wg_events WHERE event_type = 'WorkerGroupStartFailed'")
            )
        ]
    assert len(stored) == 1
    assert "ray::WgstoreWorker.init_train_context()" in stored[0]
    assert "\\u001b" not in stored[0].lower() and "\x1b" not in stored[0]
