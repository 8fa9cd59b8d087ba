"""Fixtures shared by the whole suite: real SQLite files, a real PostgreSQL, one local Ray.

PostgreSQL: ``WGSTORE_TEST_PG_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``).
Each test gets its own schema, dropped afterwards. When the server is unreachable the Postgres
tests are skipped on a developer machine, but fail loudly when ``CI=true``: CI never skips them.

Ray: one local instance per test session (``ray_session``), started on first use.
"""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests import templates
from tests.relay import relayed  # noqa: F401  (a fixture: Postgres behind a relay tests can cut)

# Database-backed property tests have no per-example deadline; CI runs them derandomized, so a
# red CI always reproduces (a developer's run keeps exploring new examples).
settings.register_profile("wgstore", deadline=None)
settings.register_profile("ci", deadline=None, derandomize=True, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI", "").lower() == "true" else "wgstore")

PG_URL = os.environ.get("WGSTORE_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

# Under pytest-xdist (`make test` runs three workers) each worker starts a local Ray of its own.
# Ray keeps a machine-wide "current cluster" file and `session_latest` link under its temp
# folder, and a bare `ray.init()` (in a test's subprocess: `wgstore run`, a Ray Train driver)
# joins the cluster that file names; a folder per worker keeps each worker's Ray, and what its
# subprocesses start, apart from the others'.
# (Short: Ray's socket paths must fit in 107 bytes. Per test run too: two suites at once on one
# machine must not share it either. Removed when the worker's session ends.)
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
_RAY_TMPDIR: str | None = None
if XDIST_WORKER and "RAY_TMPDIR" not in os.environ:
    _run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "")[:8]
    _RAY_TMPDIR = os.environ["RAY_TMPDIR"] = f"/tmp/wgs-{_run}-{XDIST_WORKER}"

# Every Ray the suite starts (the session's, a test's Cluster, a subprocess driver's) runs a log
# monitor that globs its logs folder for new worker files every 0.1 s while it holds fewer than
# RAY_LOG_MONITOR_MANY_FILES_THRESHOLD of them. A session's folder gathers hundreds, so the log
# monitors took 7 % of the machine's CPU in a full run (121 of 1,757 CPU-seconds over 15 min,
# sampled per process on 2026-12-07). Looking once a second finds a new worker's file within a
# second: the tests that read worker output forwarded to a driver (`wgstore run`'s "(rank 0
# pid=...)" lines, a resumed run's) read it from the file's start, so nothing is lost.
os.environ.setdefault("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "0")
os.environ.setdefault("LOG_NAME_UPDATE_INTERVAL_S", "1")

# The CLI's tables are as wide as COLUMNS says when stdout is a pipe (200 when unset); xdist's
# workers get COLUMNS=80 from execnet, and a developer's shell may export its own. The tests
# read the tables as the CLI prints them when nothing narrows them.
for _terminal_size in ("COLUMNS", "LINES"):
    os.environ.pop(_terminal_size, None)
IN_CI = os.environ.get("CI", "").lower() == "true"

_pg_problem: str | None = None
_pg_checked = False


def _postgres_problem() -> str | None:
    """Why Postgres cannot be used, or None when it can (checked once per session)."""
    global _pg_checked, _pg_problem
    if not _pg_checked:
        _pg_checked = True
        try:
            import psycopg

            conninfo = PG_URL.replace("postgresql+psycopg://", "postgresql://")
            with psycopg.connect(conninfo, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except Exception as error:  # noqa: BLE001 - any failure means "unreachable"
            _pg_problem = f"PostgreSQL at {PG_URL} is unreachable: {error}"
    return _pg_problem


def require_postgres() -> None:
    """Skip (developer machine) or fail (CI) when Postgres is unreachable."""
    problem = _postgres_problem()
    if problem is None:
        return
    if IN_CI:
        pytest.fail(f"{problem}. CI must run the Postgres tests: start the server.", pytrace=False)
    pytest.skip(problem)


def _admin_execute(sql: str) -> None:
    """Run ``sql`` as the admin (tests/templates.py's connection of this process)."""
    templates.admin_execute(PG_URL, sql)


def make_pg_schema_url(schema: str) -> str:
    """A URL whose connections use ``schema`` first on the search path."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A URL of a fresh SQLite file."""
    return f"sqlite:///{tmp_path / 'wgstore.db'}"


def _fresh_schema_url() -> Iterator[str]:
    require_postgres()
    schema = f"wgtest_{uuid.uuid4().hex[:12]}"
    _admin_execute(f"CREATE SCHEMA {schema}")
    try:
        yield make_pg_schema_url(schema)
    finally:
        _drop_schema(schema)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A URL of a fresh, empty schema in the test database, dropped after the test."""
    yield from _fresh_schema_url()


@pytest.fixture
def pg_url_2() -> Iterator[str]:
    """Another fresh, empty schema in the same database (two stores side by side)."""
    yield from _fresh_schema_url()


def _drop_schema(schema: str) -> None:
    """Drop ``schema`` and the read-only role ``wgstore sql`` made for it, if it made one."""
    from sqlalchemy.engine import make_url

    from wgstore.events.sql_reader import reader_role_name

    role = reader_role_name(make_url(PG_URL).database or "", schema)
    _admin_execute(
        f"DROP SCHEMA {schema} CASCADE; "
        f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN "
        f"DROP OWNED BY {role}; DROP ROLE {role}; END IF; END $$"
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database URL, once per backend, already migrated to the latest revision.

    A copy of a template this worker migrated once (tests/templates.py): a test's first
    ``EventStore.open`` then finds the schema at head instead of running every migration
    (SQLite ~110 ms, Postgres ~290 ms a store on this machine, a third of the suite's setup).
    ``sqlite_url`` and ``pg_url`` stay empty, for the tests of what a fresh database gets.
    """
    if request.param == "sqlite":
        path = tmp_path / "wgstore.db"
        templates.copy_sqlite(path)
        yield f"sqlite:///{path}"
    else:
        require_postgres()
        schema = f"wgtest_{uuid.uuid4().hex[:12]}"
        templates.restore_postgres(PG_URL, schema)
        try:
            yield make_pg_schema_url(schema)
        finally:
            _drop_schema(schema)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of an empty database (no wgstore schema yet), once per backend."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'wgstore.db'}"
    else:
        yield request.getfixturevalue("pg_url")


@pytest.fixture
def store(store_url: str) -> Iterator[object]:
    """An open, migrated ``EventStore`` on each backend."""
    from wgstore.events import EventStore

    event_store = EventStore.open(store_url)
    try:
        yield event_store
    finally:
        event_store.close()


# A shell runs a background job (`make test &`) with SIGINT ignored, and Python keeps an ignored
# SIGINT: the Ctrl-C tests then sent signals nothing saw (their subprocesses inherit the ignore),
# and failed only when the suite ran in the background. Every test process takes Ctrl-C as a
# terminal's foreground job does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
_SIGINT_HANDLER = signal.getsignal(signal.SIGINT)


@pytest.fixture(autouse=True)
def _sigint_handler_restored() -> Iterator[None]:
    """Every test starts with the SIGINT handler the session started with.

    Ray Train's ``DataParallelTrainer.fit()`` (ray.train.v2, 2.60) installs a SIGINT handler of
    its own and never restores it; a Ctrl-C test that ran after a Ray Train test in the same
    process had its SIGINT turned into Ray's "gracefully aborting" and ``sys.exit(0)``.
    """
    yield
    if signal.getsignal(signal.SIGINT) is not _SIGINT_HANDLER:
        signal.signal(signal.SIGINT, _SIGINT_HANDLER)


@pytest.fixture(scope="session")
def ray_session() -> Iterator[None]:
    """One local Ray instance for the whole test session."""
    import time

    import ray

    # Ray waits a fixed 30 s (not configurable) for its raylet to register; on a loaded machine
    # (load 40+ on 2 cores) three tries in a row missed it, and every Ray test of the session
    # errored. Tried again for up to 5 minutes: the start is right, the machine is slow.
    deadline = time.monotonic() + 300
    while not ray.is_initialized():
        try:
            ray.init(
                address="local",  # never join another worker's (or a user's) running cluster
                num_cpus=4,
                include_dashboard=False,
                log_to_driver=False,
                namespace="wgstore-tests",
            )
        except Exception as error:
            if "timed out during startup" not in str(error) or time.monotonic() > deadline:
                raise
            ray.shutdown()
    yield
    ray.shutdown()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove this worker's Ray temp folder (its Ray has stopped with the session) and the
    SQLite template."""
    templates.cleanup()
    if _RAY_TMPDIR is not None:
        import shutil

        shutil.rmtree(_RAY_TMPDIR, ignore_errors=True)


def _runs_long(item: pytest.Item) -> bool:
    """Whether ``item`` starts Ray work or says it is slow (most of the suite's time)."""
    fixtures = getattr(item, "fixturenames", ())
    return (
        "ray_session" in fixtures
        or item.get_closest_marker("ray") is not None
        or item.get_closest_marker("slow") is not None
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, the long tests go first (in their order), the short ones after.

    `make test` hands whole files to the workers (``--dist loadfile``) in the order their
    first test is collected, so the files with long tests go out first and the many files of
    short tests fill the end: a long file taken last kept one worker busy while the other had
    nothing left. (Every worker sorts its collection alike, as xdist requires; a run without
    workers keeps the files' order.)
    """
    if XDIST_WORKER:
        items.sort(key=lambda item: not _runs_long(item))
