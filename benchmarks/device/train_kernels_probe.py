"""The kernels of an eager training step that the whole-step runs showed mispredicted, timed alone.

Kernel profiles of Hugging Face training steps (e2e_unseen.json) put three groups apart from
the model: the attention backward (cuDNN's bprop kernel and its helpers: 2.8-3.3x the forward,
where the untuned default efficiency said 4.7x), torch.optim.AdamW's multi-tensor kernels
(1.2-1.4x what streaming their bytes takes), and what GPT-2-like layers add in training
(dropout kernels, the bias gradients' column sums). This times each alone, with the kernels it
ran (torch.profiler):

- SDPA forward (grad on, as in training) and backward (torch.autograd.grad of one call), causal,
  bf16, MHA and GQA (enable_gqa), head dims 64-256, some with dropout_p = 0.1;
- torch.optim.AdamW(foreach=True).step() over parameter lists shaped like real models (bf16 and
  fp32): each of its eight foreach ops' kernels apart, in the order they ran;
- nn.functional.dropout forward and backward, and grad.sum(0) (a Linear's bias gradient).

    python3 benchmarks/device/train_kernels_probe.py OUT_DIR

Writes OUT_DIR/train_kernels.json in the sweep format (gpuperf/measure/results.py): each row's
"op" is the kernel as gpuperf describes it, its measured_ms the median over profiled calls of
the kernels that op stands for (detail: every kernel, and the whole call timed with events).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpuperf.perfmodel.ops import Attention, Elementwise, Reduce  # noqa: E402
from gpuperf.perfmodel.ops_io import op_to_dict  # noqa: E402

# (batch, heads, kv_heads, seq, head_dim, dropout_p): training shapes of the e2e runs' models
# (Llama-2/3, Qwen3-0.6B, Nemotron-4, GPT-2 XL, Llama-3.2-1B, Qwen2-7B, Gemma-2) and around them
SDPA = [(1, 32, 32, 2048, 128, 0.0), (1, 32, 8, 2048, 128, 0.0), (2, 32, 8, 4096, 128, 0.0),
        (4, 32, 32, 1024, 128, 0.0), (8, 16, 8, 2048, 128, 0.0), (2, 48, 8, 2048, 128, 0.0),
        (8, 25, 25, 1024, 64, 0.0), (8, 32, 8, 1024, 64, 0.0), (1, 32, 32, 8192, 128, 0.0),
        (1, 64, 8, 4096, 128, 0.0), (4, 16, 16, 2048, 64, 0.0), (2, 32, 32, 512, 128, 0.0),
        (16, 12, 12, 1024, 64, 0.0), (2, 28, 4, 2048, 128, 0.0), (1, 16, 8, 4096, 256, 0.0),
        (1, 40, 8, 16384, 128, 0.0), (8, 25, 25, 1024, 64, 0.1), (2, 32, 32, 2048, 128, 0.1),
        (4, 16, 16, 2048, 64, 0.1),
        # more head dims and shapes (Pythia's 80, Phi-3's 96, Gemma's 256) and dropout ones
        (4, 32, 32, 2048, 64, 0.0), (2, 16, 16, 4096, 64, 0.0), (1, 32, 32, 8192, 64, 0.0),
        (8, 12, 12, 2048, 64, 0.0), (16, 16, 16, 512, 64, 0.0), (2, 64, 8, 2048, 64, 0.0),
        (4, 32, 32, 2048, 80, 0.0), (8, 20, 20, 1024, 80, 0.0), (2, 32, 32, 4096, 96, 0.0),
        (8, 32, 32, 1024, 96, 0.0), (4, 8, 8, 4096, 128, 0.0), (1, 96, 8, 4096, 128, 0.0),
        (16, 32, 8, 512, 128, 0.0), (2, 8, 4, 4096, 256, 0.0), (4, 16, 8, 2048, 256, 0.0),
        (1, 32, 16, 8192, 256, 0.0), (16, 12, 12, 1024, 64, 0.1), (2, 25, 25, 2048, 64, 0.1),
        (4, 32, 32, 1024, 128, 0.1), (1, 48, 48, 2048, 128, 0.1), (8, 16, 16, 1024, 96, 0.1),
        (2, 32, 8, 4096, 128, 0.1),
        # a third set, mostly the backward of head dim 128 at the batch and length of training
        (1, 32, 8, 4096, 128, 0.0), (4, 32, 8, 2048, 128, 0.0), (2, 40, 8, 8192, 128, 0.0),
        (8, 32, 8, 1024, 128, 0.0), (2, 64, 8, 2048, 128, 0.0), (1, 24, 8, 8192, 128, 0.0),
        (4, 28, 4, 2048, 128, 0.0), (2, 16, 16, 8192, 128, 0.0), (16, 8, 8, 2048, 128, 0.0),
        (1, 128, 8, 2048, 128, 0.0), (8, 32, 32, 512, 128, 0.0), (1, 56, 8, 4096, 128, 0.0),
        (4, 32, 32, 2048, 96, 0.0), (2, 40, 40, 2048, 80, 0.0), (8, 16, 16, 2048, 64, 0.1),
        (4, 12, 12, 1024, 64, 0.1), (1, 32, 32, 4096, 128, 0.1),
        (8, 8, 8, 2048, 64, 0.0)]  # fmt: skip

# Parameter lists: (name, hidden, intermediate, layers, vocab, heads, kv_heads, head_dim, tied,
# biases and LayerNorm (GPT-2-like), dtype)
PARAM_SETS = [("qwen3-0.6b", 1024, 3072, 28, 151936, 16, 8, 128, True, False, "bf16"),
              ("llama3.2-1b", 2048, 8192, 16, 128256, 32, 8, 64, True, False, "bf16"),
              ("gpt2-xl", 1600, 6400, 48, 50257, 25, 25, 64, True, True, "bf16"),
              ("llama-3b", 3072, 8192, 28, 128256, 24, 8, 128, False, False, "bf16"),
              ("qwen3-0.6b-fp32", 1024, 3072, 28, 151936, 16, 8, 128, True, False, "fp32"),
              ("small-fp32", 768, 3072, 12, 32000, 12, 12, 64, False, False, "fp32")]  # fmt: skip

# torch/optim/adamw.py _multi_tensor_adamw, non-capturable: the eight foreach ops in their order,
# as gpuperf's eager optimizer describes them: (name, fn, tensors read)
ADAMW_OPS = [("decay", "mul", 1), ("m_lerp", "lerp", 2), ("v_scale", "mul", 1),
             ("v_addcmul", "addcmul", 2), ("v_sqrt", "sqrt", 1), ("bias_corr", "div", 1),
             ("eps", "add", 1), ("update", "addcdiv", 3)]  # fmt: skip

DROPOUT = [(8192, 1600), (8192, 4096), (16384, 6144), (2048, 2048), (4096, 1024), (8192, 2048),
           (32768, 1600), (4096, 8192), (16384, 2048), (65536, 768), (8192, 768), (4096, 2560),
           (16384, 4096), (8192, 5120), (2048, 6400), (32768, 1024), (1024, 4096),
           (8192, 8192)]  # fmt: skip
BIAS_GRAD = [(8192, 1600), (8192, 4800), (8192, 6400), (4096, 4096), (4096, 12288),
             (16384, 3584), (2048, 768)]  # fmt: skip


def kernel_calls(torch, fn, calls: int = 5) -> list[list[tuple[str, float]]]:  # noqa: ANN001
    """The kernels (name, µs) of each of `calls` calls of fn, in the order they ran."""
    from torch.profiler import ProfilerActivity, profile

    out = []
    for _ in range(calls):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                     key=lambda e: e.time_range.start)  # fmt: skip
        out.append([(e.name, float(e.device_time)) for e in evs])
    return out


def _row(op, measured_us: float, event_ms: float | None, detail: dict) -> dict:  # noqa: ANN001
    cost = op.cost()
    return {"op": op_to_dict(op), "name": op.name, "kind": op.kind, "shape": op.shape,
            "dtype": op.dtype, "flops": cost.flops, "bytes": cost.bytes,
            "measured_ms": measured_us / 1e3, "event_ms": event_ms, "detail": detail,
            "method": "torch.profiler kernel durations, median of calls"}  # fmt: skip


def short_name(name: str) -> str:
    return name.replace("void at::native::", "").replace("(anonymous namespace)::", "")[:110]


def _sdpa_shape(
    torch,
    shape: tuple,
    budget,
    time_fn,
    *,
    kv_len: int | None = None,
    causal: bool = True,
    name: str = "",
) -> list[dict]:  # noqa: ANN001
    """The forward and the backward row of one SDPA shape (b, heads, kv heads, queries, head
    dim, dropout): against as many keys, causal, unless `kv_len` and `causal` say otherwise;
    `name`: the rows' name (default sdpa/b../h../kv../s../d..)."""
    import torch.nn.functional as F

    b, H, KV, s, d, p = shape
    kv_len = kv_len or s
    q = torch.randn(b, H, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(b, KV, kv_len, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn_like(k, requires_grad=True)

    def fwd():  # noqa: ANN202
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=causal,
                                              enable_gqa=KV != H)  # fmt: skip

    out = fwd()
    go = torch.randn_like(out)

    def bwd():  # noqa: ANN202
        return torch.autograd.grad(out, (q, k, v), go, retain_graph=True)

    name = name or f"sdpa/b{b}/h{H}/kv{KV}/s{s}/d{d}" + (f"/p{p}" if p else "")
    rows = []
    for backward, fn in ((False, fwd), (True, bwd)):
        t = time_fn(fn, "cuda", budget)
        calls = kernel_calls(torch, fn)
        # cuDNN's head reductions of dK and dV under GQA are gpuperf's attn/core.dk_sum and
        # dv_sum, charged apart: left out of the attention call's kernels
        core = statistics.median(sum(us for n, us in c if "reduce_head" not in n) for c in calls)
        sums = statistics.median(sum(us for n, us in c if "reduce_head" in n) for c in calls)
        op = Attention(name + ("/bwd" if backward else ""), b, H, KV, s, kv_len, d, causal,
                       "bf16", backward=backward, dropout=p > 0)  # fmt: skip
        rows.append(_row(op, core, t.median_s * 1e3, {
            "dropout_p": p, "head_sums_us": sums,
            "kernels": [(short_name(n), round(us, 2)) for n, us in calls[-1]]}))  # fmt: skip
        print(f"{op.name:34s} {core:9.1f} us (events {t.median_s * 1e6:9.1f}) head sums"
              f" {sums:7.1f}", flush=True)  # fmt: skip
    return rows


def sweep_shapes(torch, shapes, shape_rows, budget, time_fn, data: dict, path) -> None:  # noqa: ANN001
    """Each shape's rows (`shape_rows(torch, shape, budget, time_fn)`) into data["rows"], the file
    at `path` rewritten after every shape; a shape the GPU cannot run (a RuntimeError: out of
    memory, no kernel) is listed under data["skipped"] and does not stop the others."""
    from gpuperf.fileio import json_safe, write_text

    for shape in shapes:
        try:
            data["rows"] += shape_rows(torch, shape, budget, time_fn)
        except RuntimeError as exc:
            data.setdefault("skipped", []).append({"shape": shape, "error": str(exc)[:300]})
            print(f"{shape}: {str(exc).splitlines()[0][:200]}", flush=True)
        torch.cuda.empty_cache()
        write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))


