"""Multi-head latent attention (DeepSeek-V2/V3): the kernels of one layer's attention.

Every form caches the compressed latent: kv_lora_rank + qk_rope_head_dim values per token and
layer (576 for DeepSeek-V3, against 2·128·192 for its 128 expanded heads).

- naive (Hugging Face transformers 5.x, DeepseekV3Attention): q through its LoRA (q_a, an RMSNorm,
  q_b), the latent through kv_a and an RMSNorm, interleaved RoPE on the rotary slices, the cache
  update, then every step expands the WHOLE cached latent through kv_b into per-head keys (192)
  and values (128) and runs SDPA over them; a decode step's cost grows with the cache.
- absorbed (FlashMLA, vLLM's and SGLang's decode): kv_b's key half is folded into the query
  (a batched GEMM per head into the latent space), attention runs over the latent itself as one
  shared KV head of 576 with 512-wide values, and the value half of kv_b maps the output back;
  nothing is expanded per cached token.
- fused prefill (vLLM): the naive form on the new tokens only, with fused norm, RoPE and a
  FlashAttention kernel.
"""

from __future__ import annotations

from gpuperf.dtypes import BYTES
from gpuperf.perfmodel.ops import Attention, Copy, Gemm, Norm, Op
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.transformer_layers import Dims, _ew, _gemm, eager_norm


def _interleaved_rope(name: str, n: int, dt) -> list[Op]:  # noqa: ANN001
    """apply_rotary_pos_emb_interleave on `n` values: x1·cos − x2·sin and x2·cos + x1·sin over
    the even and odd halves (six kernels), then one cat."""
    h = n // 2
    return [
        _ew(f"{name}/x1_cos", "mul", h, dt),
        _ew(f"{name}/x2_sin", "mul", h, dt),
        _ew(f"{name}/sub", "sub", h, dt, 2),
        _ew(f"{name}/x2_cos", "mul", h, dt),
        _ew(f"{name}/x1_sin", "mul", h, dt),
        _ew(f"{name}/add", "add", h, dt, 2),
        Copy(f"{name}/cat", n * BYTES[dt], dt),
    ]


def _q_proj(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    T, h, a, H = d.T, d.hidden, d.act, d.heads
    qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    ops: list[Op] = []
    if cfg.q_lora_rank:
        _gemm(ops, d, "attn/q_a", T, cfg.q_lora_rank, h)
        if eager:
            ops += eager_norm(cfg, "attn/q_a_norm", T, cfg.q_lora_rank, a)
        else:
            ops.append(Norm("attn/q_a_norm", "rmsnorm", T, cfg.q_lora_rank, a))
        _gemm(ops, d, "attn/q_b", T, H * qk, cfg.q_lora_rank)
    else:
        _gemm(ops, d, "attn/q", T, H * qk, h)
    return ops


def _latent(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """kv_a (the latent and the shared rotary key) and its RMSNorm."""
    T, h, a = d.T, d.hidden, d.act
    r, rope = cfg.kv_lora_rank, cfg.qk_rope_head_dim
    ops: list[Op] = []
    _gemm(ops, d, "attn/kv_a", T, r + rope, h)
    if eager:
        ops += eager_norm(cfg, "attn/kv_a_norm", T, r, a)
    else:
        ops.append(Norm("attn/kv_a_norm", "rmsnorm", T, r, a))
    return ops


def naive_eager(cfg: ModelConfig, d: Dims) -> list[Op]:
    """Hugging Face's DeepseekV3Attention, kernel by kernel."""
    T, a, H, kv = d.T, d.act, d.heads, d.kv_len
    nope, rope, v = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
    r = cfg.kv_lora_rank
    ops = _q_proj(cfg, d, True) + _latent(cfg, d, True)
    ops += _interleaved_rope("attn/rope_q", T * H * rope, a)
    ops += _interleaved_rope("attn/rope_k", T * rope, a)
    if d.cache:  # DynamicCache.update: torch.cat of the cached latent and rotary key
        per_width = d.batch * (BYTES[d.kv] * (kv - d.q_len) + BYTES[a] * d.q_len)
        ops.append(Copy("attn/cache_latent", per_width * r, d.kv))
        ops.append(Copy("attn/cache_rope", per_width * rope, d.kv))
    ops.append(Copy("attn/q_cat", T * H * (nope + rope) * BYTES[a], a))
    # expand_kv: kv_b over every cached token, then the keys assembled from two copies.
    _gemm(ops, d, "attn/kv_b", d.batch * kv, H * (nope + v), r)
    keys = d.batch * kv * H
    ops.append(Copy("attn/k_nope", keys * nope * BYTES[a], a))
    ops.append(Copy("attn/k_rope", keys * rope * BYTES[a], a))
    ops.append(Attention("attn/core", d.batch, H, H, d.q_len, kv, nope + rope, True, a, a,
                         v_head_dim=v))  # fmt: skip
    ops.append(Copy("attn/out_contiguous", T * H * v * BYTES[a], a))
    _gemm(ops, d, "attn/out", T, d.hidden, H * v)
    ops += comm_ops.row_out(d, "attn/out")
    return ops


def fused(cfg: ModelConfig, d: Dims, absorbed: bool) -> list[Op]:
    """A serving engine's MLA: fused norms and RoPE, the latent written to the cache; prefill
    expands the new tokens only, decode (absorbed) attends over the latent."""
    T, a, H = d.T, d.act, d.heads
    nope, rope, v, r = cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    ops = _q_proj(cfg, d, False) + _latent(cfg, d, False)
    ops.append(_ew("attn/rope", "rope", T * (H + 1) * rope, a, flops=3.0))
    if d.cache:
        ops.append(Copy("attn/kv_write", T * (r + rope) * BYTES[d.kv], d.kv))
    if absorbed:
        # q_nope into the latent space (per head), attention over the latent as one KV head of
        # r + rope with r-wide values, then back through kv_b's value half (per head).
        ops.append(Gemm("attn/q_absorb", T, r, nope, a, H))
        ops.append(Attention("attn/core", d.batch, H, 1, d.q_len, d.kv_len, r + rope, True, a,
                             d.kv, v_head_dim=r))  # fmt: skip
        ops.append(Gemm("attn/v_absorb", T, v, r, a, H))
    else:  # expanded: the new tokens in prefill, the whole cached latent in a decode step
        _gemm(ops, d, "attn/kv_b", d.batch * d.kv_len, H * (nope + v), r)
        ops.append(Attention("attn/core", d.batch, H, H, d.q_len, d.kv_len, nope + rope, True,
                             a, a, v_head_dim=v))  # fmt: skip
    _gemm(ops, d, "attn/out", T, d.hidden, H * v)
    ops += comm_ops.row_out(d, "attn/out")
    return ops


def mla_attention(cfg: ModelConfig, d: Dims, eager: bool, form: str) -> list[Op]:
    """The attention of one MLA layer: `form` is naive, absorbed, or auto (Hugging Face runs
    the naive form; a serving engine absorbs in decode and expands in prefill)."""
    if eager:
        if form == "absorbed":
            from gpuperf.errors import InputError

            raise InputError("Hugging Face runs MLA in its naive form; absorbed needs impl=fused")
        return naive_eager(cfg, d)
    absorbed = form == "absorbed" or (form == "auto" and d.decode)
    return fused(cfg, d, absorbed)
