"""Attention through torch.nn.functional.scaled_dot_product_attention, on a chosen backend.

Causal masking follows the op model (ops.Attention): the q_len queries are the *last* q_len of the
kv_len positions (bottom-right alignment, as FlashAttention-2 and decode with a KV cache use).
SDPA's is_causal=True is top-left when q_len != kv_len, so that case uses
torch.nn.attention.bias.causal_lower_right. One query against a cache sees every key: no mask.
"""

from __future__ import annotations

from typing import Any

from gpuperf.errors import EnvironmentUnavailable, InputError
from gpuperf.measure.kernels import TOLERANCE, Kernel, check_rows, rel_err, torch_dtype

BACKENDS = ("auto", "flash", "efficient", "cudnn", "math")
_SDP_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn", 4: "overrideable"}


def _backend_context(backend: str) -> Any:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    which = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[backend]
    return lambda: sdpa_kernel([which])


def _reference(q: Any, k: Any, v: Any, heads: list[int], op: Any, r: int) -> Any:
    """fp64 attention of batch 0, the given heads, the last r queries."""
    import torch

    group = op.heads // op.kv_heads
    kv_idx = [h // group for h in heads]
    qs = q[0, heads, -r:, :].double()
    ks, vs = k[0, kv_idx].double(), v[0, kv_idx].double()
    s = qs @ ks.transpose(-1, -2) / op.head_dim**0.5
    if op.causal:
        qpos = torch.arange(op.q_len - r, op.q_len, device=q.device) + (op.kv_len - op.q_len)
        kpos = torch.arange(op.kv_len, device=q.device)
        s = s.masked_fill(kpos[None, :] > qpos[:, None], float("-inf"))
    return torch.softmax(s, dim=-1) @ vs


def build(op: Any, device: str, backend: str | None) -> Kernel:
    import torch
    import torch.nn.functional as F

    backend = backend or "auto"
    if backend not in BACKENDS:
        raise InputError(f"unknown attention backend {backend!r}; expected {', '.join(BACKENDS)}")
    if op.backward:
        raise InputError(f"{op.name}: measuring attention backward is not supported")
    if op.kv_dtype not in (None, op.dtype):
        raise InputError(f"{op.name}: SDPA needs K/V in the dtype of Q, not {op.kv_dtype}")
    if op.dtype not in ("bf16", "fp16", "fp32", "fp64"):
        raise InputError(f"{op.name}: SDPA does not run {op.dtype}")
    tdt = torch_dtype(op.dtype)
    b, h, kvh, d = op.batch, op.heads, op.kv_heads, op.head_dim
    q = torch.randn((b, h, op.q_len, d), dtype=tdt, device=device)
    k = torch.randn((b, kvh, op.kv_len, d), dtype=tdt, device=device)
    v = torch.randn((b, kvh, op.kv_len, d), dtype=tdt, device=device)
    gqa = kvh != h
    mask: Any = None
    is_causal = False
    if getattr(op, "mask", False):
        # An explicit boolean mask, as Hugging Face passes with a StaticCache (flash cannot take
        # one; cuDNN can). Same visibility as the op says (lower-right causal).
        mask = torch.ones((b, 1, op.q_len, op.kv_len), dtype=torch.bool, device=device)
        if op.causal:
            mask = torch.ones(op.q_len, op.kv_len, dtype=torch.bool, device=device).tril(
                op.kv_len - op.q_len
            )
    elif op.causal and op.q_len == op.kv_len:
        is_causal = True
    elif op.causal and op.q_len > 1:
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(op.q_len, op.kv_len)

    def run() -> Any:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, is_causal=is_causal, enable_gqa=gqa
        )

    def check() -> float:
        try:
            out = run()
        except RuntimeError as exc:
            first = str(exc).splitlines()[0] if str(exc) else "RuntimeError"
            raise EnvironmentUnavailable(
                f"attention backend {backend} cannot run {op.name} ({op.shape}) on {device}: "
                f"{first}"
            ) from None
        r = check_rows(op.q_len)
        heads = sorted({0, h - 1})
        return rel_err(out[0, heads, -r:, :], _reference(q, k, v, heads, op, r))

    detail: dict[str, Any] = {"kernel": "sdpa", "backend": backend}
    if backend == "auto":
        try:
            causal = is_causal or mask is not None
            choice = torch._fused_sdp_choice(q, k, v, None, 0.0, causal, enable_gqa=gqa)
            detail["backend"] = _SDP_NAMES.get(int(choice), str(choice))
        except Exception:
            pass
    if mask is not None:
        detail["mask"] = "causal_lower_right"
    ctx = _backend_context(backend) if backend != "auto" else None
    tol = max(TOLERANCE[op.dtype], 1e-3)
    if ctx is None:
        return Kernel(run, check, tol, detail)
    return Kernel(run, check, tol, detail, ctx)
