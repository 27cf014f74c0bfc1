"""The results database survives its readers (benchmark_illusion.metrics.dbfile): it is never
a rule's declared output, so it stays in place, under its own name, while Snakemake deletes the
rule's output and rebuilds it; a process holding it read-write stops a rebuild before any work, a
stale write-ahead log never makes the new file unreadable, a failed build leaves the previous file
readable and says so, a damaged Parquet log is named with the command that writes it again, and
the CLI's errors are one line. Real DuckDB files, real second processes and the real workflow's
dry runs."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import polars as pl
import pytest
import yaml

from benchmark_illusion.metrics import dbfile
from config.test_config import minimal

ROOT = Path(__file__).resolve().parents[2]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

HOLD = """
import duckdb, sys, time
from pathlib import Path
path, mode, ready, done = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
con = duckdb.connect(path, read_only=(mode == "ro"))
if mode == "rw":
    con.execute("CREATE TABLE mine AS SELECT 42 AS answer")  # a notebook's own table
ready.write_text("ready")
while not done.exists():
    time.sleep(0.05)
print(con.execute("SELECT count(*) FROM results").fetchone()[0])
"""


class Holder:
    """A second process that opens `path` (read-write or read-only) and keeps it open until
    release(); started() returns once it has opened the file (it writes a file then)."""

    def __init__(self, path: Path, mode: str, tmp: Path):
        self.ready, self.done = tmp / f"ready-{mode}", tmp / f"done-{mode}"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(path), mode, str(self.ready), str(self.done)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while not self.ready.exists():
            assert self.proc.poll() is None, self.proc.stderr.read()
            assert time.monotonic() < deadline, "the holder did not open the database"
            time.sleep(0.05)

    def release(self) -> str:
        self.done.write_text("done")
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return out.strip()


def make_db(path: Path, n: int) -> None:
    """A database like the results one: a table `results` with n rows, published the way the
    aggregation publishes it (with its stamp)."""
    with dbfile.replace_database(path) as tmp:
        con = duckdb.connect(str(tmp))
        con.execute(f"CREATE TABLE results AS SELECT range AS i FROM range({n})")
        con.close()


def rows(path: Path) -> int:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM results").fetchone()[0]
    finally:
        con.close()


def test_a_writer_holding_the_database_stops_the_rebuild_before_any_work(tmp_path):
    db = tmp_path / "results" / "illusion.duckdb"
    make_db(db, 3)
    holder = Holder(db, "rw", tmp_path)
    ran = []
    try:
        with pytest.raises(dbfile.DatabaseError) as err:
            with dbfile.replace_database(db) as tmp:
                ran.append(tmp)
        msg = str(err.value)
        assert f"(PID {holder.proc.pid})" in msg and "read_only=True" in msg
        assert "\n" not in msg and ran == []
        # Snakemake deletes a job's output before running it: the stamp, not the database, so
        # the holder is still found
        dbfile.stamp_path(db).unlink()
        with pytest.raises(dbfile.DatabaseError, match=f"PID {holder.proc.pid}"):
            dbfile.check_free(db, "logs/aggregate.log")
    finally:
        holder.release()
    make_db(db, 5)  # once it is closed, the rebuild goes through
    assert rows(db) == 5 and not dbfile.wal_path(db).exists()


def test_readers_holding_it_read_only_do_not_stop_it_and_keep_their_copy(tmp_path):
    """A notebook that holds the database read-only while it is rebuilt: the rebuild publishes
    the new file (and its stamp), new readers see it, the notebook keeps reading the file it
    opened until it reconnects."""
    db = tmp_path / "illusion.duckdb"
    make_db(db, 3)
    old = db.stat().st_ino
    reader = Holder(db, "ro", tmp_path)
    try:
        dbfile.stamp_path(db).unlink()  # Snakemake, before the job
        make_db(db, 7)
        assert rows(db) == 7 and db.stat().st_ino != old and dbfile.stamp_path(db).is_file()
    finally:
        assert reader.release() == "3"  # it read the file it had opened


def test_a_stale_write_ahead_log_is_removed_with_the_old_file(tmp_path):
    """A process that wrote to the database and was killed leaves `<file>.wal`. Beside a new
    file that log makes DuckDB refuse to open it (shown first); the rebuild removes it."""
    db = tmp_path / "illusion.duckdb"
    make_db(db, 3)
    holder = Holder(db, "rw", tmp_path)
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait()
    assert dbfile.wal_path(db).exists()

    # without the stale-log removal: a new file published beside the old file's log
    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE results AS SELECT 1 AS i")
    con.close()
    stale = dbfile.wal_path(db).read_bytes()
    os.replace(other, db)
    with pytest.raises(duckdb.Error, match="WAL does not match database file") as err:
        rows(db)
    msg = dbfile.explain(err.value, db)
    assert "write-ahead log" in msg and f"delete {dbfile.wal_path(db)}" in msg

    dbfile.wal_path(db).write_bytes(stale)
    make_db(db, 4)
    assert rows(db) == 4 and not dbfile.wal_path(db).exists()


def test_a_failed_build_keeps_the_previous_file_and_says_so(tmp_path):
    db = tmp_path / "results" / "illusion.duckdb"
    make_db(db, 3)
    dbfile.stamp_path(db).unlink()  # what Snakemake does with the output of a failed job
    with pytest.raises(RuntimeError):
        with dbfile.replace_database(db, "logs/aggregate.log"):
            raise RuntimeError("damaged Parquet log x.parquet")
    assert rows(db) == 3  # the file itself is untouched
    assert not dbfile.stamp_path(db).exists()  # so Snakemake runs the build again
    path, notes = dbfile.for_reading(db)
    assert path == db and len(notes) == 1
    assert "failed at" in notes[0] and "damaged Parquet log x.parquet" in notes[0]
    assert "logs/aggregate.log" in notes[0] and "this database is the one before" in notes[0]
    # the CLI reads it, with the note on stderr and nothing else there
    res = subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "--db", str(db), "tables"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0 and "results" in res.stdout
    assert res.stderr.count("note: ") == 1 and "Traceback" not in res.stderr
    # a successful build clears the failure
    make_db(db, 6)
    assert dbfile.for_reading(db) == (db, [])


def test_cli_errors_are_one_line(tmp_path):
    def cli(db: Path):
        res = subprocess.run(
            [sys.executable, "-m", "benchmark_illusion", "--db", str(db), "tables"],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        assert res.stderr.count("\n") == 1, res.stderr
        return res.stderr

    db = tmp_path / "illusion.duckdb"
    assert "no results database at" in cli(db)
    make_db(db, 3)
    holder = Holder(db, "rw", tmp_path)
    try:
        err = cli(db)
        assert "open read-write in" in err and f"(PID {holder.proc.pid})" in err
    finally:
        holder.release()
    damaged = tmp_path / "damaged.duckdb"
    damaged.write_bytes(b"\0" * 8192 + b"not a database" * 100)
    err = cli(damaged)
    assert f"error: {damaged} is damaged (" in err and "snakemake --forcerun aggregate" in err


def test_a_damaged_parquet_log_is_named_with_the_command_that_writes_it(tmp_path):
    good = tmp_path / "results/generations/m/magnitude/unstructured/0.3/sample/en.parquet"
    good.parent.mkdir(parents=True)
    pl.DataFrame({"item_id": ["a", "b"], "correct": [True, False]}).write_parquet(good)
    bad = good.with_name("es.parquet")
    bad.write_bytes(good.read_bytes()[:-20])  # truncated: no footer
    dbfile.check_parquet([good])
    with pytest.raises(dbfile.DatabaseError) as err:
        dbfile.check_parquet([good, bad])
    msg = str(err.value)
    assert msg.startswith(f"damaged Parquet log {bad}: ")
    assert f"(rule evaluate) with `snakemake --forcerun {bad}`" in msg


def test_tables_lists_every_table_and_view_with_its_row_count(tmp_path):
    """`tables`: one line per table and view, its kind and its rows; a view whose Parquet file is
    gone says so instead of failing the listing."""
    db = tmp_path / "illusion.duckdb"
    log, gone = tmp_path / "log.parquet", tmp_path / "gone.parquet"
    pl.DataFrame({"x": [1, 2, 3, 4]}).write_parquet(log)
    pl.DataFrame({"x": [1]}).write_parquet(gone)
    with dbfile.replace_database(db) as tmp:
        con = duckdb.connect(str(tmp))
        con.execute("CREATE TABLE results AS SELECT range AS i FROM range(3)")
        con.execute(f"CREATE VIEW logs AS SELECT * FROM read_parquet('{log}')")
        con.execute(f"CREATE VIEW gone AS SELECT * FROM read_parquet('{gone}')")
        con.close()
    gone.unlink()
    res = subprocess.run(
        [sys.executable, "-m", "benchmark_illusion", "--db", str(db), "tables"],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    lines = {line.split()[0]: line.split()[1:] for line in res.stdout.splitlines()}
    assert lines["results"] == ["base", "table", "3", "rows"]
    assert lines["logs"] == ["view", "4", "rows"]
    assert lines["gone"][:2] == ["view", "unreadable:"]


def dry_run(workdir: Path, concepts: bool) -> dict[str, dict[str, set[str]]]:
    """The workflow's dry run in `workdir` on a minimal config: rule -> {"input": ..., "output":
    ...}, the paths its planned jobs list."""
    cfg = minimal()
    cfg["concepts"] = {"enabled": concepts}
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [str(SNAKEMAKE), "-n", "--cores", "1", "-s", str(ROOT / "Snakefile")]
    res = subprocess.run(
        [*cmd, "-d", str(workdir), "--configfile", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    rules: dict[str, dict[str, set[str]]] = {}
    rule = None
    for line in (res.stdout + res.stderr).splitlines():
        if m := re.match(r"(?:local)?rule (\w+):", line):
            rule = rules.setdefault(m.group(1), {"input": set(), "output": set()})
        elif rule is not None and (m := re.match(r"\s+(input|output): (.*)", line)):
            rule[m.group(1)] |= set(m.group(2).split(", "))
    return rules


@pytest.mark.parametrize("concepts", [True, False], ids=["concepts", "no-concepts"])
def test_the_database_users_open_stays_in_place_while_snakemake_rebuilds_it(tmp_path, concepts):
    """Snakemake deletes the declared outputs of a job before it runs and when it fails. The
    database users open (results/illusion.duckdb) is built by `competency_gaps`, or by
    `aggregate` with concepts off: after Snakemake deleted that rule's outputs and the
    rebuild was refused, the previous file is still there under its own name, readable with
    the previous content by a plain duckdb.connect, read-only and read-write; the step's
    successful rebuild writes the rule's declared output again, which the figures read."""
    work = tmp_path / "work"
    work.mkdir()
    plan = dry_run(work, concepts)
    builder, figures = (
        ("competency_gaps", "concept_figures") if concepts else ("aggregate", "figures")
    )
    db = work / "results" / "illusion.duckdb"
    make_db(db, 3)  # the last build, as the rule's step publishes it
    declared = {work / p for p in plan[builder]["output"]}
    assert declared and all(p.exists() for p in declared)  # the build wrote the rule's outputs
    for p in declared:  # Snakemake, before the job
        p.unlink()
    assert db.is_file(), (
        f"{db} was deleted with the rule's outputs {sorted(plan[builder]['output'])}"
    )
    # the re-aggregation is refused (here: its input check fails); Snakemake deletes the outputs
    # of the failed job again
    with pytest.raises(dbfile.DatabaseError):
        with dbfile.replace_database(db, before=lambda: dbfile.check_parquet([tmp_path / "x"])):
            pass
    for p in declared:
        p.unlink(missing_ok=True)
    assert db.is_file()
    for read_only in (True, False):  # what a user types in Python, with and without read_only
        con = duckdb.connect(str(db), read_only=read_only)
        try:
            assert con.execute("SELECT count(*) FROM results").fetchone()[0] == 3
        finally:
            con.close()
    cli = shutil.which("duckdb")
    if cli:  # the DuckDB CLI, where one is installed
        res = subprocess.run(
            [cli, "-readonly", "-csv", "-noheader", str(db), "SELECT count(*) FROM results"],
            capture_output=True,
            text=True,
        )
        assert res.returncode == 0 and res.stdout.strip() == "3", res.stderr
    # the next build publishes the new file and the rule's declared output, the figures' input
    make_db(db, 5)
    assert rows(db) == 5 and all(p.is_file() for p in declared)
    assert plan[builder]["output"] <= plan[figures]["input"]


def test_a_stamp_without_its_database_is_dropped_when_the_workflow_is_read(tmp_path):
    """A database deleted by hand is built again: the workflow drops its stamp (the rule's
    declared output) when it is read; a stamp beside its database stays."""
    work = tmp_path / "work"
    db = work / "results" / "illusion.duckdb"
    make_db(db, 3)
    stamp = dbfile.stamp_path(db)
    dry_run(work, concepts=True)
    assert stamp.is_file() and rows(db) == 3
    db.unlink()
    dry_run(work, concepts=True)
    assert not stamp.exists()
    # the same check, in the package
    make_db(db, 3)
    assert not dbfile.drop_stale_stamp(db) and stamp.is_file()
    db.unlink()
    assert dbfile.drop_stale_stamp(db) and not stamp.exists()
