"""Kernel sweeps on one GPU, for calibrating and checking the time model. Run from the repo root:

    python3 benchmarks/device/run_sweeps.py OUT_DIR [--groups gemm,attention] [--rep-ms 30]

Writes OUT_DIR/<group>.json as each group finishes (format: gpuperf/measure/results.py), plus
OUT_DIR/crosscheck.json (our timer vs triton.testing.do_bench, copy bandwidth vs datasheet).
Each point is checked against an fp64 reference before it is timed. Needs torch with CUDA; the
package need not be installed. Budget: under 7 minutes on an H100 (a deadline skips what is left).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.errors import GpuperfError  # noqa: E402
from gpuperf.fileio import write_text  # noqa: E402
from gpuperf.perfmodel.ops import Copy, Elementwise, Gemm, GroupedGemm, Op  # noqa: E402
from gpuperf.workloads import single_op as so  # noqa: E402

MODELS = ("llama2-7b", "llama3-8b", "llama2-70b", "mixtral-8x7b")
TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
SIZES_B = [64 * 4**i * 2**10 for i in range(9)]  # 64 KiB .. 4 GiB, x4


def gemm_ops() -> list[Op]:
    ops: list[Op] = []
    square = [256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384]
    ops += [so.gemm(s) for s in square]
    ops += [so.gemm(s, dtype="fp16") for s in (1024, 4096, 8192)]
    ops += [so.gemm(s, dtype="fp8") for s in (1024, 2048, 4096, 8192, 16384)]
    ops += [so.gemm(s, dtype="fp32") for s in (1024, 4096)]
    ops += [so.gemm(s, dtype="tf32") for s in (1024, 4096)]
    for s in (2047, 2049, 4095, 4097, 8191, 8193):  # misaligned (breaks 16-byte alignment)
        ops.append(so.gemm(s))
    ops += [so.gemm(4096, 4096, 4095), so.gemm(4095, 4096, 4096), so.gemm(4096, 4095, 4096)]
    # Wave boundaries: 2048 x N x 4096 with N in 128-steps -> 128x128 tiles cross 132 and 264.
    for m in (2048, 4096):
        ops += [so.gemm(m, 128 * i, 4096) for i in range(6, 26)]
    return ops


def model_gemm_ops() -> list[Op]:
    from gpuperf.workloads.config import load_model
    from gpuperf.workloads.scenario import Scenario
    from gpuperf.workloads.transformer import build_ops

    ops: list[Op] = []
    seen: set[tuple] = set()
    for model in MODELS:
        cfg = load_model(model)
        for t in TOKENS:
            built = build_ops(cfg, Scenario(mode="prefill", batch=1, seq=t, ctx=t))
            for op in built:
                if not isinstance(op, Gemm) or not (
                    op.name.startswith("L0/") or op.name == "lm_head"
                ):
                    continue
                if op.name == "lm_head":
                    op = replace(op, m=t)  # logits for every token (training, scoring)
                key = (op.m, op.n, op.k, op.batch, op.dtype)
                if key not in seen:
                    seen.add(key)
                    ops.append(replace(op, name=f"{model}/t{t}/{op.name}"))
    return ops


def attention_ops() -> list[Op]:
    ops: list[Op] = []
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        batch = max(1, 8192 // seq)
        for heads, kv in ((32, 32), (32, 8), (64, 8)):
            for causal in (True, False):
                ops.append(
                    so.attention(batch=batch, heads=heads, kv_heads=kv, seq=seq, causal=causal)
                )
    for batch in (1, 4, 16, 64):
        for kv_len in (512, 2048, 8192, 32768):
            for heads, kv in ((32, 32), (32, 8)):
                kv_bytes = 2 * batch * kv * kv_len * 128 * 2
                if kv_bytes <= 16 * 2**30:
                    ops.append(
                        so.attention(
                            batch=batch, heads=heads, kv_heads=kv, seq=1, kv_len=kv_len, causal=True
                        )
                    )
    return ops


def attention_masked_ops() -> list[Op]:
    """Decode with an explicit mask over a static cache, as Hugging Face runs it under a CUDA
    graph (K/V already repeated to every query head, so MHA shapes)."""
    ops: list[Op] = []
    for batch in (1, 4, 8, 16):
        for kv_len in (1024, 2048, 4096, 8192):
            for heads in (32, 64):
                op = so.attention(batch=batch, heads=heads, seq=1, kv_len=kv_len, causal=True)
                ops.append(replace(op, name=op.name + "/mask", mask=True))
    return ops


def attention_masked_prefill_ops() -> list[Op]:
    """Prefill with an explicit boolean mask, as Hugging Face passes for a sliding window (or a
    padded batch): SDPA cannot skip the masked blocks; causal (a lower-triangular mask) and
    full."""
    ops: list[Op] = []
    for seq in (1024, 2048, 4096, 8192):
        for causal in (True, False):
            op = so.attention(batch=1, heads=32, kv_heads=8, seq=seq, causal=causal)
            ops.append(replace(op, name=op.name + "/mask", mask=True))
    return ops


def attention_masked_gather_ops() -> list[Op]:
    """Hugging Face continuous batching's paged|sdpa step: one SDPA of every query of the step
    against every gathered key (KV heads repeated to the query heads) under a boolean mask, one
    sequence of `heads` heads; head dims of Llama-3.2-1B (64) and Llama-3-8B (128)."""
    ops: list[Op] = []
    for head_dim in (64, 128):
        for q in (16, 64, 256):
            for kv_len in (2048, 8192, 32768, 65536):
                op = so.attention(batch=1, heads=32, seq=q, kv_len=kv_len, head_dim=head_dim)
                ops.append(replace(op, name=op.name + f"d{head_dim}/mask", mask=True))
    return ops


def attention_backend_ops() -> list[tuple[Op, str]]:
    op = so.attention(batch=2, heads=32, kv_heads=8, seq=4096, causal=True)
    dec = so.attention(batch=16, heads=32, kv_heads=8, seq=1, kv_len=8192, causal=True)
    return [(o, b) for o in (op, dec) for b in ("flash", "efficient", "cudnn")]


def memory_ops() -> list[Op]:
    ops: list[Op] = []
    for nbytes in SIZES_B:
        n = nbytes // 2  # bf16 elements
        ops += [so.elementwise(fn, n) for fn in ("add", "mul", "relu", "silu", "gelu")]
        rows = max(1, n // 4096)
        ops += [so.norm(fn, rows, 4096) for fn in ("rmsnorm", "layernorm", "softmax")]
        ops.append(so.copy(nbytes))
        if nbytes <= 2**30:
            ops.append(Elementwise(f"cast/{n}", "cast", n, dtype="fp32", out_dtype="bf16"))
    for rows in (1, 8, 64, 512):
        ops.append(so.norm("softmax", rows, 32000))
        ops.append(so.norm("softmax", rows, 128256))
    return ops


def relu_ops() -> list[Op]:
    """The memory sweep's relu points again: until the harness timed clamp_min.out they ran
    aten.relu.out, which is relu plus a copy into `out` (two kernels)."""
    return [op for op in memory_ops() if getattr(op, "fn", "") == "relu"]


def dtype_probe_ops() -> list[Op]:
    """The same pointwise and row kernels over 2**27 elements in bf16, fp16 and fp32: a kernel that
    is limited by instruction issue rather than bytes runs closer to the copy bandwidth when each
    element carries more bytes."""
    n = 2**27
    ops: list[Op] = []
    for dt in ("bf16", "fp16", "fp32"):
        ops += [so.elementwise(fn, n, dt) for fn in ("add", "relu", "silu", "gelu")]
        ops += [so.norm(fn, n // 4096, 4096, dt) for fn in ("rmsnorm", "layernorm", "softmax")]
    return ops


def strided_ops() -> list[Op]:
    """HF's repeat_kv (a copy out of a broadcast view), 1 MiB .. 4 GiB of output."""
    return [
        Elementwise(f"repeat_kv/{b // 2}", "repeat_kv", b // 2, 1, 1, "bf16", None, 0.0)
        for b in (2**20 * 4**i for i in range(7))
    ]


# (N, K) of the weight GEMMs of Llama-3-8B and Llama-3-70B (qkv, o, gate_up, down).
LLM_NK = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336),
          (10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672))  # fmt: skip
