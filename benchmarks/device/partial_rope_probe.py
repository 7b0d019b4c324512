"""Partial rotary embeddings as GPT-NeoX's and Nemotron's modeling code runs them, kernel by kernel.

A layer with partial_rotary_factor < 1 (Pythia 0.25, Nemotron-4 / Minitron 0.5) rotates the
first dims of each head and concatenates the rest back: q[..., :rot] and q[..., rot:] are
strided views of q (itself a transposed view of the projection's output), so every kernel of
apply_rotary_pos_emb reads strided operands, and the final torch.cat copies the whole of q and k
out of two of them. A profiled training step of Pythia-6.9B (e2e_trainprof.json) spent 3.5 ms in
CatArrayBatchedCopy where the model said 0.6. This times each expression as the modeling code
writes it (transformers 5.x), forward and, for the cats, backward, with the kernels it ran.

    python3 benchmarks/device/partial_rope_probe.py OUT_DIR

Writes OUT_DIR/partial_rope.json: rows with the expression, its kernels (name, µs) and the
median over profiled calls; where the expression is one kernel of gpuperf's eager layer, its
"op" and measured_ms (the sweep format: benchmarks/accuracy.py predicts it).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from train_kernels_probe import kernel_calls, short_name  # noqa: E402  (this folder)

# (name, batch, tokens, heads, kv_heads, head_dim, rotary dims, fused qkv projection)
SHAPES = [("pythia-6.9b", 2, 2048, 32, 32, 128, 32, True),
          ("pythia-1b", 4, 2048, 8, 8, 256, 64, True),
          ("nemotron-4-15b", 2, 2048, 48, 8, 128, 64, False),
          ("minitron-8b", 2, 2048, 48, 8, 128, 64, False)]  # fmt: skip


def op_of(expr: str, b: int, T: int, H: int, d: int, rot: int):  # noqa: ANN201
    """The kernel of gpuperf's eager layer an expression is (None for several kernels)."""
    from gpuperf.perfmodel.ops import Copy, Elementwise

    n_rot, n = b * H * T * rot, b * H * T * d
    ops = {
        "q_rot * cos": Elementwise("rope/mul_cos", "mul", n_rot, generic=True),
        "-x2 (rotate_half)": Elementwise("rope/neg", "neg", n_rot // 2, generic=True),
        "cat((-x2, x1)) (rotate_half)": Copy("rope/cat", n_rot * 2, generic=True),
        "rotate_half(q_rot) * sin": Elementwise("rope/mul_sin", "mul", n_rot, generic=True),
        "cat([q_embed, q_pass])": Copy("rope/cat_pass", n * 2, generic=True),
        "g[..., :rot].contiguous()": Elementwise("rope/rot_slice.bwd", "slice_backward", n_rot,
                                                 generic=True),
    }  # fmt: skip
    return ops.get(expr)


def cases(torch, b: int, T: int, H: int, KV: int, d: int, rot: int, fused: bool) -> list:  # noqa: ANN001, PLR0913
    """(expression, callable) pairs, inputs made once outside the timed calls."""
    dev, bf = "cuda", torch.bfloat16
    if fused:  # GPTNeoXAttention: one query_key_value projection, viewed per head, transposed
        qkv = torch.randn(b, T, H * 3 * d, device=dev, dtype=bf)
        q, k, _ = qkv.view(b, T, -1, 3 * d).transpose(1, 2).chunk(3, dim=-1)
    else:  # NemotronAttention: q_proj and k_proj apart, each viewed and transposed
        q = torch.randn(b, T, H * d, device=dev, dtype=bf).view(b, T, H, d).transpose(1, 2)
        k = torch.randn(b, T, KV * d, device=dev, dtype=bf).view(b, T, KV, d).transpose(1, 2)
    cos = torch.randn(b, T, rot, device=dev, dtype=bf).unsqueeze(1)
    sin = torch.randn(b, T, rot, device=dev, dtype=bf).unsqueeze(1)
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    half = rot // 2
    neg = -q_rot[..., half:]
    rh = torch.cat((neg, q_rot[..., :half]), dim=-1)
    qe = q_rot * cos + rh * sin
    full = torch.cat([qe, q_pass], dim=-1)
    # the cat's backward: the gradient sliced back into its two inputs (views, no kernel), which
    # reach q's strided slices through SliceBackward (a zero-filled tensor and a copy each)
    g = torch.randn_like(full)
    g_rot, g_pass = g[..., :rot], g[..., rot:]
    qg = torch.zeros(b, H, T, d, device=dev, dtype=bf)

    def slice_bwd() -> None:
        z = torch.zeros(b, H, T, d, device=dev, dtype=bf)
        z[..., rot:].copy_(g_pass)
        qg.add_(z)

    return [
        ("q_rot * cos", lambda: q_rot * cos),
        ("-x2 (rotate_half)", lambda: -q_rot[..., half:]),
        ("cat((-x2, x1)) (rotate_half)", lambda: torch.cat((neg, q_rot[..., :half]), dim=-1)),
        ("rotate_half(q_rot) * sin", lambda: rh * sin),
        ("q_rot*cos + rh*sin", lambda: q_rot * cos + rh * sin),
        ("cat([q_embed, q_pass])", lambda: torch.cat([qe, q_pass], dim=-1)),
        ("k: cat([k_embed, k_pass])", lambda: torch.cat([k[..., :rot].contiguous(),
                                                          k[..., rot:]], dim=-1)),
        ("g[..., :rot].contiguous()", lambda: g_rot.contiguous()),
        ("slice backward of q_pass (zeros, copy, add)", slice_bwd),
    ]  # fmt: skip


def main() -> int:
    import torch

    from gpuperf.fileio import json_safe, write_text
    from gpuperf.measure.env import environment
    from gpuperf.perfmodel.ops_io import op_to_dict

    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    data = {"env": environment("cuda"), "kind": "partial_rope", "rows": []}
    for name, b, T, H, KV, d, rot, fused in SHAPES:
        for expr, fn in cases(torch, b, T, H, KV, d, rot, fused):
            for _ in range(3):
                fn()
            calls = kernel_calls(torch, fn)
            us = statistics.median(sum(u for _, u in c) for c in calls)
            row = {
                "model": name, "shape": {"batch": b, "tokens": T, "heads": H, "kv_heads": KV,
                                         "head_dim": d, "rotary_dims": rot, "fused_qkv": fused},
                "expression": expr, "measured_us": us,
                "kernels": [(short_name(k), round(u, 2)) for k, u in calls[-1]],
            }  # fmt: skip
            if (op := op_of(expr, b, T, H, d, rot)) is not None:
                op = replace(op, name=f"{name}/{op.name}")
                row |= {"op": op_to_dict(op), "name": op.name, "measured_ms": us / 1e3}
            data["rows"].append(row)
            ran = " + ".join(short_name(k)[:40] for k, _ in calls[-1])
            print(f"{name:16s} {expr:44s} {us:9.1f} us  {ran}", flush=True)
        torch.cuda.empty_cache()
    write_text(out / "partial_rope.json", json.dumps(json_safe(data), indent=1, allow_nan=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
