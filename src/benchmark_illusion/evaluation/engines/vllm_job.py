"""One evaluate step in the vLLM venv: `python -m benchmark_illusion.evaluation.engines.vllm_job
ARGS.json`, where ARGS.json holds pipeline.evaluate_file's keyword arguments
(pipeline._evaluate_elsewhere writes it). vLLM starts worker processes, hence the guard."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> int:
    from benchmark_illusion import logs, pipeline

    logs.to_file(None)
    pipeline.evaluate_file(**json.loads(Path(path).read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
