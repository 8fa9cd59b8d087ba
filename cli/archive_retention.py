"""``wgstore archive --drop-archived-after AGE [--yes]``: a retention bound for the archive.

Lists the batches archived before ``AGE`` ago whose Parquet files are still there; with
``--yes`` (and not ``--dry-run``) deletes those files through
:func:`wgstore.projections.archiving.drop_archived_files`, which records
``ArchiveFilesDropped`` first and keeps every manifest, so ``wgstore verify`` still proves what
was there and that it was removed on purpose.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from wgstore.cli.common import UsageProblem, format_time, out_console, parse_time
from wgstore.events import EventStore

__all__ = ["drop_archived", "show_dropped"]


def drop_archived(store: EventStore, age: str, *, delete: bool) -> dict[str, Any]:
    """The batches past ``age`` (``--drop-archived-after``), their files deleted when
    ``delete``; as JSON-ready data."""
    from wgstore.projections.archiving import drop_archived_files

    try:
        before = parse_time(age)
    except UsageProblem as problem:
        raise UsageProblem(f"--drop-archived-after: {problem}") from None
    dropped = drop_archived_files(store, archived_before=before, dry_run=not delete)
    return {
        "archived_before": before.isoformat(),
        "deleted": delete,
        "batches": [
            {
                "batch_id": d.batch_id,
                "archived_at": d.archived_at.isoformat(),
                "files": list(d.files),
                "bytes": d.bytes,
            }
            for d in dropped
        ],
        "bytes": sum(d.bytes for d in dropped),
    }


def show_dropped(outcome: dict[str, Any]) -> None:
    """One line per batch and what was (or would be) done."""
    console = out_console()
    batches = outcome["batches"]
    if not batches:
        console.print(
            f"--drop-archived-after: no batch archived before {format_time(datetime.fromisoformat(outcome['archived_before']))} "
            "has files left",
            markup=False,
        )
        return
    for batch in batches:
        console.print(
            f"  batch {batch['batch_id']} archived {format_time(datetime.fromisoformat(batch['archived_at']))}: "
            f"{len(batch['files'])} file(s), {batch['bytes']:,} bytes",
            markup=False,
        )
    if outcome["deleted"]:
        console.print(
            f"dropped the files of {len(batches)} batch(es) ({outcome['bytes']:,} bytes); their "
            "manifests stay (wgstore verify still proves what was there)",
            markup=False,
        )
    else:
        console.print(
            f"would drop the files of {len(batches)} batch(es) ({outcome['bytes']:,} bytes): "
            "give --yes to delete them (their runs can no longer be restored)",
            markup=False,
        )
