"""The results databases as files that readers share: who holds them, how a new one replaces the
old, what survives a failed aggregation, and errors in one line.

DuckDB keeps a write-ahead log beside a database opened read-write (`<file>.wal`) and locks the
file: a process that holds it read-write locks everybody else out, read-only holders share it.
Snakemake deletes a job's outputs before the job runs and again when it fails. So:

- the file users open (results/illusion.duckdb) is not the rule's declared output: `aggregate`
  and `competency_gaps` declare its stamp, `<name>.published.json`, which says when the file
  was published. Snakemake deletes the stamp, never the database: the previous file stays in
  place, readable under its own name, until the new one replaces it, and downstream rules depend
  on the stamp, which changes only when a new database is published. A stamp whose database is
  gone is stale (drop_stale_stamp, run when the workflow is read), so the database is rebuilt;
- `aggregate` and `competency_gaps` stop before any work when another process holds the
  database read-write;
- a new database is published by one rename, after any stale `<file>.wal` beside it is removed
  (a log of the replaced file would make the new one unreadable), then its stamp is written;
- a failed build leaves the previous database and `.failed-<name>.json` beside it (when, what,
  which log); the CLI says that the last build failed and that it reads the database from
  before.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import contextmanager
from pathlib import Path


class DatabaseError(RuntimeError):
    """A results database cannot be written or read; the message is one line that says what
    to do."""


def wal_path(path: str | Path) -> Path:
    """DuckDB's write-ahead log of a database file."""
    return Path(f"{path}.wal")


STAMP_SUFFIX = ".published.json"


def stamp_path(path: str | Path) -> Path:
    """The declared Snakemake output of the rule that builds the database `path`:
    results/illusion.duckdb -> results/illusion.published.json."""
    path = Path(path)
    return path.with_name(f"{path.stem}{STAMP_SUFFIX}")


def database_of(stamp: str | Path) -> Path:
    """The database a stamp stands for (the inverse of stamp_path)."""
    stamp = Path(stamp)
    if not stamp.name.endswith(STAMP_SUFFIX):
        raise ValueError(f"{stamp} is not a database stamp (*{STAMP_SUFFIX})")
    return stamp.with_name(stamp.name[: -len(STAMP_SUFFIX)] + ".duckdb")


def drop_stale_stamp(path: str | Path) -> bool:
    """Remove the stamp of the database `path` when the database itself is gone (deleted by
    hand), so that Snakemake builds it again; True when one was removed."""
    stamp = stamp_path(path)
    if stamp.is_file() and not Path(path).is_file():
        stamp.unlink(missing_ok=True)
        return True
    return False


def write_stamp(path: Path) -> None:
    """Write the stamp of the database `path`, just published (atomically)."""
    from benchmark_illusion.io import atomic_path  # polars: not for the Snakefile's imports

    st = path.stat()
    info = {
        "database": path.name,
        "published_at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.st_mtime)),
        "bytes": st.st_size,
    }
    with atomic_path(stamp_path(path), ".json") as tmp:
        Path(tmp).write_text(json.dumps(info, indent=1) + "\n")


def failure_marker(path: str | Path) -> Path:
    """Left beside a database whose last build failed."""
    path = Path(path)
    return path.with_name(f".failed-{path.name}.json")


def _lock_holder(message: str) -> str | None:
    """The holder DuckDB names in a lock conflict ('... held in /usr/bin/python3 (PID 123)')."""
    if "lock" not in message.lower():
        return None
    m = re.search(r"held in (.+?\(PID \d+\))", message)
    return m.group(1) if m else "another process"


def writer_holding(path: str | Path) -> str | None:
    """The process that holds `path` read-write, as DuckDB names it; None when none does (no
    file, nobody, or only read-only holders)."""
    import duckdb

    if not Path(path).is_file():
        return None
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error as e:
        return _lock_holder(str(e))
    return None


def check_free(path: str | Path, log: str) -> None:
    """Raise DatabaseError when another process holds the database at `path` read-write:
    replacing it then would lose what that process writes."""
    holder = writer_holding(path)
    if holder:
        raise DatabaseError(
            f"{path} is open read-write in {holder}: close it there, or open it with "
            f"duckdb.connect(..., read_only=True), then run again (nothing was changed; "
            f"log: {log})"
        )


