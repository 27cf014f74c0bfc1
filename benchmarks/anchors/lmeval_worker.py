"""lm-evaluation-harness side of `make bench` (runs in benchmarks/.venv-lmeval, not .venv).

Reads requests from a JSON file, runs them through lm-eval's HF model on the imported
safetensors folder, and writes the results and the wall time of each request type:

  {"loglikelihood": [[context, continuation], ...],
   "generate_until": [[context, max_gen_toks], ...]}   (until: a line break)

  python lmeval_worker.py MODEL_DIR REQUESTS.json OUT.json --batch-size 16
"""

from __future__ import annotations

import argparse
import json
import resource
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model_dir")
    p.add_argument("requests")
    p.add_argument("out")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--gen-batch-size", type=int, default=8)
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args()

    import torch
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    if args.threads:
        torch.set_num_threads(args.threads)
    req = json.load(open(args.requests))
    out: dict = {}
    for kind, batch in (
        ("loglikelihood", args.batch_size),
        ("generate_until", args.gen_batch_size),
    ):
        todo = req.get(kind) or []
        if not todo:
            continue
        lm = HFLM(pretrained=args.model_dir, batch_size=batch, device="cpu", dtype="float32")
        if kind == "loglikelihood":
            inst = [
                Instance("loglikelihood", {}, (ctx, cont), idx)
                for idx, (ctx, cont) in enumerate(todo)
            ]
        else:
            inst = [
                Instance(
                    "generate_until",
                    {},
                    (ctx, {"until": ["\n"], "max_gen_toks": int(n), "do_sample": False}),
                    idx,
                )
                for idx, (ctx, n) in enumerate(todo)
            ]
        t0 = time.perf_counter()
        if kind == "loglikelihood":
            res = [float(ll) for ll, _greedy in lm.loglikelihood(inst, disable_tqdm=True)]
        else:
            res = lm.generate_until(inst, disable_tqdm=True)
        out[kind] = {"seconds": time.perf_counter() - t0, "results": res}
        del lm
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    out["versions"] = {"torch": torch.__version__}
    try:
        import importlib.metadata as md

        out["versions"].update(
            lm_eval=md.version("lm_eval"), transformers=md.version("transformers")
        )
    except Exception:  # noqa: BLE001 - versions are informative only
        pass
    json.dump(out, open(args.out, "w"))


if __name__ == "__main__":
    main()