QUANT_TOKENS = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


def gemm_quant_ops(tokens: tuple[int, ...] = QUANT_TOKENS) -> list[Op]:
    """LLM weight GEMMs at 16-8192 tokens in the formats people deploy: bf16 (the reference),
    fp8 W8A8 with per-tensor and rowwise scales (torch._scaled_mm), int8 W8A8 (torch._int_mm),
    and weight-only int4 (group 128) and int8 with bf16 activations."""
    ops: list[Op] = []
    for n, k in LLM_NK:
        for m in tokens:
            ops.append(Gemm(f"bf16/{m}x{n}x{k}", m, n, k, "bf16"))
            ops.append(Gemm(f"fp8/{m}x{n}x{k}", m, n, k, "fp8", scales="tensor"))
            ops.append(Gemm(f"fp8row/{m}x{n}x{k}", m, n, k, "fp8", scales="row"))
            if m in (1, 2, 4, 8, 16, 64, 256, 1024, 4096):
                if m > 16:
                    ops.append(Gemm(f"int8/{m}x{n}x{k}", m, n, k, "int8"))
                ops.append(Gemm(f"w4/{m}x{n}x{k}", m, n, k, "bf16", wdtype="int4", scales="g128"))
                ops.append(Gemm(f"w8/{m}x{n}x{k}", m, n, k, "bf16", wdtype="int8"))
    return ops


