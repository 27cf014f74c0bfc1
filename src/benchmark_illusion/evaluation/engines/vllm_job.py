"""One evaluate step in the vLLM venv: `python -m benchmark_illusion.evaluation.engines.vllm_job
ARGS.json`, where ARGS.json holds evaluation.steps.evaluate_file's arguments (the job as a
mapping; steps._evaluate_elsewhere writes it). vLLM starts worker processes, hence the guard."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(path: str) -> int:
    from benchmark_illusion import logs
    from benchmark_illusion.evaluation.steps import EvalJob, evaluate_file
    from benchmark_illusion.models.keys import Placement

    logs.to_file(None)
    args = json.loads(Path(path).read_text())
    evaluate_file(
        EvalJob.from_dict(args["job"]),
        args["params"],
        Placement(**args["place"]),
        args["throughput"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
