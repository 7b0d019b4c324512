"""FlashAttention time: query tiles × KV blocks over SM waves, Tensor-Core matmuls plus exp.

Work decomposition (FlashAttention-2 forward): each (batch, head) is cut into query tiles of
BLOCK_M rows; one CTA per tile walks the KV blocks (BLOCK_N keys) it may see. With causal masking
tile j sees only keys up to its last query, so per-tile work grows along the sequence (the last
tile sees them all). Decode-like calls (q_len < BLOCK_M) pack the query heads that share a KV head
into one tile (FA2's GQA swap) and split the KV sequence over CTAs to fill the GPU (split-KV,
chosen by least predicted time), paying for fp32 partial outputs that a combine step reads.

One (query, key) pair costs, on one SM,
  t_pair = SMs · (matmul_flops_per_pair / peak + ops / sfu_rate − overlap · min(both)) / eff
with 4·d matmul FLOPs (QKᵀ and PV) forward, 10·d backward (2.5×), and `ops` special-function
operations per pair at the SFU throughput (16 per clock per SM): the softmax's exp and what
else runs at that rate (attn_softmax_ops forward, attn_bwd_softmax_ops backward, fitted; 1 where
not); with dropout, attn_dropout_ops more, outside the overlap. The softmax, not the
matmuls, binds at small head dims: cuDNN's forward takes the same time per pair at head_dim 64
as at 128 on an H100 and an H200 (benchmarks/results/*/train_kernels.json). The matmuls run at
the kernel's head dim (kernel_head_dim: 80 and 96 pad to 128 on Hopper). eff = attn_eff or
attn_bwd_eff. The backward walks 64x64 tiles, one CTA per block of keys, and adds its two
streaming passes (dot(dO, O) before, dQ's conversion after).
  t_math = (max(longest CTA, waves · mean CTA) + waves · attn_fill_blocks) · BLOCK_M·BLOCK_N·t_pair
  t_mem  = (Cost.bytes + partials + bytes_for_half_bw) / (mem_eff · HBM bw)
  time   = max(t_math, t_mem) + kernel_floor_s + mma_latency_s
Decode (one query against a long cache) is memory-bound on reading K and V.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from gpuperf.dtypes import BYTES
from gpuperf.hardware.spec import GpuSpec
from gpuperf.perfmodel.ops import Attention
from gpuperf.perfmodel.optime import OpTime
from gpuperf.perfmodel.roofline import finish, matmul_peak

BLOCK_M = 128  # FlashAttention-2 forward query tile (head_dim <= 128)
BLOCK_M_DECODE = 64  # the split-KV kernel's query tile
BLOCK_N = 128  # keys per KV block
# The backward's tile, keys and queries alike (cuDNN's sm90 bprop kernels on an H100 and an H200:
# "..._64x64x<head_dim>_..." for head dims 64-256); its per-CTA start-up and dK/dV write-out
# is attn_bwd_fill_blocks tiles (fitted; the forward's attn_fill_blocks where not).
BLOCK_BWD = 64
# Special-function (exp2) results per clock per SM: CUDA C++ Programming Guide, "Arithmetic
# Instructions" throughput table, 16 for compute capability 5.x through 9.0.
SFU_PER_CLK_PER_SM = 16
KV_SPLITS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128)
_EXACT_TILES = 4096  # past this many query tiles the causal block count uses its closed form
PARTIAL_BYTES = 4  # split-KV partial outputs and backward dQ accumulators are fp32
# A masked prefill's pair rate over the unmasked kernel's: on an H200, 8192 tokens, 32 heads,
# 3.39 ms masked (causal or full alike) against 1.61 ms unmasked and full (fit_formats.py fits
# it per profile from attention_masked_prefill.json and attention_masked_train.json; other GPUs
# take this). The masked backward has its own (attn_mask_bwd_eff): cuDNN's masked bprop kernel
# on an H100, 8192 tokens, 32 heads of 128, took 9.0 ms against 2.6 ms causal and unmasked.
# A kernel wider than 128 (head dim 256: Gemma's) loses more to the mask, forward and backward
# alike: attn_mask_wide of the others' pace (on an H100 the masked d256 kernels ran 24% longer
# than one pace for every head dim said, the d128 ones 7% shorter).
ATTN_MASK_EFF = 0.48
ATTN_MASK_BWD_EFF = 0.48
ATTN_MASK_WIDE = 1.0
# A masked call of several queries (Hugging Face's paged|sdpa step: every query of the step
# against every gathered key; a masked prefill) runs cuDNN's masked forward kernel: one CTA per
# (batch, head, query tile), no split-KV, each CTA streaming its head's K/V block by block at
# a rate one SM sustains, not the HBM's: on an H100 and an H200 alike (the same to 2%, though
# the H200 has 43% more HBM bandwidth), 1 x 32 heads x 16-256 queries x 2k-64k keys took 46 us
# to 1.6 ms. Per call ATTN_MASK_CALL_S (start-up beyond the kernel floor), per KV block
# (BLOCK_N keys) ATTN_MASK_BLOCK_S plus its K and V bytes at ATTN_MASK_SM_BW: fitted (with the
# H100's 2.9 us floor) on the calibration split of the H100's attention_masked_gather.json (7
# of 24 shapes; held out: the other 17, and the H200's 24). A profile's [model.extra]
# attn_mask_call_s, attn_mask_block_s and attn_mask_sm_bw override them.
# Dropout inside the kernel draws a Philox random number per pair (forward, and again backward):
# special-function operations it adds per pair where a profile has not fitted attn_dropout_ops.
ATTN_DROPOUT_OPS = 1.0
# cuDNN's masked kernels draw at a cost of their own, forward (attn_mask_dropout_ops) and
# backward (attn_mask_bwd_dropout_ops): fitted on the H200's calibration split of
# attention_masked_train.json (the H100's rows of dropout all fall in its held-out split).
ATTN_MASK_DROPOUT_OPS = 3.85
ATTN_MASK_BWD_DROPOUT_OPS = 3.84
ATTN_MASK_CALL_S = 19.0e-6
ATTN_MASK_BLOCK_S = 0.662e-6
ATTN_MASK_SM_BW = 30.5e9


@lru_cache(maxsize=4096)
def tile_blocks(
    rows: int, kv_len: int, q_len: int, br: int, causal: bool, bn: int = BLOCK_N
) -> tuple[int, int, int]:
    """(query tiles, total KV blocks over all tiles, KV blocks of the longest tile) for one
    (batch, head) unit of `rows` query rows against `kv_len` keys, in blocks of `bn` keys."""
    n_qt = -(-rows // br)
    n_kv = -(-kv_len // bn)
    if not causal:
        return n_qt, n_qt * n_kv, n_kv
    off = kv_len - q_len  # the queries are the last q_len positions
    last = -(-(off + rows) // bn)  # the last tile sees every key
    m = n_qt - 1  # full tiles before it: tile j sees off + j·br keys
    if m <= _EXACT_TILES:
        total = sum(-(-(off + j * br) // bn) for j in range(1, m + 1))
    elif off % bn == 0 and br % bn == 0:  # every term is whole: exact closed form
        total = (m * off + br * m * (m + 1) // 2) // bn
    else:  # closed form of the same sum; the ceilings add half a block each on average
        total = round((m * off + br * m * (m + 1) / 2) / bn + m / 2)
    return n_qt, total + last, n_kv


class _Hw(NamedTuple):
    """The numbers of a GpuSpec the attention model uses (hashable, for the shape cache)."""

    sms: int
    t_pair: float  # seconds per (query, key) pair on one SM
    bw: float  # achievable HBM bytes/s
    half_bytes: float
    fill: float
    floor: float
    eff: float


def softmax_ops(op: Attention, gpu: GpuSpec) -> float:
    """Special-function-unit operations the softmax costs a (query, key) pair (module docstring)."""
    key = "attn_bwd_softmax_ops" if op.backward else "attn_softmax_ops"
    return float(gpu.params.extra.get(key, 1.0))


def masked_call(op: Attention) -> bool:
    """A call of several queries with an explicit mask: cuDNN's masked kernels (a single
    query with a mask is the split-KV decode kernel)."""
    return op.mask and op.q_len > 1


def dropout_ops(op: Attention, gpu: GpuSpec) -> float:
    """What dropout adds to a pair, in special-function operations: the random number is integer
    work that overlaps neither the matmuls nor the exp, so it adds to the pair whatever binds
    it (measured: ~1 ps per pair at head dims 64 and 128 alike, train_kernels.json). The
    backward draws it again beside more work of its own: attn_bwd_dropout_ops, the forward's
    where a profile has not fitted it."""
    if not op.dropout:
        return 0.0
    extra = gpu.params.extra
    if masked_call(op):  # cuDNN's masked kernels draw at their own cost
        if op.backward:
            return float(extra.get("attn_mask_bwd_dropout_ops", ATTN_MASK_BWD_DROPOUT_OPS))
        return float(extra.get("attn_mask_dropout_ops", ATTN_MASK_DROPOUT_OPS))
    fwd = float(extra.get("attn_dropout_ops", ATTN_DROPOUT_OPS))
    return float(extra.get("attn_bwd_dropout_ops", fwd)) if op.backward else fwd


def kernel_head_dim(d: int, arch: str) -> int:
    """The head dim a flash kernel computes with: cuDNN's sm90 kernels come for 64, 128 and
    larger dims, a dim between runs the next one padded (80 and 96 ran the 128 kernel on an H100
    and an H200, at its time: train_kernels.json); FlashAttention-2's come in multiples of 32."""
    if arch == "hopper" and d <= 128:
        return 64 if d <= 64 else 128
    return -(-d // 32) * 32


def mask_eff(op: Attention, gpu: GpuSpec) -> float:
    """The pace of a masked kernel's main loop over the unmasked one's: attn_mask_eff forward,
    attn_mask_bwd_eff backward, times attn_mask_wide for a kernel wider than 128 (module
    constants where a profile has not fitted them)."""
    extra = gpu.params.extra
    if op.backward:
        eff = float(extra.get("attn_mask_bwd_eff", ATTN_MASK_BWD_EFF))
    else:
        eff = float(extra.get("attn_mask_eff", ATTN_MASK_EFF))
    if kernel_head_dim(max(op.head_dim, op.vdim), gpu.arch) > 128:
        eff *= float(extra.get("attn_mask_wide", ATTN_MASK_WIDE))
    return eff


def _hw(op: Attention, gpu: GpuSpec, loop_eff: float = 1.0) -> _Hw:
    """The pair rate; `loop_eff` slows the main loop's matmuls (a mask's loads and selects run
    in the same instruction stream), not the exp beside them."""
    p = gpu.params
    eff = p.attn_bwd_eff if op.backward else p.attn_eff
    overlap = p.attn_exp_overlap
    dims = kernel_head_dim(op.head_dim, gpu.arch) + kernel_head_dim(op.vdim, gpu.arch)
    mm_flops = (5.0 if op.backward else 2.0) * dims
    exp_rate = gpu.sms * gpu.boost_clock_mhz * 1e6 * SFU_PER_CLK_PER_SM
    t_mm = mm_flops / (matmul_peak(gpu, op.dtype) * loop_eff)
    t_exp = softmax_ops(op, gpu) / exp_rate
    # Serial (FA2) pays both; an overlapping kernel (FA3, cuDNN on Hopper) pays the larger.
    t_serial = t_mm + t_exp + dropout_ops(op, gpu) / exp_rate
    t_pair = gpu.sms * (t_serial - overlap * min(t_mm, t_exp)) / eff
    bw = p.mem_eff * gpu.hbm_bw
    return _Hw(
        gpu.sms,
        t_pair,
        bw,
        p.bytes_for_half_bw,
        p.attn_fill_blocks,
        p.kernel_floor_s + p.mma_latency_s,
        eff,
    )


def attention_time(op: Attention, gpu: GpuSpec) -> OpTime:
    """Predicted time of a fused attention call (forward, or backward when op.backward)."""
    if min(op.batch, op.heads, op.q_len, op.kv_len, op.head_dim) <= 0:
        return finish(0.0, 0.0, 0.0, {"empty": 1.0})  # PyTorch launches nothing for empty tensors
    hw = _hw(op, gpu)
    d = op.head_dim
    group = max(1, op.heads // max(1, op.kv_heads))
    # A masked call of several queries is cuDNN's masked kernel: a tile per head, no packing
    # of the query heads that share a KV head, no split-KV (ATTN_MASK_CALL_S).
    streamed = masked_call(op) and not op.backward
    packed = op.q_len < BLOCK_M and not op.backward and not streamed
    if packed:  # all query heads of one KV head share a tile; all of them see (nearly) all keys
        rows, units, causal = op.q_len * group, op.batch * op.kv_heads, False
    else:
        rows, units, causal = op.q_len, op.batch * op.heads, op.causal
    masked = op.mask and not packed
    if masked:
        # An explicit mask in prefill and training (Hugging Face's sliding window, a padded
        # batch): the kernel visits every block of the square, whatever the window, and applies
        # the mask in each, its main loop at mask_eff of the unmasked pace (measured:
        # attention_masked_prefill.json, attention_masked_train.json: a 4,096-token window over
        # 8,192 keys took what the causal mask did). The softmax beside it keeps its pace.
        causal = False
        hw = _hw(op, gpu, mask_eff(op, gpu))
    br = BLOCK_M if rows >= BLOCK_M else BLOCK_M_DECODE
    bn = BLOCK_N
    if op.backward:
        # One CTA per block of BLOCK_BWD keys walks the query blocks that see them, in blocks of
        # BLOCK_BWD queries (cuDNN's bprop kernel: 64x64 tiles): for the square causal call the
        # counts are the forward's with the roles swapped, so the forward's tiling gives them.
        br = bn = BLOCK_BWD
        hw = hw._replace(fill=float(gpu.params.extra.get("attn_bwd_fill_blocks", hw.fill)))
    n_qt, total, longest = tile_blocks(rows, op.kv_len, op.q_len, br, causal, bn)
    if op.window and op.window < op.kv_len:  # a windowed kernel visits the window's blocks only
        span = -(-(op.window + br) // bn)
        total, longest = min(total, n_qt * span), min(longest, span)
    t_block = br * bn * hw.t_pair

    base_bytes = op.cost().bytes
    if op.backward:  # dQ is accumulated in fp32 through global memory (read + write)
        base_bytes += 2.0 * op.batch * op.heads * op.q_len * d * PARTIAL_BYTES

    best: tuple[float, float, float, int, int] | None = None
    for s in KV_SPLITS:
        if s > 1 and (op.backward or streamed or units * n_qt >= hw.sms):
            break  # split-KV only while the tiles alone leave SMs idle
        ctas = units * n_qt * s
        waves = -(-ctas // hw.sms)
        units_time = max(-(-longest // s), waves * total / (n_qt * s)) + waves * hw.fill
        t_math = units_time * t_block
        # Each split writes fp32 partial outputs for its real query rows; the combine reads them.
        partials = 2.0 * units * rows * s * op.vdim * PARTIAL_BYTES if s > 1 else 0.0
        t_mem = (base_bytes + partials + hw.half_bytes) / hw.bw
        t = max(t_math, t_mem)
        if best is None or t < best[0]:
            best = (t, t_math, t_mem, s, waves)
    assert best is not None
    _, t_math, t_mem, split, waves = best
    if streamed:  # each CTA streams its head's K/V at one SM's rate (ATTN_MASK_CALL_S)
        extra = gpu.params.extra
        block_bytes = BLOCK_N * (d + op.vdim) * BYTES[op.kv_dtype or op.dtype]
        t_blk = float(extra.get("attn_mask_block_s", ATTN_MASK_BLOCK_S)) + block_bytes / float(
            extra.get("attn_mask_sm_bw", ATTN_MASK_SM_BW)
        )
        blocks = max(longest, waves * total / n_qt)
        t_mem = max(t_mem, float(extra.get("attn_mask_call_s", ATTN_MASK_CALL_S)) + blocks * t_blk)
    floor = hw.floor
    if op.backward:
        # Beside its main kernel the backward runs two streaming passes (FlashAttention-2's
        # compute_dot_do_o and convert_dQ, cuDNN's alike): D = rowsum(dO ∘ O) before it (reads O
        # and dO, one fp32 per row out) and dQ from its fp32 accumulator to the dtype after it.
        rows_all = op.batch * op.heads * op.q_len
        passes = rows_all * (2.0 * op.vdim * BYTES[op.dtype] + PARTIAL_BYTES)
        passes += rows_all * d * (PARTIAL_BYTES + BYTES[op.dtype])
        floor += (passes + 2 * hw.half_bytes) / hw.bw + 2 * gpu.params.kernel_floor_s
    detail = {
        "block_m": br,
        "query_tiles": n_qt,
        "kv_blocks": total,
        "split_kv": split,
        "ctas": units * n_qt * split,
        "waves": waves,
        "eff": hw.eff,
        "gqa_packed": 1.0 if packed else 0.0,
        "kv_bytes": op.batch
        * op.kv_heads
        * op.kv_len
        * (d + op.vdim)
        * BYTES[op.kv_dtype or op.dtype],
    }
    return finish(t_math, t_mem, floor, detail)
