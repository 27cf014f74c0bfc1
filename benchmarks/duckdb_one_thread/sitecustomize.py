# Comparison aid for benchmarks (not project code): every DuckDB connection of the run uses one
# thread, so float sums and the stored row order of tables without ORDER BY are reproducible.
import duckdb

_connect = duckdb.connect


def _one_thread(database=":memory:", read_only=False, config=None, **kw):
    config = dict(config or {})
    config.setdefault("threads", 1)
    return _connect(database, read_only=read_only, config=config, **kw)


duckdb.connect = _one_thread
