"""The command line itself: every argument explained, options where users put them, and the
summary as JSON (the numbers of results/run.json)."""

from __future__ import annotations

import argparse
import json

import polars as pl

from benchmark_illusion.__main__ import build_parser, main
from metrics.test_sql import _cli_csv, _file_db, db  # noqa: F401  (db: the hand-built metric database)


def test_every_argument_of_every_subcommand_has_help():
    parser = build_parser()
    missing = [
        f"{name} {action.dest}"
        for name, sub in {"": parser, **parser.subcommands}.items()
        for action in sub._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and not action.help
    ]
    assert set(parser.subcommands) >= {"sql", "tables", "summary", "concepts", "judge", "estimate"}
    assert not missing, missing


def test_db_works_before_and_after_the_subcommand_and_json_has_the_summary_rows(
    tmp_path,
    db,  # noqa: F811  (the fixture imported above)
    monkeypatch,
    capsys,
):
    file_db = _file_db(db, tmp_path)
    table = _cli_csv(file_db, monkeypatch, capsys, "summary")  # --db before the subcommand
    # after it, and with a wrong --db before it: the one after the subcommand counts
    assert main(["--db", str(tmp_path / "absent.duckdb"), "summary", "--db", str(file_db)]) == 0
    capsys.readouterr()
    assert main(["summary", "--db", str(file_db), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert list(rows[0]) == table.columns
    # the same numbers as the table (CSV rounds nothing: the view already rounds)
    assert pl.DataFrame(rows, schema=table.schema).rows() == table.rows()
    # a missing database after the subcommand is reported like one before it
    assert main(["tables", "--db", str(tmp_path / "absent.duckdb")]) == 2
    assert "absent.duckdb" in capsys.readouterr().err