def gemm_quant_decode_ops() -> list[Op]:
    """The same at 1-8 tokens (decode), where weight-only formats are meant to pay off."""
    return gemm_quant_ops((1, 2, 4, 8))


# (experts, top-k, hidden, expert width) of Mixtral-8x7B, Qwen1.5-MoE-A2.7B, Qwen3-30B-A3B,
# DeepSeek-V3 (routed experts).
MOE_SHAPES = {"mixtral": (8, 2, 4096, 14336), "qwen1.5-moe": (60, 4, 2048, 1408),
              "qwen3-moe": (128, 8, 2048, 768), "deepseek-v3": (256, 8, 7168, 2048)}  # fmt: skip
MOE_TOKENS = (1, 4, 16, 64, 256, 1024, 4096, 16384)


def grouped_gemm_ops() -> list[Op]:
    """The two grouped GEMMs of an MoE layer (gate_up: n = 2·width, k = hidden; down: n = hidden,
    k = width) as transformers' grouped_mm experts run them, over token counts."""
    ops: list[Op] = []
    for model, (e, topk, h, f) in MOE_SHAPES.items():
        for t in MOE_TOKENS:
            ops.append(GroupedGemm(f"{model}/t{t}/gate_up", t, topk, e, 2 * f, h))
            ops.append(GroupedGemm(f"{model}/t{t}/down", t, topk, e, h, f))
    return ops


# Training's token counts per GPU (a micro-batch of 2-8K tokens, and one GPU of an
# expert-parallel group receiving several ranks' copies), plus GPT-OSS-120B's experts.
MOE_TRAIN_TOKENS = (512, 2048, 8192, 32768)
MOE_TRAIN_SHAPES = {**MOE_SHAPES, "gpt-oss-120b": (128, 4, 2880, 2880)}


