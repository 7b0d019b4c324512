"""Serve a workload through Hugging Face transformers' continuous batching and time every token.

A random-weight model is built from an HF config dict and run through `generate_batch` (requests
all at once) or the ContinuousBatchingManager (requests submitted at their arrival times, or as
a closed loop of `concurrency` users: the first `concurrency` at once, then the next in order
each time one finishes, as a benchmark client's `--max-concurrency` releases them), with
`record_timestamps=True`: per request its submission time, first-token time and every token's
time (time.perf_counter on the host, after each step's synchronize). The cache size, token budget
and request cap are passed explicitly, so the simulation can be run with the same ones.

    python -m gpuperf.measure.serve_hf SPEC.json OUT.json

SPEC: {"config": {...HF config...}, "requests": [[arrival_s, input_tokens, output_tokens], ...],
"cb": {ContinuousBatchingConfig fields}, "dtype": "bf16", "seed": 0, "label": "...",
"concurrency": 0 (open loop) or the users of a closed loop (arrival times then unused)}.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from gpuperf.errors import EnvironmentUnavailable


def _model(config: dict[str, Any], dtype: str, torch: Any) -> Any:
    import transformers

    cfg = dict(config)
    model_type = cfg.pop("model_type")
    for key in [k for k in cfg if k.startswith("_")]:
        cfg.pop(key)
    hf_cfg = transformers.AutoConfig.for_model(model_type, **cfg)
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            hf_cfg, dtype=torch_dtype, attn_implementation="sdpa"
        )
    return model.eval()


def _prompts(requests: list[list[float]], vocab: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(int(r[1]))] for r in requests]


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Serve spec's requests (module docstring); per-request timestamps relative to the start."""
    try:
        import torch
        import transformers
        from transformers import ContinuousBatchingConfig, GenerationConfig
    except ImportError as exc:
        raise EnvironmentUnavailable(f"measuring serving needs torch and transformers: {exc}") \
            from None  # fmt: skip
    if not torch.cuda.is_available():
        raise EnvironmentUnavailable("measuring serving needs a CUDA GPU")
    from gpuperf.measure.env import environment

    torch.manual_seed(spec.get("seed", 0))
    model = _model(spec["config"], spec.get("dtype", "bf16"), torch)
    reqs = spec["requests"]
    prompts = _prompts(reqs, model.config.vocab_size, spec.get("seed", 0))
    osl = max(int(r[2]) for r in reqs)
    cb = {"allow_block_sharing": False, "scheduler_type": "fifo", **spec.get("cb", {})}
    cbc = ContinuousBatchingConfig(**cb)
    gc = GenerationConfig(max_new_tokens=osl, do_sample=False, eos_token_id=-1)
    # Warm-up: kernels, allocator and (when on) graph capture, on a few short requests.
    warm = [p[: min(len(p), 64)] for p in prompts[:4]]
    model.generate_batch(inputs=warm, generation_config=GenerationConfig(
        max_new_tokens=8, do_sample=False, eos_token_id=-1), continuous_batching_config=cbc,
        progress_bar=False)  # fmt: skip
    torch.cuda.synchronize()
    open_loop = any(r[0] > 0 for r in reqs)
    users = int(spec.get("concurrency", 0))
    if not users and not open_loop and len({int(r[2]) for r in reqs}) == 1:
        t0 = time.perf_counter()
        out = model.generate_batch(inputs=prompts, generation_config=gc,
                                   continuous_batching_config=cbc, record_timestamps=True,
                                   progress_bar=False)  # fmt: skip
        results = [out[f"req_{i}"] for i in range(len(prompts))]
    else:
        results, t0 = _managed(model, gc, cbc, reqs, prompts, users)
    rows = []
    for i, (r, res) in enumerate(zip(reqs, results, strict=True)):
        ts = list(res.timestamps or [])
        rows.append({
            "id": i, "arrival_s": res.created_time - t0, "scheduled_arrival_s": r[0],
            "input_tokens": int(r[1]), "output_tokens": len(res.generated_tokens),
            "asked_output_tokens": int(r[2]), "first_s": ts[0] - t0 if ts else None,
            "last_s": ts[-1] - t0 if ts else None,
            "token_times_s": [round(t - t0, 6) for t in ts], "error": res.error,
        })  # fmt: skip
    attn = getattr(model.config, "_attn_implementation", None)
    return {"env": {**environment("cuda"), "transformers": transformers.__version__},
            "kind": "serve", "label": spec.get("label", ""), "cb": cb, "concurrency": users,
            "attn_implementation": attn, "config": spec["config"], "requests": rows}  # fmt: skip


