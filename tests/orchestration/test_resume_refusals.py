"""``wgstore resume`` refuses, with one line saying why, and the supervisor's policy (both
backends, no Ray: every refusal comes before anything touches a cluster)."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.projections import run_scenarios
from wgstore.cli.app import app
from wgstore.events.leases import acquire_lease, lease_of
from wgstore.events.run import ControllerStarted, Pickled, TrainerRecorded
from wgstore.orchestration.errors import RunNotResumableError
from wgstore.orchestration.orphans.resume import resume_orphan
from wgstore.orchestration.orphans.supervise import Decision, plan, supervise


def _recorded_running(store: Any, run_id: str, trainer: TrainerRecorded | None) -> None:
    """A Ray Train run recorded with a lease, whose controller is gone (lease lapsed)."""
    run = run_scenarios.Run(
        store, run_id, name=f"{run_id}-name", scaling_config=run_scenarios.ScalingConfig()
    )
    run.add(ControllerStarted(controller_id="actor", host="h", pid=1, lease_s=5.0))
    if trainer is not None:
        run.add(trainer)
    run.to("SCHEDULING").to("RUNNING", f"{run_id}-g1")
    assert acquire_lease(store, run_id, "actor", 5.0, now=datetime.now(UTC) - timedelta(hours=1))


def _trainer(**changes: Any) -> TrainerRecorded:
    loop = b"not really a pickle"
    trainer = TrainerRecorded(
        trainer="ray.train.v2.api.data_parallel_trainer:DataParallelTrainer",
        train_loop="tests:loop",
        train_loop_pickle=Pickled(
            sha256=hashlib.sha256(loop).hexdigest(), size=len(loop), data=loop
        ),
    )
    return dataclasses.replace(trainer, **changes)


def test_a_finished_run_is_refused(store: Any) -> None:
    run_scenarios.finished_after_a_retry(store, "fin")
    with pytest.raises(RunNotResumableError, match=r"has ended \(FINISHED\): there is nothing"):
        resume_orphan(store, "fin")


def test_a_live_run_is_refused_naming_its_holder(store: Any) -> None:
    run_scenarios.running(store, "live")  # its controller's lease is live
    with pytest.raises(RunNotResumableError, match="is live: run live is held by c1"):
        resume_orphan(store, "live")
    assert lease_of(store, "live").holder == "c1"  # type: ignore[union-attr]


def test_a_recorded_run_that_cannot_be_resumed_says_why(store: Any) -> None:
    _recorded_running(store, "old", None)
    with pytest.raises(RunNotResumableError, match="no TrainerRecorded"):
        resume_orphan(store, "old")
    run_scenarios.from_ray_train_unpicklable(store, "rayx")
    with pytest.raises(RunNotResumableError, match="cannot be pickled"):
        resume_orphan(store, "rayx")


def test_a_train_loop_whose_bytes_no_longer_match_their_hash_is_refused(store: Any) -> None:
    forged = Pickled(sha256="0" * 64, size=3, data=b"abc")
    _recorded_running(store, "forged", _trainer(train_loop_pickle=forged))
    with pytest.raises(RunNotResumableError, match="no longer match their hash"):
        resume_orphan(store, "forged")
    assert lease_of(store, "forged").holder == "actor"  # type: ignore[union-attr]  # untouched


def test_the_command_refuses_with_one_line_and_takes_a_prefix(store_url: str, store: Any) -> None:
    run_scenarios.finished_after_a_retry(store, "fin-7c1e")
    result = CliRunner().invoke(app, ["resume", "fin-7", "--url", store_url])
    assert result.exit_code == 1
    assert "run fin-7c1e has ended (FINISHED)" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(app, ["resume", "nope", "--url", store_url])
    assert result.exit_code == 2 and "no run id starts with 'nope'" in result.output


class TestSupervisorPolicy:
    def test_it_resumes_only_orphaned_resumable_runs_within_its_policy(self, store: Any) -> None:
        run_scenarios.running(store, "live")  # lease live: not orphaned
        run_scenarios.running(store, "lost", lease_expired=True)
        run_scenarios.finished_after_a_retry(store, "fin")
        _recorded_running(store, "noway", None)
        decisions = {d.run_id: d for d in plan(store, max_resumes=3, runs=None)}
        assert set(decisions) == {"lost", "noway"}
        assert decisions["lost"].action == "resume"
        assert decisions["noway"] == Decision("noway", "skip", decisions["noway"].reason)
        assert "not resumable: no TrainerRecorded" in decisions["noway"].reason
        (named,) = [d for d in plan(store, max_resumes=3, runs="x*") if d.run_id == "lost"]
        assert named.action == "skip" and "does not match 'x*'" in named.reason
        assert all(d.action == "skip" for d in plan(store, max_resumes=0, runs=None))

    def test_two_supervisors_never_resume_one_run_twice(
        self, store_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from wgstore.events import EventStore
        from wgstore.orchestration.orphans import supervise as supervise_module

        with EventStore.open(store_url) as setup:
            run_scenarios.running(setup, "lost", lease_expired=True)
        started: list[tuple[str, str]] = []
        lock = threading.Lock()
        barrier = threading.Barrier(2)
        stops: dict[int, threading.Event] = {}

        def one_pass(*args: Any, **kwargs: Any) -> list[Decision]:
            # Each supervisor plans once. One that plans after the other took the lease finds
            # nothing to do (no decision to stop on): before, it kept planning until the
            # hand-off lease ran out (60 s) and resumed the run a second time.
            decisions = plan(*args, **kwargs)
            stops[threading.get_ident()].set()
            return decisions

        monkeypatch.setattr(supervise_module, "plan", one_pass)

        def one_supervisor() -> None:
            with EventStore.open(store_url) as own:
                stop = stops[threading.get_ident()] = threading.Event()

                def spawn(url: str, run_id: str, holder: str, epoch: int) -> None:
                    with lock:
                        started.append((run_id, holder))

                barrier.wait()
                supervise(own, stop=stop, interval_s=0.1, spawn=spawn)

        threads = [threading.Thread(target=one_supervisor) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), "a supervisor did not stop"
        assert len(started) == 1 and started[0][0] == "lost"
        with EventStore.open(store_url) as store:
            assert lease_of(store, "lost").holder == started[0][1]  # type: ignore[union-attr]


def test_wgstore_runs_shows_who_resumed_a_run_and_how_to_resume_an_orphan(
    store_url: str, store: Any
) -> None:
    from wgstore.events.run import RunResumed

    run_scenarios.running(store, "lost", lease_expired=True)
    shown = CliRunner().invoke(app, ["runs", "lost", "--url", store_url])
    assert shown.exit_code == 0, shown.output
    assert "wgstore resume lost" in " ".join(shown.output.split())
    store.append("run-lost", [RunResumed(by="supervisor 1f", reason="driver lost", attempt=2)])
    shown = CliRunner().invoke(app, ["runs", "lost", "--url", store_url])
    assert "by supervisor 1f at attempt 2 (driver lost)" in " ".join(shown.output.split())


@pytest.mark.postgres
def test_the_supervisor_rides_out_its_database_going_away(
    relayed: tuple[str, Any], pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The database is away for a while (a restart): the supervisor logs the problem once, not
    once a pass, keeps trying with backoff, and resumes an orphan once the database is back."""
    import logging

    from tests.waiting import wait_until
    from wgstore.events import EventStore

    relay_url, relay = relayed
    caplog.set_level(logging.WARNING, logger="wgstore.supervise")
    spawned: list[str] = []
    stop = threading.Event()
    with EventStore.open(relay_url) as store:
        watcher = threading.Thread(
            target=supervise,
            kwargs={"store": store, "stop": stop, "interval_s": 0.1,
                    "spawn": lambda _url, run_id, _holder, _epoch: spawned.append(run_id)},
        )  # fmt: skip
        watcher.start()
        try:
            relay.cut()
            wait_until(
                lambda: any("supervisor:" in r.getMessage() for r in caplog.records),
                timeout_s=60,
                what="the supervisor to notice the database is away",
            )
            with EventStore.open(pg_url) as direct:  # meanwhile a driver died
                run_scenarios.running(direct, "lost", lease_expired=True)
            relay.restore()
            wait_until(lambda: bool(spawned), timeout_s=120, what="the orphan resumed")
        finally:
            stop.set()
            watcher.join(60)
    assert spawned == ["lost"]
    problems = [r for r in caplog.records if "supervisor:" in r.getMessage()]
    assert 1 <= len(problems) <= 3  # one line a problem, not one a pass


def test_run_resume_refuses_options_that_would_shape_a_new_run(store_url: str, store: Any) -> None:
    """``--max-failures`` and friends given with ``--resume`` are refused, never ignored: the run
    goes on as its log says. Nothing is written and no Ray starts."""
    run_scenarios.running(store, "lost", lease_expired=True)
    version = store.stream_version("run-lost")
    result = CliRunner().invoke(
        app, ["run", "--resume", "lo", "--max-failures", "2", "--url", store_url]
    )
    assert result.exit_code == 2
    assert "--max-failures cannot change run lo" in " ".join(result.output.split())
    assert "drop it" in result.output
    result = CliRunner().invoke(
        app, ["run", "--resume", "lo", "--workers", "2", "--config", "{}", "--url", store_url]
    )
    assert result.exit_code == 2 and "--workers, --config cannot change" in result.output
    assert store.stream_version("run-lost") == version
