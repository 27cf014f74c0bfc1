"""The estimated-against-measured GPU memory table of benchmarks/gpu_check.sh, on a fabricated
run: logs written the way the jobs write them (the real log format and peak line, torch's peak
counter stood in for, as there is no GPU here)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from benchmark_illusion import logs
from benchmark_illusion.models import checkpoints
from benchmark_illusion.scheduling.gpu_peaks import (
    JobPeak,
    format_table,
    job_peaks,
    logged_peak_mb,
    main,
)

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30

# the shape of tests/scheduling/test_cluster.py's hand-worked cases: 8 blocks of width 2048, 16
# heads of which 8 key/value heads (kv_dim 8 x 128 = 1024), MLP 12288, 64,000 tokens
MODEL_CONFIG = {
    "num_hidden_layers": 8,
    "hidden_size": 2048,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "intermediate_size": 12288,
    "vocab_size": 64000,
}
# evaluated in bfloat16 with decode groups of 32,768 tokens, batches of 8192 tokens in 4 rows:
# 7680 MB (test_gpu_memory_of_an_evaluate_job_term_by_term); pruned in the model's bfloat16 on
# 128 windows of 1024 tokens: 9216 MB (test_gpu_memory_of_a_prune_job_term_by_term)
EVALUATE_MB, PRUNE_MB = 7680, 9216


def run_config(work: Path, device: str = "cuda") -> Path:
    """config/config.yaml with a 1B bfloat16 hub model (params_b: its weights are not on disk)
    and the settings above; written under `work`."""
    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["models"] = {"m": {"source": "hub", "id": "org/m", "params_b": 1.0, "dtype": "bfloat16"}}
    cfg["datasets"]["sample"]["path"] = str(ROOT / "resources/sample_qa/{lang}.json")
    cfg["evaluation"].update(
        device=device, dtype="bfloat16", decode_tokens=32768, batch_tokens=8192, batch_size=4
    )
    cfg["calibration"].update(source="c4_hub", n_windows=128, seq_len=1024)
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def write_job_log(path: Path, peaks_gib: list[float], monkeypatch, what: str) -> None:
    """A job's log as logs.to_file formats it: a first line, then one peak line per peak (a
    retried job appends to its log), each from log_peak_gpu_memory on cuda:0."""
    path.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(f"fabricated.{path}")
    logger.setLevel(logging.INFO)
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter(logs.FORMAT))
    logger.handlers[:] = [handler]
    try:
        logger.info("loaded m (bfloat16) on cuda:0 (NVIDIA H100) at node1")
        for gib in peaks_gib:
            monkeypatch.setattr(
                checkpoints.torch.cuda, "max_memory_allocated", lambda device, b=gib * GiB: b
            )
            checkpoints.log_peak_gpu_memory(logger, "cuda:0", what)
    finally:
        handler.close()


@pytest.fixture
def run(tmp_path, monkeypatch):
    """A finished run's folder: the model's config.json, an evaluate, an evaluate_pool, a prune
    and a quantize log with peaks, and an evaluate log without one."""
    model = tmp_path / "resources/models/m"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(MODEL_CONFIG))
    logs_dir = tmp_path / "logs"
    write_job_log(
        logs_dir / "evaluate/m/dense/none/0/sample/en.log", [3.0, 4.5], monkeypatch, "evaluate"
    )
    write_job_log(logs_dir / "evaluate/m/dense/none/0/sample/es.log", [], monkeypatch, "evaluate")
    write_job_log(logs_dir / "evaluate_pool/m/sample/en.log", [1.25], monkeypatch, "evaluate")
    write_job_log(logs_dir / "prune/m/wanda/unstructured/0.3.log", [9.0], monkeypatch, "prune")
    write_job_log(logs_dir / "quantize/m/rtn/int4-g128/4.log", [2.0], monkeypatch, "quantize")
    return tmp_path


def test_the_last_peak_a_log_names_in_mb(run):
    log = run / "logs/evaluate/m/dense/none/0/sample/en.log"
    assert "evaluate: peak GPU memory 4.50 GiB on cuda:0" in log.read_text()
    assert logged_peak_mb(log) == 4.5 * 1024  # the retry's, not the first attempt's 3 GiB
    assert logged_peak_mb(run / "logs/evaluate/m/dense/none/0/sample/es.log") is None


def test_each_job_beside_its_estimate(run):
    from benchmark_illusion.config.validate import load_config

    rows = job_peaks(run, load_config(run_config(run), root=run))
    assert rows == [
        JobPeak("prune/m/wanda/unstructured/0.3", PRUNE_MB, 9.0 * 1024),
        JobPeak("quantize/m/rtn/int4-g128/4", PRUNE_MB, 2.0 * 1024),  # sized as prune
        JobPeak("evaluate_pool/m/sample/en", EVALUATE_MB, 1.25 * 1024),  # sized as evaluate
        JobPeak("evaluate/m/dense/none/0/sample/en", EVALUATE_MB, 4.5 * 1024),
        JobPeak("evaluate/m/dense/none/0/sample/es", EVALUATE_MB, None),
    ]
    # 9216 / 9216, 2048 / 9216, 1280 / 7680, 4608 / 7680
    assert [r.ratio for r in rows] == [1.0, pytest.approx(2 / 9), pytest.approx(1 / 6), 0.6, None]


def test_the_table_prints_job_estimate_peak_and_ratio(run, capsys):
    assert main([str(run), str(run_config(run))]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["job", "estimate", "MB", "peak", "MB", "ratio"]
    assert [line.split() for line in lines[1:]] == [
        ["prune/m/wanda/unstructured/0.3", "9216", "9216", "1.00"],
        ["quantize/m/rtn/int4-g128/4", "9216", "2048", "0.22"],
        ["evaluate_pool/m/sample/en", "7680", "1280", "0.17"],
        ["evaluate/m/dense/none/0/sample/en", "7680", "4608", "0.60"],
        ["evaluate/m/dense/none/0/sample/es", "7680", "-", "-"],
    ]
    # the columns line up under the header
    assert len({len(line) for line in lines}) == 1


def test_on_the_cpu_the_estimate_is_0_and_there_is_no_ratio(run):
    from benchmark_illusion.config.validate import load_config

    rows = job_peaks(run, load_config(run_config(run, device="cpu"), root=run))
    assert {r.estimate_mb for r in rows} == {0} and {r.ratio for r in rows} == {None}
    assert format_table(rows).splitlines()[1].split() == [
        "prune/m/wanda/unstructured/0.3",
        "0",
        "9216",
        "-",
    ]


def test_a_log_of_a_model_the_config_does_not_name_is_an_error(run, tmp_path):
    from benchmark_illusion.config.validate import load_config

    config = load_config(run_config(run), root=run)
    (run / "logs/evaluate/other").mkdir()
    (run / "logs/evaluate/other/x.log").write_text("")
    with pytest.raises(ValueError, match=r"x\.log: model 'other' is not in the config's models"):
        job_peaks(run, config)


def test_no_logs_and_wrong_arguments_fail(tmp_path, capsys):
    assert main([str(tmp_path), str(run_config(tmp_path))]) == 1
    assert "no prune, quantize or evaluate logs under" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2
    assert "usage: python -m benchmark_illusion.scheduling.gpu_peaks" in capsys.readouterr().err
