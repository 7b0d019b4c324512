"""Data-parallel gradient synchronisation and the optimizer step of one GPU.

Gradients per parameter, one rule for memory and communication:
- fused (Megatron-LM): bf16 training keeps fp32 main gradients and reduces them in fp32
  (`accumulate_allreduce_grads_in_fp32` is on with --bf16); fp16 and fp32 training keep and
  reduce them in the parameters' dtype.
- eager (PyTorch DDP / FSDP2 on a model held in its dtype): gradients in the parameters' dtype.
- Scenario.grad_dtype overrides either: fp32, or param (the parameters' dtype; NVIDIA's
  performance recipes run Megatron-Core with grad_reduce_in_fp32=False).

Buckets: PyTorch DDP all-reduces buckets of at least 25 MiB (`bucket_cap_mb`; whole parameters,
so a larger parameter is a bucket of its own: ddp_buckets) as the backward produces them;
Megatron's DDP buckets 40M parameters (at least 1M per DP rank). ZeRO-1/2 (Megatron's distributed
optimizer) reduce-scatter the same buckets and all-gather the updated parameters after the step.
ZeRO-3 / FSDP2 gathers and scatters layer by layer (step_work._fsdp_layer_ops).
"""

from __future__ import annotations

import functools
import math

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import Collective
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.groups import Groups
from gpuperf.workloads.scenario import Scenario
from gpuperf.workloads.shard import Params

TORCH_DDP_BUCKET_BYTES = 25 * 2**20
MEGATRON_BUCKET_PARAMS = 40_000_000


def grad_bytes(act: DType, eager: bool, grad_dtype: str = "auto") -> int:
    """Bytes per gradient element, in memory and on the wire (module docstring); grad_dtype
    (Scenario's) fp32 or param overrides the default."""
    if grad_dtype == "fp32":
        return max(4, BYTES[act])
    if eager or grad_dtype == "param":
        return BYTES[act]
    return 4 if act == "bf16" else BYTES[act]


def grad_wire_dtype(act: DType, gb: int) -> DType:
    """The dtype gradients of `gb` bytes (grad_bytes) are reduced in."""
    return "fp32" if gb == 4 else act


def bucket_bytes(sc: Scenario, gb: int) -> float:
    if sc.pytorch:
        return TORCH_DDP_BUCKET_BYTES
    return max(MEGATRON_BUCKET_PARAMS, 1_000_000 * sc.dp * sc.cp) * gb  # the dp·cp group


@functools.lru_cache(maxsize=1024)
def _bucketed(name: str, coll: str, total: float, bucket: float, ranks: int, nodes: int,
              dtype: DType) -> tuple:  # fmt: skip
    from gpuperf.workloads.step_work import _part

    if ranks <= 1 or total <= 0:
        return ()
    full, rest = divmod(total, bucket)
    parts = []
    if full:
        op = Collective(name, coll, int(bucket), ranks, dtype, nodes)  # type: ignore[arg-type]
        parts.append(_part([op], repeat=int(full)))
    if rest >= 1:
        op = Collective(name + "_last", coll, int(rest), ranks, dtype, nodes)  # type: ignore[arg-type]
        parts.append(_part([op]))
    return tuple(parts)


TORCH_DDP_FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES


def _param_sizes(cfg: ModelConfig) -> list[int]:
    """Elements of each parameter tensor, in the reverse of Hugging Face's registration order
    (the order DDP fills its buckets in: the gradients of the last layers arrive first)."""
    h, d = cfg.hidden, cfg.hd
    q, kv, f = cfg.heads * d, cfg.kv_heads * d, cfg.intermediate
    norm = h * (2 if cfg.norm == "layernorm" else 1)
    mlp = [h * f, h * f, f * h] if cfg.mlp == "gated" else [h * f, f * h]  # gate, up, down
    layer = [h * q, h * kv, h * kv, q * h, *mlp, norm, norm]  # q k v o, mlp, two norms
    ends_first = [cfg.vocab * h] + ([cfg.max_position_embeddings * h]
                                    if cfg.positions == "learned" else [])  # fmt: skip
    ends_last = [norm] + ([] if cfg.tie_word_embeddings else [cfg.vocab * h])
    sizes = ends_first + layer * cfg.layers + ends_last
    return sizes[::-1]


@functools.lru_cache(maxsize=64)
def ddp_buckets(cfg: ModelConfig, grad_b: int) -> tuple[int, ...]:
    """Bytes of each PyTorch DDP bucket, in the order they are reduced: parameters fill a bucket
    until it holds bucket_cap_mb (25 MiB; the first 1 MiB), so a parameter larger than that is a
    bucket of its own (profiled: Llama-3-8B's 16 GB of gradients went in 162 all-reduces, five a
    layer and the two embeddings, not 640 of 25 MiB)."""
    out, cur, cap = [], 0, TORCH_DDP_FIRST_BUCKET_BYTES
    for n in _param_sizes(cfg):
        cur += n * grad_b
        if cur >= cap:
            out.append(cur)
            cur, cap = 0, TORCH_DDP_BUCKET_BYTES
    if cur:
        out.append(cur)
    return tuple(out)


def _periodic(sizes: tuple[int, ...], longest: int = 12) -> tuple[int, int, int]:
    """(start, period, repeats) of the longest periodic stretch of `sizes` (the layers' buckets
    repeat), so that its Parts stay few."""
    best = (0, 1, 1)
    for start in range(min(longest, len(sizes))):
        for p in range(1, longest + 1):
            r = 1
            while sizes[start + r * p : start + (r + 1) * p] == sizes[start : start + p]:
                r += 1
            if r > 1 and r * p > best[1] * best[2]:
                best = (start, p, r)
    return best