def _grouped_bwd(shapes: dict, tokens: tuple[int, ...], max_tokens: dict | None = None) -> list[Op]:
    """The backward of both grouped GEMMs (autograd of torch._grouped_mm) of each model's experts
    in `shapes` at each token count (up to `max_tokens[model]` where given): the input gradient
    (dY @ W per expert: n and k swapped, the weights row-major) and the weight gradient (each
    expert's X_eᵀ @ dY_e)."""
    ops: list[Op] = []
    for model, (e, topk, h, f) in shapes.items():
        for t in tokens:
            if t > (max_tokens or {}).get(model, t):
                continue
            for part, n, k in (("gate_up", 2 * f, h), ("down", h, f)):
                name = f"{model}/t{t}/{part}"
                ops.append(GroupedGemm(name + ".dgrad", t, topk, e, k, n))
                ops.append(GroupedGemm(name + ".wgrad", t, topk, e, n, k, wgrad=True))
    return ops


def grouped_gemm_bwd_ops() -> list[Op]:
    """_grouped_bwd over MOE_TRAIN_SHAPES (DeepSeek-V3's up to 8192 tokens: 262K rows of 7168
    would take 7.5 GB for the gradients alone)."""
    return _grouped_bwd(MOE_TRAIN_SHAPES, MOE_TRAIN_TOKENS, {"deepseek-v3": 8192})


# Experts the grouped backward's fit never saw (grouped_wgrad_overlap came from the shapes
# above): Qwen3-235B-A22B, GPT-OSS-20B, OLMoE-1B-7B, Qwen2-57B-A14B and Mixtral-8x22B.
MOE_HELD_SHAPES = {"qwen3-235b": (128, 8, 4096, 1536), "gpt-oss-20b": (32, 4, 2880, 2880),
                   "olmoe": (64, 8, 2048, 1024), "qwen2-57b": (64, 8, 3584, 2560),
                   "mixtral-8x22b": (8, 2, 6144, 16384)}  # fmt: skip
MOE_HELD_TOKENS = (1024, 4096, 16384)


def grouped_gemm_bwd_held_ops() -> list[Op]:
    """_grouped_bwd over experts of other models (MOE_HELD_SHAPES): all held out."""
    return _grouped_bwd(MOE_HELD_SHAPES, MOE_HELD_TOKENS)


def grouped_gemm_fp8_ops() -> list[Op]:
    """Both forward grouped GEMMs of MOE_TRAIN_SHAPES' experts and the held-out experts at
    training's token counts, in fp8 (torch._scaled_grouped_mm, rowwise scales) and in bf16
    beside them (the same shapes, the same routing draw)."""
    ops: list[Op] = []
    for model, (e, topk, h, f) in {**MOE_TRAIN_SHAPES, **MOE_HELD_SHAPES}.items():
        for t in MOE_TRAIN_TOKENS:
            if model == "deepseek-v3" and t > 8192:
                continue
            for part, n, k in (("gate_up", 2 * f, h), ("down", h, f)):
                for dt in ("fp8", "bf16"):
                    ops.append(GroupedGemm(f"{model}/t{t}/{part}/{dt}", t, topk, e, n, k, dt))
    return ops


# Decode's token counts: a serving step's batch, where the kernel's setup and its few tiles
# set the time (the grouped sweep above has 1, 4, 16 and 64 only, most of them held out).
MOE_DECODE_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128)


def grouped_gemm_decode_ops() -> list[Op]:
    """Both forward grouped GEMMs of every MoE shape above (the grouped sweep's, GPT-OSS-120B's
    and the held-out experts') at decode's token counts, in bf16 and fp8 (rowwise scales, each
    expert's rows padded to 16 as torch._scaled_grouped_mm requires)."""
    ops: list[Op] = []
    for model, (e, topk, h, f) in {**MOE_TRAIN_SHAPES, **MOE_HELD_SHAPES}.items():
        for t in MOE_DECODE_TOKENS:
            for part, n, k in (("gate_up", 2 * f, h), ("down", h, f)):
                for dt in ("bf16", "fp8"):
                    ops.append(GroupedGemm(f"{model}/t{t}/{part}/{dt}", t, topk, e, n, k, dt))
    return ops