def sdpa_rows(torch, budget, time_fn) -> list[dict]:  # noqa: ANN001
    rows = []
    for shape in SDPA:
        rows += _sdpa_shape(torch, shape, budget, time_fn)
        torch.cuda.empty_cache()
    return rows


def _shapes(h, inter, layers, vocab, heads, kv, hd, tied, gpt2):  # noqa: ANN001, ANN202
    """The parameter shapes of a decoder in the order HF's model.parameters() yields them."""
    out = [(vocab, h)] + ([(1024, h)] if gpt2 else [])
    for _ in range(layers):
        if gpt2:  # ln_1 (w, b), c_attn (w, b), c_proj (w, b), ln_2, c_fc, mlp c_proj
            out += [(h,), (h,), (h, 3 * h), (3 * h,), (h, h), (h,), (h,), (h,), (h, inter),
                    (inter,), (inter, h), (h,)]  # fmt: skip
        else:  # q, k, v, o, gate, up, down, two RMSNorm weights
            out += [(heads * hd, h), (kv * hd, h), (kv * hd, h), (h, heads * hd), (inter, h),
                    (inter, h), (h, inter), (h,), (h,)]  # fmt: skip
    out += [(h,), (h,)] if gpt2 else [(h,)]
    if not tied:
        out.append((vocab, h))
    return out


