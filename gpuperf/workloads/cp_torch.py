"""Context parallelism as PyTorch runs it: the eager implementation's ring attention.

`torch.distributed.tensor.experimental.context_parallel` (what torchtitan runs, and
`gpuperf validate --cp` measures) shards every sequence into 2·cp chunks with its head-tail load
balance (rank r holds chunks r and 2·cp - 1 - r) and turns each SDPA call into ring attention
(`_templated_ring_attention` in torch 2.11):

- forward: K and V made contiguous, concatenated into one buffer (again before every later
  step but the last) and all-gathered once (the default rotate method, "allgather";
  asynchronous, waited for at the second step, so it hides under the first); step 0 attends
  the local queries to the local keys (causal); each of the cp - 1 later steps attends all
  local queries to half of a peer's keys (i <= rank) or half of the queries to all of them
  (i > rank), without a mask. Every step's output is cast to fp32 and merged into the running
  one by its log-sum-exp (out - sigmoid(lse_new - lse) · (out - new): three fp32 kernels of
  the output's size), and the result cast back.
- backward: fp32 accumulators for dQ, dK and dV; K and V made contiguous and all-gathered again;
  per step a flash backward (with enable_gqa's per-group sums of dK and dV over that step's
  keys), the step's dK and dV added into the buffer that travels the ring
  (an all_to_all to the next rank, fp32, once per step) and dQ accumulated in fp32; at the end
  dQ and the arrived dK, dV cast back.

The last rank (every later step i <= rank) merges at full size, the most work: it sets the pace
and is what is modelled. Megatron-LM / Transformer Engine's ring (P2P per step, no fp32 merge
kernels) is the fused implementation (transformer_layers.ring_attention).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuperf.dtypes import BYTES
from gpuperf.perfmodel.ops import P2P, Attention, Collective, Copy, Elementwise, Op
from gpuperf.workloads.transformer_layers import contiguous_kv_ops

if TYPE_CHECKING:
    from gpuperf.workloads.comm_ops import Hide
    from gpuperf.workloads.transformer_layers import Dims

PREFIX = "attn/cp."


def _sizes(d: Dims) -> tuple[int, int]:
    """Elements of the local output (= queries) and of the local K (= V)."""
    return (d.batch * d.heads * d.q_len * d.head_dim, d.batch * d.kv_heads * d.q_len * d.head_dim)


def _ew(name: str, fn: str, n: int, dt: str, n_in: int = 1, out: str | None = None,
        generic: bool = False) -> Elementwise:  # fmt: skip
    return Elementwise(PREFIX + name, fn, n, n_in, 1, dt, out, 0.0 if fn == "cast" else 1.0,  # type: ignore[arg-type]
                       generic)  # fmt: skip


def _gather_kv(d: Dims, sfx: str = "") -> list[Op]:
    """K and V made contiguous (HF hands them over as transposed views), joined, all-gathered."""
    a, n_kv = d.act, _sizes(d)[1]
    b = n_kv * BYTES[a]
    g = d.g
    return [
        *contiguous_kv_ops(n_kv, a, PREFIX + "{}_contiguous" + sfx),
        _kv_cat(d, 0, sfx),
        Collective(f"{PREFIX}kv_allgather{sfx}", "allgather", 2 * b * g.cp, g.cp, a, g.cp_nodes),
    ]


def _kv_cat(d: Dims, step: int, sfx: str = "") -> Copy:
    """torch.cat of K and V, which the ring runs before every step but the last (the all-gather
    rotater sends only the first)."""
    name = f"{PREFIX}kv_cat" + (f".ring{step}" if step else "") + sfx
    return Copy(name, 2 * _sizes(d)[1] * BYTES[d.act], d.act)


def _gqa_sums(d: Dims, kv_len: int, sfx: str) -> list[Op]:
    """SDPA's enable_gqa: each backward step's K and V gradients summed over the query groups."""
    if d.heads == d.kv_heads:
        return []
    n, group = d.batch * d.kv_heads * kv_len * d.head_dim, d.heads // d.kv_heads
    return [
        _ew(f"dk_sum{sfx}", "sum", n, d.act, group),
        _ew(f"dv_sum{sfx}", "sum", n, d.act, group),
    ]


def forward(d: Dims) -> list[Op]:
    """The forward kernels and collectives of one layer's ring attention (module docstring)."""
    a, f = d.act, "fp32"
    n_o, _ = _sizes(d)
    ops = _gather_kv(d)
    ops.append(Attention("attn/core", d.batch, d.heads, d.kv_heads, d.q_len, d.q_len,
                         d.head_dim, True, a, d.kv))  # fmt: skip
    ops.append(_ew("out_f32", "cast", n_o, a, out=f))
    for step in range(1, d.g.cp):
        if step < d.g.cp - 1:
            ops.append(_kv_cat(d, step))
        ops.append(Attention(f"attn/core.ring{step}", d.batch, d.heads, d.kv_heads, d.q_len,
                             d.q_len // 2, d.head_dim, False, a, d.kv))  # fmt: skip
        ops.append(_ew(f"out_f32.ring{step}", "cast", n_o, a, out=f))
        ops.append(_ew(f"merge_sub.ring{step}", "sub", n_o, f, 2))
        ops.append(_ew(f"merge_mul.ring{step}", "mul", n_o, f, 1, generic=True))
        ops.append(_ew(f"merge_out.ring{step}", "sub", n_o, f, 2))
    ops.append(_ew("out_cast", "cast", n_o, f, out=a))
    return ops


def backward(d: Dims) -> list[Op]:
    """The backward of forward(d), in the order the ring runs it (module docstring)."""
    a, f = d.act, "fp32"
    n_o, n_kv = _sizes(d)
    dkv_bytes = 2 * n_kv * BYTES[f]
    ops: list[Op] = [Copy(f"{PREFIX}zero_dq", n_o * 4, f), Copy(f"{PREFIX}zero_dkv", dkv_bytes, f)]
    ops += _gather_kv(d, ".bwd")
    for step in range(d.g.cp):
        sfx = f".ring{step}" if step else ""
        kv_len = d.q_len if step == 0 else d.q_len // 2
        if 0 < step < d.g.cp - 1:
            ops.append(_kv_cat(d, step, ".bwd"))
        ops.append(Attention(f"attn/core{sfx}.bwd", d.batch, d.heads, d.kv_heads, d.q_len,
                             kv_len, d.head_dim, step == 0, a, d.kv, backward=True))  # fmt: skip
        ops += _gqa_sums(d, kv_len, sfx)
        half = 1 if step == 0 else 2  # later steps add into the first half of dK, dV, then cat
        ops.append(_ew(f"dk_add{sfx}", "add", n_kv // half, f, 2))
        ops.append(_ew(f"dv_add{sfx}", "add", n_kv // half, f, 2))
        if step:
            ops.append(Copy(f"{PREFIX}dkv_update{sfx}", dkv_bytes, f))
        ops.append(Copy(f"{PREFIX}dkv_cat{sfx}", dkv_bytes, f))
        ops.append(P2P(f"{PREFIX}dkv_send{sfx}", dkv_bytes, f, d.g.cp_nodes > 1))
        ops.append(_ew(f"dq_add{sfx}", "add", n_o, f, 2))
    ops.append(_ew("dq_cast", "cast", n_o, f, out=a))
    ops.append(_ew("dkv_cast", "cast", 2 * n_kv, f, out=a))
    return ops


def hide(d: Dims, backward: bool = False) -> Hide:
    """The all-gather hides under the first step's attention; each step's dK/dV send under the
    next step's backward (the last one is waited for at once)."""
    if backward:
        out: Hide = {f"{PREFIX}kv_allgather.bwd": ("attn/core.bwd",)}
        for step in range(d.g.cp - 1):
            sfx = f".ring{step}" if step else ""
            out[f"{PREFIX}dkv_send{sfx}"] = (f"attn/core.ring{step + 1}.bwd",)
        return out
    return {f"{PREFIX}kv_allgather": ("attn/core",)}