GROUPS = {
    "gemm": gemm_ops,
    "gemm_models": model_gemm_ops,
    "attention": attention_ops,
    "attention_backends": attention_backend_ops,
    "attention_masked": attention_masked_ops,
    "attention_masked_prefill": attention_masked_prefill_ops,
    "attention_masked_gather": attention_masked_gather_ops,
    "strided": strided_ops,
    "memory": memory_ops,
    "relu": relu_ops,
    "dtype_probe": dtype_probe_ops,
    "gemm_quant": gemm_quant_ops,
    "gemm_quant_decode": gemm_quant_decode_ops,
    "grouped_gemm": grouped_gemm_ops,
    "grouped_gemm_bwd": grouped_gemm_bwd_ops,
    "grouped_gemm_bwd_held": grouped_gemm_bwd_held_ops,
    "grouped_gemm_fp8": grouped_gemm_fp8_ops,
    "grouped_gemm_decode": grouped_gemm_decode_ops,
}


def _predictor():
    try:
        from gpuperf.hardware.detect import detect_gpu
        from gpuperf.perfmodel.roofline import op_time

        spec = detect_gpu(0)
        return spec, (lambda op: op_time(op, spec).time * 1e3)
    except Exception as exc:  # no profile for this GPU: measure anyway
        print(f"  (no prediction: {exc})", flush=True)
        return None, (lambda op: None)


def run_group(name, items, out_dir, env, budget, predict, deadline, device="cuda", limit=0) -> dict:
    from gpuperf.measure.kernels import measure_op
    from gpuperf.measure.results import ResultsFile, measurement_row

    f = ResultsFile(out_dir / f"{name}.json", env, name)
    f.data["skipped"] = []
    if name.endswith("_held"):  # measured to check the model: no fit reads its rows
        f.data["split"] = "held-out"
    t0 = time.monotonic()
    errors = []
    if limit:  # smoke test: the first `limit` small points
        items = [i for i in items if (i[0] if isinstance(i, tuple) else i).cost().bytes < 2**24]
        items = items[:limit]
    for item in items:
        op, backend = item if isinstance(item, tuple) else (item, None)
        if time.monotonic() > deadline:
            f.data["skipped"].append({"name": op.name, "why": "deadline"})
            continue
        try:
            m = measure_op(op, device, budget, backend)
        except GpuperfError as exc:
            f.data["skipped"].append({"name": op.name, "shape": op.shape, "why": str(exc)})
            print(f"  skip {op.name}: {exc}", flush=True)
            continue
        try:
            pred = predict(op)
        except Exception as exc:
            pred = None
            errors.append(str(exc))
        f.add(measurement_row(m, pred))
    f.write()
    rows = f.rows
    errs = [r["predicted_ms"] / r["measured_ms"] - 1 for r in rows if r["predicted_ms"]]
    summary = {
        "group": name,
        "points": len(rows),
        "skipped": len(f.data["skipped"]),
        "seconds": time.monotonic() - t0,
        "median_abs_err_pct": 100 * statistics.median(map(abs, errs)) if errs else None,
    }
    print(
        f"[{name}] {summary['points']} points, {summary['skipped']} skipped, "
        f"{summary['seconds']:.0f} s, median |pred/meas-1| "
        + (f"{summary['median_abs_err_pct']:.0f}%" if errs else "n/a"),
        flush=True,
    )
    return summary


