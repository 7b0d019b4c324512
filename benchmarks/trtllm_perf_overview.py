"""gpuperf serve against TensorRT-LLM's published throughput tables (perf-overview.md,
benchmarks/data/trtllm_perf_overview.csv): release 1.0's Llama-3.1-8B, Llama-3.3-70B and
Llama-3.1-405B in FP8 (NVIDIA's ModelOpt checkpoints) on H100 SXM and H200 SXM, ten ISL/OSL
pairs each, and a later document's Llama-3.3-70B at TP 2 (its other dense rows are FP4 or
GPUs gpuperf does not profile). Nothing is fitted to these rows: every one is held out.

How the table was measured (the document's "Reproducing Benchmarked Results"): `trtllm-bench
--tp N throughput --backend pytorch` over a synthetic dataset of `num_requests` requests of
exactly ISL input and OSL output tokens, every request queued at once (an offline,
maximum-throughput run); CUDA graphs with padding for batch sizes up to 8192; KV cache in
"many cases" at 0.95 of the free memory (0.90 by default). Its metric, Total Output Throughput,
is the output tokens of all requests over the run's wall time (the later document divides it by
the GPUs).

Each row is simulated as that run: `requests` requests at once on the `trtllm` engine profile,
with trtllm-bench's own choice of max_batch_size and max_num_tokens (`bench_settings`,
reimplemented from tensorrt_llm/bench/build/tuning.py: calc_engine_setting and
finetune_setting) and the KV cache in FP8, as the checkpoints declare.

    .venv/bin/python benchmarks/trtllm_perf_overview.py [--limit N] [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

DATA = Path(__file__).parent / "data" / "trtllm_perf_overview.csv"
TARGET = 10.0  # median |error| %, issue 12's published serving tables
KV_FRACTION = 0.95  # --kv_cache_free_gpu_mem_fraction the document says it "often" used
# llm_options.yml's cuda_graph_config.batch_sizes (enable_padding: true)
GRAPH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)
GIB = 1024**3


def rows() -> list[dict[str, str]]:
    with open(DATA) as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def published(row: dict[str, str]) -> float:
    """The row's output tokens/s over its whole replica."""
    per_gpu = row["unit"] == "per_gpu"
    return float(row["published"]) * (int(row["tp"]) if per_gpu else 1)


# finetune_setting's rounding: (below this, round up to a multiple of this), and a floor
BATCH_STEPS, BATCH_FLOOR = ((256, 32), (1024, 128), (math.inf, 256)), 64
TOKEN_STEPS, TOKEN_FLOOR = ((4096, 256), (8192, 512), (math.inf, 1024)), 2048


def _round_up(x: float, steps: tuple[tuple[float, int], ...], floor: int) -> int:
    step = next(s for below, s in steps if x < below)
    return max(floor, step * math.ceil(x / step))


def bench_settings(cfg, gpu, tp: int, isl: int, osl: int, fraction: float = KV_FRACTION,  # noqa: ANN001
                   kv_bytes: float = 1.0) -> tuple[int, int]:  # fmt: skip
    """trtllm-bench's (max_batch_size, max_num_tokens) when neither is given: the requests of
    ISL + OSL tokens the KV cache would hold after the weights (on the GPUs' whole memory, in
    GiB), rounded up "slightly optimistically" (tensorrt_llm/bench/build/tuning.py)."""
    kv_heads = max(tp, cfg.num_key_value_heads)
    per_token = 2 * cfg.num_hidden_layers * kv_heads * cfg.head_dim * kv_bytes / GIB
    engine = cfg.param_count() / GIB  # FP8: a byte a parameter
    free = gpu.hbm_bytes / GIB * tp - engine
    raw_bs = min(free * fraction / (per_token * (isl + osl)), 4096)
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    return _round_up(raw_bs, BATCH_STEPS, BATCH_FLOOR), _round_up(raw_tokens, TOKEN_STEPS,
                                                                   TOKEN_FLOOR)  # fmt: skip


