"""Append cost with and without an HMAC key, both backends (issue 21: the MAC over every field).

    python bench/mac_append.py [N] [postgres URL]

Single-event appends of a small ``WorkerReported`` to one stream, then 10-event batches; prints
microseconds per event, the best of 9 rounds of N (default 300). Run it on the code before and after a change to compare.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid

from wgstore.events import EventStore
from wgstore.events.worker_group import WorkerReported

KEY = b"bench key"
_ROUNDS = 9


def _run(url: str, key: bytes | None, n: int) -> tuple[float, float, float]:
    with EventStore.open(
        url, hmac_key=key, synchronous="NORMAL" if url.startswith("sqlite") else None
    ) as store:
        sid = f"bench-{uuid.uuid4()}"
        event = WorkerReported(world_rank=0, index=1, metrics={"loss": 0.25, "step": 12})
        for _ in range(50):  # warm up
            store.append(sid, [event])
        singles, batches, cpu = [], [], []
        for _ in range(_ROUNDS):  # the best round: the machine may be shared
            start, used = time.perf_counter(), time.process_time()
            for _ in range(n):
                store.append(sid, [event])
            singles.append((time.perf_counter() - start) / n * 1e6)
            cpu.append((time.process_time() - used) / n * 1e6)
            start = time.perf_counter()
            for _ in range(n // 10):
                store.append(sid, [event] * 10)
            batches.append((time.perf_counter() - start) / (n // 10 * 10) * 1e6)
    return min(singles), min(batches), min(cpu)


def _admin(url: str, sql: str) -> None:
    import psycopg

    with psycopg.connect(
        url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True
    ) as c:
        c.execute(sql)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    pg = sys.argv[2] if len(sys.argv) > 2 else "postgresql+psycopg://postgres@127.0.0.1:5432/test"
    with tempfile.TemporaryDirectory() as folder:
        for name, base in (("sqlite", f"sqlite:///{folder}/bench"), ("postgres", pg)):
            for key in (None, KEY):
                url = f"{base}-{len(key or b'')}.db"
                schema = f"bench_mac_{uuid.uuid4().hex[:8]}"
                if name == "postgres":  # a schema of its own, dropped afterwards
                    _admin(pg, f"CREATE SCHEMA {schema}")
                    url = f"{pg}?options=-csearch_path%3D{schema}"
                try:
                    single, batch, cpu = _run(url, key, n)
                finally:
                    if name == "postgres":
                        _admin(pg, f"DROP SCHEMA {schema} CASCADE")
                label = "key" if key else "no key"
                print(
                    f"{name:8} {label:6}  single {single:7.1f} us/event  "
                    f"batch-10 {batch:6.1f} us/event  client CPU {cpu:6.1f} us/single append"
                )


if __name__ == "__main__":
    main()