def crosscheck(out_dir: Path, spec, budget) -> dict:
    """Our timer vs triton.testing.do_bench (median) on a few GEMMs; copy vs datasheet HBM."""
    import torch

    from gpuperf.measure.kernels import measure_op
    from gpuperf.measure.timing import time_fn

    res: dict = {"gemm": []}
    try:
        from triton.testing import do_bench
    except ImportError:
        do_bench = None
    for m, n, k in ((1, 4096, 4096), (1024, 1024, 1024), (4096, 4096, 4096), (8192, 8192, 8192)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t()

        def bench(a=a, b=b):
            return do_bench(lambda: a @ b, warmup=25, rep=100, return_mode="median")

        # do_bench before and after ours, so clock drift under sustained load favours neither.
        before = bench() if do_bench else None
        ours = time_fn(lambda a=a, b=b: a @ b, "cuda", budget).median_s * 1e3
        after = bench() if do_bench else None
        theirs = None if before is None else (before + after) / 2
        agree = None if theirs is None else 100 * (ours / theirs - 1)
        res["gemm"].append(
            {"mnk": [m, n, k], "ours_ms": ours, "do_bench_ms": theirs, "diff_pct": agree}
        )
        print(
            f"  crosscheck {m}x{n}x{k}: ours {ours:.4f} ms, do_bench "
            + (f"{theirs:.4f} ms ({agree:+.1f}%)" if theirs else "n/a"),
            flush=True,
        )
    mc = measure_op(Copy("copy/1GiB", 2**30), "cuda", budget)
    res["copy_1GiB_gbps"] = mc.gbps
    if spec is not None:
        res["copy_pct_of_datasheet"] = 100 * mc.gbps * 1e9 / spec.hbm_bw
    print(
        f"  copy 1 GiB: {mc.gbps:.0f} GB/s (read+write)"
        + (f" = {res['copy_pct_of_datasheet']:.0f}% of datasheet" if spec else ""),
        flush=True,
    )
    write_text(out_dir / "crosscheck.json", json.dumps(res, indent=1))
    return res


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir", type=Path)
    p.add_argument("--groups", default=",".join(GROUPS), help=f"comma list of {', '.join(GROUPS)}")
    p.add_argument("--rep-ms", type=float, default=50.0)
    p.add_argument("--warmup-ms", type=float, default=10.0)
    p.add_argument("--max-minutes", type=float, default=6.5)
    p.add_argument("--device", default="cuda", help="cpu: a smoke test of this script")
    p.add_argument("--limit", type=int, default=0, help="at most N small points per group")
    p.add_argument("--no-crosscheck", action="store_true", help="skip the timer cross-check")
    a = p.parse_args()
    import torch

    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget

    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA GPU (use --device cpu --limit 3 for a smoke test)", file=sys.stderr)
        return 3
    start = time.monotonic()
    deadline = start + 60 * a.max_minutes
    a.out_dir.mkdir(parents=True, exist_ok=True)
    env = environment(a.device)
    write_text(a.out_dir / "env.json", json.dumps(env, indent=1, default=str))
    print(f"{env.get('gpu')} · torch {env.get('torch')} · CUDA {env.get('cuda')}", flush=True)
    spec, predict = _predictor() if a.device == "cuda" else (None, lambda op: None)
    budget = Budget(warmup_ms=a.warmup_ms, rep_ms=a.rep_ms, max_reps=500)
    summaries = []
    for name in a.groups.split(","):
        if name not in GROUPS:
            print(f"unknown group {name!r}; known: {', '.join(GROUPS)}", file=sys.stderr)
            return 2
        items = GROUPS[name]()
        print(f"[{name}] {len(items)} points ...", flush=True)
        summaries.append(
            run_group(name, items, a.out_dir, env, budget, predict, deadline, a.device, a.limit)
        )
    if a.device == "cuda" and not a.no_crosscheck:
        crosscheck(a.out_dir, spec, budget)
    print(f"\n{'group':20s} {'points':>7s} {'skipped':>8s} {'s':>6s} {'med |err| %':>12s}")
    for s in summaries:
        e = s["median_abs_err_pct"]
        print(
            f"{s['group']:20s} {s['points']:7d} {s['skipped']:8d} {s['seconds']:6.0f} "
            f"{'n/a' if e is None else f'{e:.0f}':>12s}"
        )
    print(f"total {time.monotonic() - start:.0f} s; results in {a.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