def predict(
    row: dict[str, str], kv_dtype: str = "fp8", fraction: float = KV_FRACTION, chunked: bool = False
) -> tuple[float, dict]:
    """gpuperf's total output tokens/s of the row's run, and the settings it ran with."""
    from dataclasses import replace

    from gpuperf import api
    from gpuperf.dtypes import BYTES
    from gpuperf.hardware.loader import load_gpu
    from gpuperf.step.serve_engines import load_engine
    from gpuperf.workloads.config import load_model

    cfg, gpu = load_model(row["model"]), load_gpu(row["gpu"])
    tp, isl, osl = int(row["tp"]), int(row["isl"]), int(row["osl"])
    bs, tokens = bench_settings(cfg, gpu, tp, isl, osl, fraction, kv_bytes=BYTES[kv_dtype])
    if not chunked:  # a whole prompt must fit one step beside a full batch (get_settings)
        tokens = max(tokens, isl + bs)
    settings = {"max_seqs": bs, "token_budget": tokens, "mem_fraction": fraction,
                "chunked_prefill": chunked}  # fmt: skip
    engine = replace(load_engine("trtllm"), graph_sizes=GRAPH_SIZES)
    n = int(row["requests"])
    rep = api.serve(cfg, gpu=gpu, engine=engine, tp=tp, isl=isl, osl=osl, requests=n,
                    dtype="fp8", kv_dtype=kv_dtype, **settings)  # fmt: skip
    return rep.summary["output_tokens_per_s"], {**settings, "batch": rep.summary["mean_batch"]}


HEAD = ("doc", "model", "gpu", "tp", "ISL/OSL", "bs", "tokens", "batch", "published", "predicted",
        "error")  # fmt: skip
WIDTH = (5, 14, 5, 2, 11, 5, 6, 6, 10, 10, 7)


def _line(cells: tuple) -> str:
    return " ".join(f"{c:<{w}}" if j < 3 else f"{c:>{w}}"
                    for j, (c, w) in enumerate(zip(cells, WIDTH, strict=True)))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=0, help="every k-th row only (speed)")
    ap.add_argument("--kv-dtype", default="fp8")
    ap.add_argument("--fraction", type=float, default=KV_FRACTION)
    ap.add_argument("--chunked", action="store_true")
    ap.add_argument("--markdown", action="store_true", help="the summary as a markdown table")
    args = ap.parse_args()
    sel = rows()[:: args.limit] if args.limit else rows()
    errors: dict[str, list[float]] = {}
    show = (lambda *_: None) if args.markdown else print
    show(_line(HEAD))
    for r in sel:
        pred, s = predict(r, args.kv_dtype, args.fraction, args.chunked)
        real = published(r)
        e = 100 * (pred / real - 1)
        errors.setdefault(f"{r['doc']:5s} {r['model']} {r['gpu']} tp{r['tp']}", []).append(e)
        show(_line((r["doc"], r["model"], r["gpu"], r["tp"], f"{r['isl']}/{r['osl']}",
                     s["max_seqs"], s["token_budget"], f"{s['batch']:.0f}", f"{real:,.0f}",
                     f"{pred:,.0f}", f"{e:+.1f}%")))  # fmt: skip
    errors["all"] = [e for errs in errors.values() for e in errs]
    if args.markdown:
        print("| TensorRT-LLM perf overview | rows | median error | signed median | range |")
        print("|---|---|---|---|---|")
        for key, errs in errors.items():
            med, signed = statistics.median(abs(x) for x in errs), statistics.median(errs)
            spread = f"{min(errs):+.0f}% to {max(errs):+.0f}%"
            print(f"| {' '.join(key.split())} | {len(errs)} | {med:.1f}% | {signed:+.1f}% | "
                  f"{spread} |")  # fmt: skip
        return
    print()
    for key, errs in errors.items():
        med = statistics.median(abs(x) for x in errs)
        verdict = (
            f"  target {TARGET:.0f}%: {'yes' if med <= TARGET else 'NO'}" if key == "all" else ""
        )
        print(f"{key:32s} n={len(errs):3d} median |error| {med:5.1f}% (signed "
              f"{statistics.median(errs):+5.1f}%){verdict}")  # fmt: skip


if __name__ == "__main__":
    main()
