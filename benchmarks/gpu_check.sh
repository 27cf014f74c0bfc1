#!/usr/bin/env bash
# GPU check: what a user runs on the first GPU node to check their setup. The e2e smoke config
# (tests/smoke.py) on CUDA, up to the metric database, in float32 and then in bfloat16: import,
# pool, selection, calibration, magnitude/Wanda/SparseGPT pruning, RTN/GPTQ quantization, and
# every checkpoint's evaluation in every format (open, candidates, mc, mc_nopassage) with beams,
# samples and one-shot on every item, then the aggregation. evaluation.device is `cuda`
# explicitly, so a job that cannot use the GPU fails (models.resolve_device) instead of falling
# back to the CPU; the script also fails if any prune, quantize or evaluate log says it loaded on
# another device, or if any logged score is not finite (the evaluation itself fails a job on a
# non-finite logit; this re-checks the logs). Prints each job's wall time and peak RSS
# (Snakemake benchmark files) and a table of each job's estimated GPU memory, its peak GPU memory
# (from its log) and their ratio (benchmark_illusion.scheduling.gpu_peaks). Then both engines
# (native and vLLM) on the same items and device: their parity table and the items/s of each on
# mc, greedy and the recovery decodes, with the ratio.
#
#   benchmarks/gpu_check.sh [WORKDIR]        (default: a new temporary folder)
#   DEVICE=cpu benchmarks/gpu_check.sh       (the same checks on the CPU)
#   DRY=1 benchmarks/gpu_check.sh            (write the configs and plan both runs; run nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SNAKEMAKE=${SNAKEMAKE:-.venv/bin/snakemake}
DEVICE=${DEVICE:-cuda}
DRY=${DRY:-0}
work=${1:-$(mktemp -d)}
mkdir -p "$work"

if [ "$DEVICE" != cpu ] && [ "$DRY" != 1 ]; then
  "$PY" - <<'PYEOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"gpu_check: FAILED, torch {torch.__version__} sees no CUDA device "
             f"(CUDA build: {torch.version.cuda or 'no, a CPU build'})")
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PYEOF
fi

"$PY" - "$work" "$DEVICE" <<'PYEOF'
import sys
from pathlib import Path
import yaml
sys.path.insert(0, "tests")
from smoke import smoke_config
work = Path(sys.argv[1])
cfg = yaml.safe_load(smoke_config(work).read_text())
cfg["evaluation"]["device"] = sys.argv[2]
cfg["evaluation"]["formats"] = ["open", "candidates", "mc", "mc_nopassage"]
cfg["concepts"] = {**cfg.get("concepts", {}), "enabled": False}
for dtype in ("float32", "bfloat16"):
    cfg["evaluation"]["dtype"] = dtype
    (work / f"{dtype}.yaml").write_text(yaml.safe_dump(cfg))
    print("config:", work / f"{dtype}.yaml")
PYEOF

for dtype in float32 bfloat16; do
  echo; echo "== $dtype on $DEVICE"
  args=(--cores 4 -d "$work" --configfile "$work/$dtype.yaml" --until aggregate)
  if [ "$DRY" = 1 ]; then
    "$SNAKEMAKE" -n "${args[@]}" | awk '!done && /^Job stats/ {on = 1} on {print} on && /^total/ {on = 0; done = 1}'
    continue
  fi
  start=$(date +%s)
  "$SNAKEMAKE" "${args[@]}"
  echo "wall time ($dtype): $(( $(date +%s) - start )) s"

  jobs=("$work/logs/prune" "$work/logs/quantize" "$work/logs/evaluate_pool" "$work/logs/evaluate")
  if grep -rhE "loaded .* on " "${jobs[@]}" | grep -v " on $DEVICE"; then
    echo "gpu_check: FAILED, a job above did not run on $DEVICE" >&2
    exit 1
  fi
  n=$(grep -rlE "loaded .* on $DEVICE" "${jobs[@]}" | wc -l)
  echo "  $n prune/quantize/evaluate logs loaded their model on $DEVICE"
  "$PY" - "$work" <<'PYEOF'
import sys
from pathlib import Path
import polars as pl
files = sorted(Path(sys.argv[1], "results/generations").rglob("*.parquet"))
bad = []
for f in files:
    df = pl.read_parquet(f)
    floats = [c for c, t in df.schema.items() if t in (pl.Float32, pl.Float64)]
    lists = [c for c, t in df.schema.items() if isinstance(t, pl.List) and t.inner in (pl.Float32, pl.Float64)]
    n = sum(int(df[c].is_infinite().sum() + df[c].is_nan().sum()) for c in floats)
    n += sum(int(df[c].explode().is_infinite().sum() + df[c].explode().is_nan().sum()) for c in lists)
    if n:
        bad.append(f"{f}: {n} non-finite values")
if bad:
    sys.exit("gpu_check: FAILED, non-finite scores:\n  " + "\n  ".join(bad))
print(f"  {len(files)} evaluation logs, every score finite")
PYEOF
  if [ "$DEVICE" != cpu ]; then
    echo "GPU memory per job, estimated (the workflow's gpu_mem_mb) and measured (the peak its log names):"
    "$PY" -m benchmark_illusion.scheduling.gpu_peaks "$work" "$work/$dtype.yaml" | sed "s/^/  /"
  fi
  echo "wall time (s) and peak RSS (MB) per job (Snakemake benchmark files):"
  for f in $(find "$work/logs/benchmarks" -name '*.tsv' | sort); do
    printf '  %-70s %s\n' "${f#"$work"/logs/benchmarks/}" "$(tail -1 "$f" | awk '{print $1" s, "$3" MB"}')"
  done
done

# Both engines on the same items and checkpoint (the dense model of the float32 run), on the same
# device: every format and recovery decode with each engine, their parity, then each timed on mc,
# greedy and the recovery decodes alone (engines/parity.py). vLLM comes from the job's Python
# when it has it (make cuda-venv installs it), else from .venv-vllm or $BENCHMARK_ILLUSION_VLLM_PYTHON.
echo; echo "== engines: native and vLLM on $DEVICE"
VPY=$("$PY" -c 'from benchmark_illusion.evaluation.engines import vllm_python; print(vllm_python() or "")')
if [ "$DRY" = 1 ]; then
  echo "  would run both engines with ${VPY:-(vLLM not installed)}"
elif [ -z "$VPY" ]; then
  echo "gpu_check: FAILED, vLLM is not installed (make cuda-venv installs it; CUDA_VLLM=0 leaves it out)" >&2
  exit 1
else
  items=$(find "$work/results/items" -name '*.parquet' | sort | head -1)
  model=$(find "$work/resources/models" -mindepth 1 -maxdepth 1 -type d | sort | head -1)
  PYTHONPATH="$PWD/src" "$VPY" -m benchmark_illusion.evaluation.engines.parity \
    "$model" "$items" "$work/engines" --n 32 --device "$DEVICE" --reps 2 > "$work/engines.log" 2>&1 \
    || { tail -40 "$work/engines.log"; echo "gpu_check: FAILED, the engine comparison (log above)" >&2; exit 1; }
  "$PY" -m benchmark_illusion.evaluation.engines.parity --report "$work/engines"
fi
if [ "$DRY" = 1 ]; then echo "gpu_check: planned (DRY=1)"; else echo "gpu_check: OK"; fi
