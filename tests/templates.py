"""Fresh databases already at the latest revision, copied from a template.

Building each test's fresh database was a third of the suite's setup time when ``EventStore.open``
ran every migration (an empty SQLite file ~110 ms, an empty Postgres schema ~290 ms on the
2-core machine); it now builds an empty database in one step (``migrations/fresh.py``), and a
copy is cheaper still. Each test process opens one template per backend, on first use, and
hands out copies:

- **SQLite**: the template file, copied (~3 ms). It holds what opening an empty file leaves and
  nothing else (the schema, WAL mode in its header, the revision row).
- **Postgres**: the template schema's ``pg_dump`` (DDL and its one data row, the revision), the
  template's name replaced, run as one script (~80 ms). The template schema is dropped as soon
  as it is dumped. Without a usable ``pg_dump`` (none on the PATH, or older than the server) a
  copy is made by ``EventStore.open`` of the empty schema: slower, never different.

tests/test_templates.py checks that a copy is the store ``EventStore.open`` makes of an empty
database, on both backends; tests/migrations/test_catalog.py that this equals a store built by
running every migration.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

__all__ = ["admin_execute", "cleanup", "copy_sqlite", "postgres_script", "restore_postgres"]

ADMIN_APPLICATION = "wgstore-tests-admin"
"""The admin connection's ``application_name`` (tests that kill backends pick theirs by name)."""

_lock = threading.Lock()
_admin_lock = threading.Lock()
_admin_connection: Any = None  # one per test process, reused: a connect is ~5-8 ms
_sqlite_template: Path | None = None
_pg_script: str | None = None  # with _PLACEHOLDER for the schema's name; "" when unavailable
_PLACEHOLDER = "wgtemplate_schema_name"


def _conninfo(pg_url: str) -> str:
    return pg_url.split("?", 1)[0].replace("postgresql+psycopg://", "postgresql://")


def _schema_url(pg_url: str, schema: str) -> str:
    sep = "&" if "?" in pg_url else "?"
    return f"{pg_url}{sep}options=-csearch_path%3D{schema}"


def admin_execute(pg_url: str, sql: str) -> None:
    """Run ``sql`` (one or more statements, no parameters) as the admin, in autocommit.

    On one connection kept for the test process; a connection found dead (a server restart, a
    terminated backend) is replaced once.
    """
    global _admin_connection
    import psycopg

    with _admin_lock:
        for attempt in (1, 2):
            if _admin_connection is None or _admin_connection.closed:
                _admin_connection = psycopg.connect(
                    _conninfo(pg_url), autocommit=True, application_name=ADMIN_APPLICATION
                )
            try:
                _admin_connection.execute(sql)
                return
            except psycopg.OperationalError:
                _admin_connection.close()
                _admin_connection = None
                if attempt == 2:
                    raise


def copy_sqlite(path: Path) -> None:
    """Put an empty wgstore database at head at ``path`` (a file that must not exist yet)."""
    global _sqlite_template
    with _lock:
        if _sqlite_template is None:
            from wgstore.events import EventStore

            folder = Path(tempfile.mkdtemp(prefix="wgs-template-"))
            template = folder / "template.db"
            EventStore.open(f"sqlite:///{template}").close()
            leftovers = sorted(p.name for p in folder.iterdir() if p.name != "template.db")
            assert not leftovers, f"the closed template left {leftovers}: copy them too"
            _sqlite_template = template
    shutil.copyfile(_sqlite_template, path)


def postgres_script(pg_url: str) -> str:
    """The SQL that makes an empty schema at head named :data:`_PLACEHOLDER`; "" if none."""
    global _pg_script
    with _lock:
        if _pg_script is None:
            _pg_script = _dump_template(pg_url)
        return _pg_script


def _dump_template(pg_url: str) -> str:
    from wgstore.events import EventStore

    pg_dump = shutil.which("pg_dump")
    if pg_dump is None:
        return ""
    template = f"wgtmpl_{uuid.uuid4().hex[:12]}"
    admin_execute(pg_url, f"CREATE SCHEMA {template}")
    try:
        EventStore.open(_schema_url(pg_url, template)).close()
        dumped = subprocess.run(
            [pg_dump, "--inserts", f"--schema={template}", _conninfo(pg_url)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        admin_execute(pg_url, f"DROP SCHEMA {template} CASCADE")
    if dumped.returncode != 0:  # e.g. a pg_dump older than the server
        return ""
    # psql's meta-commands (\restrict ... of newer pg_dumps) are not SQL
    lines = [line for line in dumped.stdout.splitlines() if not line.startswith("\\")]
    return "\n".join(lines).replace(template, _PLACEHOLDER)


def restore_postgres(pg_url: str, schema: str) -> None:
    """Create ``schema``, at head and empty, in the database of ``pg_url``."""
    script = postgres_script(pg_url)
    if script:
        admin_execute(pg_url, script.replace(_PLACEHOLDER, schema))
        return
    from wgstore.events import EventStore

    admin_execute(pg_url, f"CREATE SCHEMA {schema}")
    EventStore.open(_schema_url(pg_url, schema)).close()


def cleanup() -> None:
    """Remove the SQLite template's folder and close the admin connection (at the end of the
    test session)."""
    global _sqlite_template, _admin_connection
    if _admin_connection is not None:
        _admin_connection.close()
        _admin_connection = None
    if _sqlite_template is not None:
        shutil.rmtree(_sqlite_template.parent, ignore_errors=True)
        _sqlite_template = None
