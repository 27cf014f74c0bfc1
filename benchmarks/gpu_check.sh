#!/usr/bin/env bash
# GPU check: the e2e smoke config (tests/test_e2e.py::smoke_config) on CUDA, up to the metric
# database: import, pool, selection, calibration, magnitude/Wanda/SparseGPT pruning, and every
# checkpoint's evaluation with beams, samples and one-shot on every item. evaluation.device is
# set to `cuda` explicitly, so a run that cannot use the GPU fails (models.resolve_device)
# instead of falling back to the CPU; the script also fails if any prune or evaluate log says
# it loaded on another device. Prints each job's wall time and peak RSS (Snakemake benchmark
# files) and each job's peak GPU memory (from its log).
#
#   benchmarks/gpu_check.sh [WORKDIR]        (default: a new temporary folder)
#   DEVICE=cpu benchmarks/gpu_check.sh       (the same checks on the CPU: tests this script)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
SNAKEMAKE=${SNAKEMAKE:-.venv/bin/snakemake}
DEVICE=${DEVICE:-cuda}
work=${1:-$(mktemp -d)}
mkdir -p "$work"

[ "$DEVICE" = cpu ] || "$PY" - <<'PYEOF'
import torch
assert torch.cuda.is_available(), "gpu_check: torch sees no CUDA device"
print("GPU:", torch.cuda.get_device_name(0), "| torch", torch.__version__, "| CUDA", torch.version.cuda)
PYEOF

"$PY" - "$work" "$DEVICE" <<'PYEOF'
import sys
from pathlib import Path
import yaml
sys.path.insert(0, "tests")
from test_e2e import smoke_config
work = Path(sys.argv[1])
path = smoke_config(work)
cfg = yaml.safe_load(path.read_text())
cfg["evaluation"]["device"] = sys.argv[2]
cfg["concepts"] = {**cfg.get("concepts", {}), "enabled": False}
path.write_text(yaml.safe_dump(cfg))
print("config:", path)
PYEOF

start=$(date +%s)
"$SNAKEMAKE" --cores 4 -d "$work" --configfile "$work/smoke.yaml" --until aggregate
echo "wall time: $(( $(date +%s) - start )) s"

echo; echo "device per job:"
jobs=("$work/logs/prune" "$work/logs/evaluate_pool" "$work/logs/evaluate")
if grep -rhE "loaded .* on " "${jobs[@]}" | grep -v " on $DEVICE"; then
  echo "gpu_check: FAILED, a job above did not run on $DEVICE" >&2
  exit 1
fi
n=$(grep -rlE "loaded .* on $DEVICE" "${jobs[@]}" | wc -l)
echo "  $n prune/evaluate jobs loaded their model on $DEVICE"
if [ "$DEVICE" != cpu ]; then
  echo; echo "peak GPU memory per job:"
  grep -rHoE "peak GPU memory [0-9.]+ GiB" "${jobs[@]}" | sed "s#$work/logs/##; s/^/  /"
fi
echo; echo "wall time (s) and peak RSS (MB) per job (Snakemake benchmark files):"
for f in $(find "$work/logs/benchmarks" -name '*.tsv' | sort); do
  printf '  %-70s %s\n' "${f#$work/logs/benchmarks/}" "$(tail -1 "$f" | awk '{print $1" s, "$3" MB"}')"
done
echo "gpu_check: OK"