def _ddp_parts(cfg: ModelConfig, gb: int, ranks: int, nodes: int, dtype: DType) -> tuple:
    from gpuperf.workloads.step_work import _part

    if ranks <= 1:
        return ()
    sizes = ddp_buckets(cfg, gb)
    start, p, r = _periodic(sizes)

    def ops(chunk: tuple[int, ...]) -> list[Collective]:
        return [Collective("dp/grad_allreduce", "allreduce", n, ranks, dtype, nodes)  # type: ignore[arg-type]
                for n in chunk]  # fmt: skip

    parts = [_part(ops(sizes[:start]))] if start else []
    parts.append(_part(ops(sizes[start : start + p]), repeat=r))
    rest = sizes[start + p * r :]
    if rest:
        parts.append(_part(ops(rest)))
    return tuple(parts)


def bucket_kernels(sc: Scenario, params: Params) -> tuple:
    """PyTorch DDP's own kernels on the gradients, on the compute stream: each bucket's gradients
    copied into the bucket's flat buffer and divided by the world size before the all-reduce
    (profiled on 2 H200s, Llama-3-8B: 360 device-to-device copies, 10.4 ms, and 291 bf16 divides,
    8.0 ms, for 16 GB of gradients; validate_multigpu_2gpu_repeat.json). Megatron's buffers hold
    the gradients in place and FSDP2 copies per layer (step_work), so only eager DDP has them."""
    from gpuperf.perfmodel.ops import Copy, Elementwise
    from gpuperf.workloads.step_work import _part

    if sc.zero != 0 or not sc.pytorch or sc.dp * sc.cp == 1:
        return ()
    act: DType = "bf16" if BYTES[sc.dtype] == 1 else sc.dtype
    n = int(params.total)
    ops = [Copy("dp/bucket_copy", n * grad_bytes(act, True), act),
           Elementwise("dp/bucket_div", "div", n, 1, 1, act)]  # fmt: skip
    return (_part(ops),)


def sync_parts(cfg: ModelConfig, sc: Scenario, g: Groups, params: Params) -> tuple[tuple, tuple]:
    """(gradient sync Parts, post-step Parts) of the busiest GPU."""
    if sc.zero == 3:
        return (), ()
    act: DType = "bf16" if BYTES[sc.dtype] == 1 else sc.dtype
    gb = grad_bytes(act, sc.pytorch, sc.grad_dtype)
    gdt = grad_wire_dtype(act, gb)
    bucket = bucket_bytes(sc, gb)
    coll = "allreduce" if sc.zero == 0 else "reducescatter"
    if sc.pytorch and sc.zero == 0 and sc.gpus == sc.dp * sc.cp and not cfg.is_moe:
        return _ddp_parts(cfg, gb, g.dp, g.dp_nodes, gdt), ()  # PyTorch DDP on a whole model
    sync = _bucketed(f"dp/grad_{coll}", coll, params.dense * gb, bucket, g.dp, g.dp_nodes, gdt)
    sync += _bucketed(f"dp/expert_grad_{coll}", coll, params.expert * gb, bucket, g.edp,
                      g.edp_nodes, gdt)  # fmt: skip
    post: tuple = ()
    if sc.zero in (1, 2):
        pb = BYTES[act]
        post = _bucketed("dp/param_allgather", "allgather", params.dense * pb, bucket, g.dp,
                         g.dp_nodes, act)  # fmt: skip
        post += _bucketed("dp/expert_param_allgather", "allgather", params.expert * pb, bucket,
                          g.edp, g.edp_nodes, act)  # fmt: skip
    return sync, post


def optimizer_parts(cfg: ModelConfig, sc: Scenario, d, g: Groups, params: Params) -> tuple:  # noqa: ANN001
    """AdamW over this GPU's share of the parameters (sharded over dp from ZeRO-1 on)."""
    n = params.total
    if sc.zero >= 1:
        n = params.dense / g.dp + params.expert / g.edp
    eager = sc.torch_optim  # torch.optim's foreach kernels, else Megatron's fused Adam
    tensors = 1
    if eager and g.tp > 1 and sc.tp_impl == "dtensor":
        # DTensor runs each foreach op of AdamW through its dispatch once per DTensor parameter
        # (the step engine charges host_dtensor_op_s for each).
        tensors = dtensor_params_per_layer(cfg) * math.ceil(cfg.layers / sc.pp) + 1
    return _optimizer(math.ceil(n), d, eager, tensors)


def dtensor_params_per_layer(cfg: ModelConfig) -> int:
    """The DTensor parameters of one layer under Hugging Face's tp_plan (transformers 5.x): the
    projections (q, k, v, o and the MLP's gate, up, down) and their biases (Qwen2's q, k, v).
    The embedding stays a plain tensor; the lm_head (colwise) is one more DTensor per model."""
    projections = 4 + (3 if cfg.mlp == "gated" else 2)
    biases = projections if cfg.linear_bias else 3 if cfg.qkv_bias else 0
    return projections + biases


@functools.lru_cache(maxsize=1024)
def _optimizer(n: int, d, eager: bool, tensors: int = 1) -> tuple:  # noqa: ANN001
    """AdamW's kernels over n parameters; with tensors > 1, one repeat per tensor (DTensor)."""
    from gpuperf.workloads.step_work import _part
    from gpuperf.workloads.transformer_train import optimizer_ops

    return (_part(optimizer_ops(math.ceil(n / tensors), d, eager), repeat=tensors),)