def adamw_rows(torch, time_fn, Budget) -> list[dict]:  # noqa: ANN001
    rows = []
    for name, h, inter, layers, vocab, heads, kv, hd, tied, gpt2, dt in PARAM_SETS:
        dtype = torch.bfloat16 if dt == "bf16" else torch.float32
        shapes = _shapes(h, inter, layers, vocab, heads, kv, hd, tied, gpt2)
        params = [torch.nn.Parameter(torch.randn(*s, device="cuda", dtype=dtype) * 0.02)
                  for s in shapes]  # fmt: skip
        for p in params:
            p.grad = torch.randn_like(p) * 1e-3
        P = sum(p.numel() for p in params)
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=True)
        for _ in range(2):
            opt.step()  # the states exist from the first step on
        t = time_fn(opt.step, "cuda", Budget(warmup_ms=5, rep_ms=60, graphs=False,
                                              flush_l2=False))  # fmt: skip
        calls = kernel_calls(torch, opt.step, calls=3)
        # Consecutive launches of one kernel are one foreach op (each op's kernels differ from
        # the next op's: functor, list depth or scalar list)
        per_call = []
        for c in calls:
            groups: list[list] = []
            for n, us in c:
                if "multi_tensor_apply" not in n:
                    continue
                if groups and groups[-1][0] == n:
                    groups[-1][1] += 1
                    groups[-1][2] += us
                else:
                    groups.append([n, 1, us])
            per_call.append(groups)
        ok = all(len(g) == len(ADAMW_OPS) for g in per_call)
        fused = torch.optim.AdamW(params, lr=1e-5, fused=True)
        fused.step()
        tf = time_fn(fused.step, "cuda", Budget(warmup_ms=5, rep_ms=40, graphs=False,
                                                 flush_l2=False))  # fmt: skip
        print(
            f"adamw {name:18s} P={P / 1e9:.3f}B step {t.median_s * 1e3:8.2f} ms"
            f" fused {tf.median_s * 1e3:8.2f} ms groups {[len(g) for g in per_call]}",
            flush=True,
        )
        for i, (op_name, fn, n_in) in enumerate(ADAMW_OPS):
            if not ok:
                break
            us = statistics.median(g[i][2] for g in per_call)
            op = Elementwise(f"adamw/{name}/{op_name}", fn, P, n_in, 1, dt, foreach=True)
            rows.append(_row(op, us, None, {
                "kernel": short_name(per_call[-1][i][0]), "launches": per_call[-1][i][1],
                "tensors": len(params), "step_ms": t.median_s * 1e3,
                "fused_step_ms": tf.median_s * 1e3}))  # fmt: skip
            print(f"   {op_name:10s} {us / 1e3:8.3f} ms  launches {per_call[-1][i][1]:4d}"
                  f"  {short_name(per_call[-1][i][0])[:70]}", flush=True)  # fmt: skip
        if not ok:
            rows.append(
                {
                    "name": f"adamw/{name}",
                    "error": f"foreach groups {[len(g) for g in per_call]} != {len(ADAMW_OPS)}",
                    "detail": {"kernels": [(short_name(n), c, us) for n, c, us in per_call[-1]]},
                }
            )
        del params, opt, fused
        torch.cuda.empty_cache()
    return rows


