"""Logging for pipeline steps: one log file per rule instance, tqdm included."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

FORMAT = "%(asctime)s %(levelname)s %(message)s"  # every log line: time, level, message


def to_file(path: str | Path | None) -> logging.Logger:
    """Send this process's log records and stderr (where tqdm draws) to `path`.

    Without a path (interactive use) records go to stderr.
    """
    logger = logging.getLogger("benchmark_illusion")
    logger.setLevel(logging.INFO)
    fmt = logging.Formatter(FORMAT)
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        stream = open(path, "a", buffering=1, encoding="utf-8")
        sys.stderr = stream
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    logger.handlers[:] = [handler]
    return logger