def _managed(model: Any, gc: Any, cbc: Any, reqs: list, prompts: list,
             users: int = 0) -> tuple[list, float]:  # fmt: skip
    """Submit the requests through the manager, each at its arrival time or (users > 0) as a
    closed loop; (results, the start), the clock started once the manager is warm (its cache
    built, graphs captured). Requests are submitted from this thread only."""
    import queue

    mgr = model.init_continuous_batching(generation_config=gc, continuous_batching_config=cbc)
    mgr.warmup()
    mgr.start()
    t0 = time.perf_counter()
    results: dict[str, Any] = {}
    ended: queue.Queue = queue.Queue()  # ids of finished requests; None: the reader gave up

    def collect() -> None:
        try:
            while len(results) < len(reqs):
                r = mgr.get_result(timeout=120)
                if r is None:
                    return
                if r.is_finished():
                    results[r.request_id] = r
                    ended.put(r.request_id)
        finally:  # however the reader ends, a closed loop waiting on it stops waiting
            ended.put(None)

    def submit(i: int) -> None:
        mgr.add_request(prompts[i], request_id=f"r{i}", max_new_tokens=int(reqs[i][2]),
                        record_timestamps=True)  # fmt: skip

    reader = threading.Thread(target=collect, daemon=True)
    reader.start()
    if users:
        for i in range(min(users, len(reqs))):
            submit(i)
        for i in range(min(users, len(reqs)), len(reqs)):
            if ended.get() is None:
                break
            submit(i)
    else:
        for i, r in enumerate(reqs):
            wait = t0 + r[0] - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            submit(i)
    reader.join()
    mgr.stop(block=True)
    missing = [i for i in range(len(reqs)) if f"r{i}" not in results]
    if missing:
        from gpuperf.errors import GpuperfError

        raise GpuperfError(f"{len(missing)} of {len(reqs)} requests returned no result within "
                           f"120 s of the last one (request r{missing[0]} first)")  # fmt: skip
    return [results[f"r{i}"] for i in range(len(reqs))], t0


def metrics(reqs: list[dict[str, Any]]) -> dict[str, float]:
    """A measured run's wall time (s), output tokens/s and TTFT/TPOT p50 and p90 (ms)."""
    from gpuperf.step.serve import percentile

    t0 = min(r["arrival_s"] for r in reqs)
    ttft = sorted(r["first_s"] - r["arrival_s"] for r in reqs)
    tpot = sorted((r["last_s"] - r["first_s"]) / (r["output_tokens"] - 1) for r in reqs
                  if r["output_tokens"] > 1)  # fmt: skip
    wall = max(r["last_s"] for r in reqs) - t0
    out = {"wall_s": wall, "output_tokens_per_s": sum(r["output_tokens"] for r in reqs) / wall}
    for name, vals in (("ttft", ttft), ("tpot", tpot)):
        for q in (50, 90):
            out[f"{name}_p{q}_ms"] = 1e3 * percentile(vals, q)
        out[f"{name}_mean_ms"] = 1e3 * sum(vals) / len(vals)
    return out


def engine_options(cb: dict[str, Any], requests: int) -> dict[str, Any]:
    """The hf engine's options for a run of `requests` with ContinuousBatchingConfig `cb`: its
    cache, token budget, block size, request cap and CUDA graphs."""
    return {"kv_tokens": cb["num_blocks"] * cb["block_size"],
            "token_budget": cb["max_batch_tokens"], "block_size": cb["block_size"],
            "max_seqs": min(requests, 1024),
            "cuda_graphs": bool(cb.get("use_cuda_graph"))}  # fmt: skip


def replay(measured: dict[str, Any], model: Any, gpu: Any, **params: Any) -> Any:
    """`gpuperf serve --engine hf` of a measured run's requests (as asked: arrival, lengths),
    with its cache, budget and request cap; params override the engine's host terms."""
    from gpuperf import api
    from gpuperf.step.serve_load import Request, Workload

    reqs = measured["requests"]
    asked = (Request(r["scheduled_arrival_s"], r["input_tokens"], r["asked_output_tokens"])
             for r in reqs)  # fmt: skip
    work = Workload(tuple(asked), measured.get("concurrency", 0), measured.get("label", ""))
    opts = engine_options(measured["cb"], len(reqs))
    return api.serve(model, gpu=gpu, engine="hf", workload=work, **opts, **params)


def main() -> None:
    from pathlib import Path

    spec = json.loads(Path(sys.argv[1]).read_text())
    out = run(spec)
    with open(sys.argv[2], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