def _timed_row(torch, op, fn, budget, time_fn) -> dict:  # noqa: ANN001
    """A row of `op`: every kernel of fn(), median over calls."""
    t = time_fn(fn, "cuda", budget)
    calls = kernel_calls(torch, fn)
    us = statistics.median(sum(u for _, u in c) for c in calls)
    print(f"{op.name:34s} {us:9.1f} us (events {t.median_s * 1e6:9.1f})", flush=True)
    return _row(op, us, t.median_s * 1e3,
                {"kernels": [(short_name(n), round(u, 2)) for n, u in calls[-1]]})  # fmt: skip


def _dropout(torch, T: int, h: int, budget, time_fn) -> list[dict]:  # noqa: ANN001
    import torch.nn.functional as F

    x = torch.randn(T, h, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = F.dropout(x, 0.1, training=True)
    go = torch.randn_like(y)
    fwd = Elementwise(f"dropout/T{T}/h{h}", "dropout", T * h, 1, 1, "bf16", None, 2.0)
    bwd = Elementwise(f"dropout/T{T}/h{h}/bwd", "dropout_bwd", T * h, 1, 1, "bf16", None, 1.0)
    return [_timed_row(torch, fwd, lambda: F.dropout(x, 0.1, training=True), budget, time_fn),
            _timed_row(torch, bwd, lambda: torch.autograd.grad(y, x, go, retain_graph=True),
                       budget, time_fn)]  # fmt: skip


def misc_rows(torch, time_fn, budget) -> list[dict]:  # noqa: ANN001
    rows = []
    for T, h in DROPOUT:
        rows += _dropout(torch, T, h, budget, time_fn)
    for T, n in BIAS_GRAD:
        g = torch.randn(T, n, device="cuda", dtype=torch.bfloat16)
        op = Reduce(f"bias_grad/T{T}/n{n}", "sum", n, T, 1, "bf16")
        rows.append(_timed_row(torch, op, lambda g=g: g.sum(0), budget, time_fn))
    return rows


def main() -> int:
    import torch

    from gpuperf.fileio import json_safe, write_text
    from gpuperf.measure.env import environment
    from gpuperf.measure.timing import Budget, time_fn

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "train_kernels", "rows": []}
    path = out / "train_kernels.json"
    budget = Budget(warmup_ms=10, rep_ms=40, graphs=False)
    data["rows"] += misc_rows(torch, time_fn, budget)
    write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    data["rows"] += adamw_rows(torch, time_fn, Budget)
    write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    data["rows"] += sdpa_rows(torch, budget, time_fn)
    write_text(path, json.dumps(json_safe(data), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