@contextmanager
def replace_database(path: str | Path, log: str = "logs/aggregate.log", before=None):
    """Yield a temporary path to build the new database in; publish it as `path` when the block
    succeeds, then its stamp (stamp_path: the rule's declared output). check_free and then
    `before()` (the caller's checks of its inputs) run first, before any work. On any failure
    `path` is left as it was and the failure marker records what happened."""
    from benchmark_illusion.io import atomic_path

    path = Path(path)
    marker = failure_marker(path)
    try:
        check_free(path, log)
        if before is not None:
            before()
        with atomic_path(path, ".duckdb") as tmp:
            yield tmp
            check_free(path, log)  # a reader that opened it read-write meanwhile
            wal_path(path).unlink(missing_ok=True)
    except BaseException as e:
        marker.write_text(
            json.dumps(
                {
                    "database": str(path),
                    "failed_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                    "error": str(e).splitlines()[0][:500] if str(e) else type(e).__name__,
                    "log": log,
                },
                indent=1,
            )
        )
        raise
    write_stamp(path)
    marker.unlink(missing_ok=True)


def for_reading(path: str | Path) -> tuple[Path, list[str]]:
    """The file a reader should open for the database `path`, and notes for the user: the builds
    that failed since it was published (their markers). Raises DatabaseError when there is none
    (never built, or deleted: Snakemake builds it again)."""
    path = Path(path)
    notes = []
    if not path.is_file():
        raise DatabaseError(f"no results database at {path}; run `make run` (or snakemake) first")
    # a marker stays until a build of its database succeeds, so the database read here is the
    # one from before the failure (by time stamps it need not look so: a process that held the
    # file read-write writes to it again when it closes)
    for marker in sorted(path.parent.glob(".failed-*.json")):
        try:
            info = json.loads(marker.read_text())
        except (OSError, ValueError):
            continue
        notes.append(
            f"the last build of {info.get('database')} failed at {info.get('failed_at')}: "
            f"{info.get('error')} (see {info.get('log')}); this database is the one before"
        )
    return path, notes


# which rule writes a Parquet log, by its folder (the --forcerun hint of a damaged one)
WRITERS = {
    "generations": "evaluate",
    "pool": "evaluate_pool",
    "selected": "select_items",
    "items": "build_items",
}


def check_parquet(paths) -> None:
    """Raise DatabaseError naming the first Parquet log whose footer cannot be read (a truncated
    or overwritten file), with the command that writes it again. Reads only each file's footer."""
    import polars as pl

    for p in paths:
        try:
            pl.read_parquet_schema(p)
        except Exception as e:  # noqa: BLE001 - polars raises several kinds for a bad file
            parts = Path(p).parts
            rule = next((WRITERS[x] for x in parts if x in WRITERS), None)
            by = f" (rule {rule})" if rule else ""
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DatabaseError(
                f"damaged Parquet log {p}: {first}. Write it again{by} with "
                f"`snakemake --forcerun {p}`, then aggregate again"
            ) from None


def explain(error: Exception, path: str | Path) -> str:
    """One line for a DuckDB error met when opening `path`, with what to do."""
    text = str(error)
    first = text.splitlines()[0] if text else type(error).__name__
    holder = _lock_holder(text)
    if holder:
        return (
            f"{path} is open read-write in {holder}: close it there, or open it with "
            "duckdb.connect(..., read_only=True)"
        )
    if "WAL" in text or "write-ahead" in text.lower():
        return (
            f"{path} cannot be read with the write-ahead log beside it ({wal_path(path)}), left "
            f"by a process that wrote to an older version of the file: delete {wal_path(path)} "
            "(what that process wrote is lost) and run again"
        )
    if "not a valid DuckDB" in text or "Corrupt" in text or "corrupt" in text:
        return f"{path} is damaged ({first}): rebuild it with `snakemake --forcerun aggregate`"
    return f"{path}: {first}"
