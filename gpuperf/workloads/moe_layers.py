"""An MoE layer's kernels: the router, the routed experts and the shared experts.

Two implementations:

- eager: Hugging Face transformers 5.x, whose experts default to `grouped_mm`
  (transformers/integrations/moe.py): sort the (token, expert) pairs by expert, gather the token
  rows, histc + cumsum for the group offsets, a masked fill of the sentinel rows, one grouped
  GEMM for gate and up, a masked fill, act(gate) · up on the two strided halves, the down
  grouped GEMM, a masked fill, times the routing weight, the inverse permutation (index_put +
  gather) and a sum over the k copies. Mixtral's and DeepSeek's routers hand back fp32 weights,
  so the weighting, the un-permute and the sum run in fp32 there (then one cast); Qwen's are
  bf16. Kernel list checked against torch.profiler traces of Mixtral-, Qwen3-MoE-, Qwen1.5-MoE-
  and DeepSeek-V3-shaped models on an H100 (benchmarks/results/h100-sxm5-80gb/e2e_moe.json).
- fused: a serving engine's fused MoE (vLLM's fused_moe): one top-k softmax kernel, one block
  alignment kernel, the gate_up grouped GEMM, silu_and_mul, the down grouped GEMM (which applies
  the routing weights) and a sum over the k copies.

Both size the routed experts by `moe_intermediate_size`, run shared experts as a dense MLP over
every token and, under expert parallelism, send each token copy to its expert's rank and back.
"""

from __future__ import annotations

import math
from dataclasses import replace

from gpuperf.dtypes import BYTES, DType
from gpuperf.perfmodel.ops import (
    Copy,
    Embedding,
    Gemm,
    GroupedGemm,
    Norm,
    Op,
    Reduce,
)
from gpuperf.workloads import comm_ops
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.transformer_layers import _ACT_FLOPS, Dims, _ew, _fused_act, dense_mlp

INDEX: DType = "fp64"  # int64 indices move 8 bytes per element, as fp64 does
INT32: DType = "fp32"  # int32 counts move 4 bytes per element
MOE_SUM = "mlp/moe_sum"  # the fused path's sum over each token's k weighted copies


def _topk(name: str, rows: int, cols: int, k: int) -> list[Op]:
    """torch.topk as PyTorch runs it on a GPU: select the k largest of each row, then sort them
    (a second, small kernel)."""
    return [Reduce(name, "topk", rows, cols, k, "fp32"),
            _ew(name + ".sort", "sort", rows * k, "fp32", n_in=2, flops=0.0)]  # fmt: skip


def router(cfg: ModelConfig, d: Dims, eager: bool) -> tuple[list[Op], DType]:
    """The router's kernels and the dtype of the routing weights they hand to the experts."""
    T, E, k, h = d.T, cfg.num_experts, cfg.num_experts_per_tok, d.hidden
    ops: list[Op] = comm_ops.col_in(d, "mlp/router")
    if not eager:  # one fused top-k (and grouped top-k) softmax kernel, as vLLM runs it
        ops.append(Gemm("mlp/router", T, E, h, d.act))
        ops.append(Reduce("mlp/topk_softmax", "topk", T, E, 2 * k, "fp32"))
        return ops, "fp32"
    if cfg.router == "sigmoid":  # DeepSeek-V3: an fp32 linear, sigmoid, group-limited top-k
        g, tg = cfg.router_groups, cfg.router_topk_groups
        ops += [
            _ew("mlp/router.x_f32", "cast", T * h, d.act, out="fp32", flops=0.0),
            _ew("mlp/router.w_f32", "cast", E * h, d.act, out="fp32", flops=0.0),
            Gemm("mlp/router", T, E, h, "fp32"),
            _ew("mlp/router.sigmoid", "sigmoid", T * E, "fp32", flops=4.0),
        ]
        if cfg.router_bias:
            ops.append(_ew("mlp/router.bias", "add", T * E, "fp32", n_in=2))
        if g > 1:
            ops += [
                *_topk("mlp/router.group_top2", T * g, E // g, 2),
                Reduce("mlp/router.group_sum", "sum", T * g, 2, 1, "fp32"),
                *_topk("mlp/router.group_topk", T, g, tg),
                _ew("mlp/router.group_mask", "fill", T * g, "fp32", n_in=0, flops=0.0),
                _ew("mlp/router.group_scatter", "scatter", T * tg, "fp32", flops=0.0),
                _ew("mlp/router.mask_expand", "copy", T * E, "fp32", flops=0.0),
                _ew("mlp/router.masked_fill", "masked_fill", T * E, "fp32", n_in=2, flops=0.0),
            ]
        ops += _topk("mlp/topk", T, E, k)
        ops.append(_ew("mlp/router.gather", "gather", T * k, "fp32", flops=0.0))
        if cfg.norm_topk_prob:
            ops.append(Reduce("mlp/router.sum", "sum", T, k, 1, "fp32"))
            ops.append(_ew("mlp/router.div", "div", T * k, "fp32", n_in=2))
        ops.append(_ew("mlp/router.scale", "mul", T * k, "fp32"))
        return ops, "fp32"
    # Softmax routers: Mixtral keeps fp32 weights; Qwen2/3-MoE cast them to the model dtype.
    ops.append(Gemm("mlp/router", T, E, h, d.act))
    mixtral = cfg.model_type == "mixtral"
    if mixtral:
        ops.append(_ew("mlp/router.f32", "cast", T * E, d.act, out="fp32", flops=0.0))
    ops.append(Norm("mlp/router.softmax", "softmax", T, E, "fp32"))
    ops += _topk("mlp/topk", T, E, k)
    if mixtral or cfg.norm_topk_prob:
        ops.append(Reduce("mlp/router.sum", "sum", T, k, 1, "fp32"))
        ops.append(_ew("mlp/router.div", "div", T * k, "fp32", n_in=2))
    if mixtral:
        return ops, "fp32"
    ops.append(_ew("mlp/router.cast", "cast", T * k, "fp32", out=d.act, flops=0.0))
    return ops, d.act


def _sort(name: str, n: int) -> list[Op]:
    """torch.sort of n int64 expert ids (with their positions): one in-place block sort for a
    few thousand keys, else cub's radix sort (a histogram, a scan and one pass per 8 key bits
    that hold a value, over keys and positions)."""
    if n <= 4096:
        return [_ew(name, "sort", n, INDEX, n_in=2, flops=0.0)]
    ops: list[Op] = [_ew(name + ".positions", "arange", n, INDEX, n_in=0, flops=0.0)]
    ops.append(Reduce(name + ".histogram", "sum", 1, n, 8, INDEX))
    ops.append(Reduce(name + ".scan", "sum", 1, 8 * 256, 8, INT32))
    passes = 8  # PyTorch sorts int64 keys over all eight bytes
    ops += [Copy(f"{name}.pass{i}", 2 * 2 * n * BYTES[INDEX], INDEX) for i in range(passes)]
    return ops


def _missed(cfg: ModelConfig, unit: int) -> float:
    """The chance that a token routes none of its k experts to a block of `unit` consecutive
    experts (one GPU's or one node's), with top-k uniform over the experts its router allows: all
    of them, or under group-limited routing (DeepSeek-V3: router_topk_groups of router_groups
    groups, then k experts among theirs) those of the groups it picked."""
    E, k = cfg.num_experts, cfg.num_experts_per_tok
    g, tg = cfg.router_groups, cfg.router_topk_groups

    def none_of(pool: float, taken: float) -> float:  # k draws from pool, none of `taken`
        p = 1.0
        for i in range(k):
            p *= max(0.0, pool - taken - i) / (pool - i)
        return p

    G = E // g
    if g <= 1 or tg >= g or not (G % unit == 0 or unit % G == 0):
        return none_of(E, unit)
    m = max(1, unit // G)  # groups the block covers, `per` of its experts in each
    per = unit / m
    return sum(math.comb(m, j) * math.comb(g - m, tg - j) / math.comb(g, tg)
               * none_of(tg * G, j * per) for j in range(0, min(m, tg) + 1))  # fmt: skip


def dispatch_fanout(cfg: ModelConfig, ep: int, ep_nodes: int) -> tuple[float, float]:
    """(GPUs, nodes) a token goes to under expert parallelism, its own included, expected under
    uniform routing: what DeepEP and HybridEP send it to once each."""
    local = cfg.num_experts // ep
    gpus = ep * (1 - _missed(cfg, local))
    nodes = ep_nodes * (1 - _missed(cfg, local * ep // ep_nodes)) if ep_nodes > 1 else 1.0
    return gpus, nodes


def _expert_kernels(ops: list[Op], cfg: ModelConfig, d: Dims, tokens: int, rows_here: int) -> None:
    """The fused path's expert kernels over the `rows_here` routed copies on this GPU: up (gate
    and up) grouped GEMM, activation, down grouped GEMM (fp8: each input quantized first)."""
    T, E, k, h, a = d.T, cfg.num_experts, cfg.num_experts_per_tok, d.hidden, d.act
    f, local = cfg.expert_intermediate // d.g.tp, cfg.num_experts // d.g.ep
    act, gated = cfg.hidden_act, cfg.mlp == "gated"
    up = "mlp/experts_gate_up" if gated else "mlp/experts_up"
    # Megatron quantizes the permuted rows it received; a serving engine quantizes each
    # token's hidden state once, before its fused MoE gathers the copies.
    _grouped_quant(ops, d, up, rows_here * h if d.train else T * h)
    ops.append(_grouped(d, up, tokens, k, E, local, 2 * f if gated else f, h))
    if gated:
        ops.append(_ew("mlp/act", f"{_fused_act(act)}_and_mul", rows_here * f, a, n_in=2,
                       flops=_ACT_FLOPS[act] + 1.0))  # fmt: skip
    else:  # Nemotron-H's squared-ReLU experts: up, act, down
        ops.append(_ew("mlp/act", f"{_fused_act(act)}_fused", rows_here * f, a,
                       flops=_ACT_FLOPS[act]))  # fmt: skip
    _grouped_quant(ops, d, "mlp/experts_down", rows_here * f)
    ops.append(_grouped(d, "mlp/experts_down", tokens, k, E, local, h, f))


def routed_experts(cfg: ModelConfig, d: Dims, eager: bool, wdt: DType) -> list[Op]:
    """The routed experts of one MoE layer (this GPU's E / ep of them under expert parallelism)."""
    T, E, k, h = d.T, cfg.num_experts, cfg.num_experts_per_tok, d.hidden
    f = cfg.expert_intermediate // d.g.tp
    ep = d.g.ep
    local, a = E // ep, d.act
    S = T * k  # routed (token, expert) pairs
    # Tokens whose copies can reach this rank's experts (every rank's). Under uniform routing
    # each rank receives as many copies as it sends; the busiest rank (which sets the pace)
    # receives moe_imbalance times that.
    skew = d.moe_imbalance if ep > 1 else 1.0
    tokens = max(1, round(T * ep * skew))
    rows_here = max(1, round(S * skew))
    ops: list[Op] = []
    if not eager and d.ep_dedup:
        # DeepEP / HybridEP (Megatron-Core's flex dispatcher): each token goes once to every GPU
        # that holds one of its experts, is permuted there into expert order, and the combine
        # sends back one weighted sum per (token, GPU), which the kernel adds up on arrival.
        gpus, nodes = dispatch_fanout(cfg, ep, d.g.ep_nodes)
        fan = (round(T * gpus * skew), round(T * nodes * skew) if d.g.ep_nodes > 1 else 0)
        ops.append(Reduce("mlp/moe_align", "sum", 1, S, local, INT32))
        ops += comm_ops.token_dispatch(d, "mlp/dispatch", *fan)
        ops.append(Copy("mlp/permute", rows_here * h * BYTES[a], a))
        _expert_kernels(ops, cfg, d, tokens, rows_here)
        ops.append(Copy("mlp/unpermute", rows_here * h * BYTES[a], a))
        ops += comm_ops.token_dispatch(d, "mlp/combine", *fan)
        return ops
    if not eager:
        # Training (Megatron-Core's token dispatcher, Transformer Engine's fused permute): the
        # routed copies are permuted into expert order before the all-to-all and, with several
        # experts here, sorted by local expert after it (and back before the return trip).
        # Serving's fused MoE gathers the rows inside its grouped GEMM instead.
        chunks = d.train and ep > 1 and local > 1
        ops.append(Reduce("mlp/moe_align", "sum", 1, S, local, INT32))
        if d.train:
            ops.append(Copy("mlp/permute", S * h * BYTES[a], a))
        ops += comm_ops.expert_alltoall(d, "mlp/dispatch", rows_here)
        if chunks:
            ops.append(Copy("mlp/sort_chunks", rows_here * h * BYTES[a], a))
        _expert_kernels(ops, cfg, d, tokens, rows_here)
        if chunks:
            ops.append(Copy("mlp/unsort_chunks", rows_here * h * BYTES[a], a))
        ops += comm_ops.expert_alltoall(d, "mlp/combine", rows_here)
        ops.append(Reduce(MOE_SUM, "sum", T * h, k, 1, a))
        return ops
    # Hugging Face grouped_mm experts (transformers/integrations/moe.py), in order.
    ops += _sort("mlp/experts.sort", S)
    ops.append(_ew("mlp/experts.token_index", "div", S, INDEX, flops=1.0))
    ops.append(Embedding("mlp/experts.gather", S, h, a))
    ops.append(_ew("mlp/experts.weights_gather", "gather", S, wdt, flops=0.0))
    ops.append(_ew("mlp/experts.ids_int32", "cast", S, INDEX, out=INT32, flops=0.0))
    ops.append(_ew("mlp/experts.histc_zero", "fill", local, INT32, n_in=0, flops=0.0))
    ops.append(_ew("mlp/experts.histc", "histc", S, INT32, flops=1.0))
    ops.append(Reduce("mlp/experts.cumsum", "sum", 1, local, local, INT32))
    ops.append(_ew("mlp/experts.sentinel", "compare", S, INDEX, flops=1.0))
    ops.append(_ew("mlp/experts.clamp", "clamp", S, INDEX, flops=1.0))
    ops += comm_ops.expert_alltoall(d, "mlp/dispatch", rows_here)
    ops.append(_ew("mlp/experts.mask_in", "masked_fill", rows_here * h, a, n_in=1, flops=0.0))
    gated, act_flops = cfg.mlp == "gated", _ACT_FLOPS[cfg.hidden_act]
    up = 2 * f if gated else f
    ops.append(_grouped(d, "mlp/experts_gate_up" if gated else "mlp/experts_up",
                        tokens, k, E, local, up, h))  # fmt: skip
    # proj_out.masked_fill(...) out of place: a copy, then the fill
    ops.append(Copy("mlp/experts.mask_up_clone", rows_here * up * BYTES[a], a))
    ops.append(_ew("mlp/experts.mask_up", "masked_fill", rows_here * up, a, flops=0.0))
    if gated:  # act_fn on the gate half and times the up half: strided views of one tensor
        ops.append(_ew("mlp/experts.act", "act_chunk", rows_here * f, a, flops=act_flops))
        ops.append(_ew("mlp/experts.mul", "mul_chunk", rows_here * f, a, n_in=2))
    else:
        ops.append(_ew("mlp/experts.act", cfg.hidden_act, rows_here * f, a, flops=act_flops))
    ops.append(_grouped(d, "mlp/experts_down", tokens, k, E, local, h, f))
    ops.append(Copy("mlp/experts.mask_down_clone", rows_here * h * BYTES[a], a))
    ops.append(_ew("mlp/experts.mask_down", "masked_fill", rows_here * h, a, flops=0.0))
    ops += comm_ops.expert_alltoall(d, "mlp/combine", rows_here)
    # proj_out * sample_weights: fp32 weights promote the product (and all that follows) to fp32.
    ops.append(_ew("mlp/experts.weight", "mul", S * h, a, out=wdt))
    ops.append(_ew("mlp/experts.inv_perm", "arange", S, INDEX, n_in=0, flops=0.0))
    ops.append(_ew("mlp/experts.inv_perm_put", "scatter", S, INDEX, flops=0.0))
    ops.append(Embedding("mlp/experts.unpermute", S, h, wdt))
    ops.append(Reduce("mlp/experts.sum", "sum", T * h, k, 1, wdt))
    if wdt != a:
        ops.append(_ew("mlp/experts.cast", "cast", T * h, wdt, out=a, flops=0.0))
    return ops


def _grouped_quant(ops: list[Op], d: Dims, name: str, numel: int) -> None:
    """An 8-bit grouped GEMM's input quantized first (one kernel), as for a dense GEMM."""
    if BYTES[d.gemm] == 1 and d.wgemm is None:
        ops.append(_ew(name + "_quant", "quant", numel, d.act, out=d.gemm, flops=2.0))


def _grouped(d: Dims, name: str, tokens: int, k: int, experts: int, local: int, n: int,
             kk: int) -> GroupedGemm:  # fmt: skip
    """The grouped GEMM over this GPU's `local` experts, fed by the `tokens` whose copies can
    reach them (every rank's under expert parallelism)."""
    return GroupedGemm(name, tokens, k, experts, n, kk, d.gemm, 0 if local == experts else local)


def shared_experts(cfg: ModelConfig, d: Dims, eager: bool, add_rows: int = 0) -> list[Op]:
    """The shared expert: a dense gated MLP over every token (Qwen2-MoE adds a sigmoid gate),
    added to the routed experts' output over `add_rows` rows (default: every token)."""
    if not cfg.shared_intermediate_size:
        return []
    f = cfg.shared_intermediate_size // d.g.tp
    ops = dense_mlp(cfg, d, eager, f, "mlp/shared", comm=False)
    if cfg.shared_expert_gate:
        T, h, a = d.T, d.hidden, d.act
        ops += [
            Gemm("mlp/shared_gate", T, 1, h, a),
            _ew("mlp/shared_gate.sigmoid", "sigmoid", T, a, flops=4.0),
            _ew("mlp/shared_gate.mul", "mul", T * h, a, n_in=2),
        ]
    ops.append(_ew("mlp/shared_add", "add", (add_rows or d.T) * d.hidden, d.act, n_in=2))
    return ops


def latent_experts(cfg: ModelConfig, d: Dims, wdt: DType) -> list[Op]:
    """LatentMoE (Nemotron 3 Super, fused kernels): each token is projected into the experts'
    narrower space, routed and combined there, and projected back."""
    lat, a = cfg.moe_latent_size, d.act
    ops: list[Op] = [Gemm("mlp/latent_in", d.T, lat, d.hidden, a)]
    ops += routed_experts(cfg, replace(d, hidden=lat), False, wdt)
    return [*ops, Gemm("mlp/latent_out", d.T, d.hidden, lat, a)]


def _experts(cfg: ModelConfig, d: Dims, eager: bool, wdt: DType) -> list[Op]:
    if cfg.moe_latent_size:
        return latent_experts(cfg, d, wdt)
    return routed_experts(cfg, d, eager, wdt)


def folded(d: Dims) -> bool:
    """MoE parallel folding (Megatron-Core, etp = 1 under tp > 1): whole experts, expert
    parallelism over the tensor-parallel ranks too, each rank routing its own sequence shard."""
    return d.g.etp not in (0, d.g.tp)


def router_gathered(cfg: ModelConfig, d: Dims) -> bool:
    """Whether the block's input is gathered over the tensor-parallel ranks (sequence parallel):
    always, except under folding, where only a shared expert needs it."""
    return not folded(d) or bool(cfg.shared_intermediate_size)


def moe_block(cfg: ModelConfig, d: Dims, eager: bool) -> list[Op]:
    """Router, routed experts, shared experts; the tensor-parallel reduction of the output.
    Folded (etp = 1): the router and the routed experts run on this rank's sequence shard with
    whole experts and no tensor-parallel collective; a shared expert stays tensor-parallel on
    the gathered tokens, as Megatron-Core runs it."""
    if not folded(d):
        ops, wdt = router(cfg, d, eager)
        ops += _experts(cfg, d, eager, wdt)
        ops += shared_experts(cfg, d, eager)
        ops += comm_ops.row_out(d, "mlp/experts_down")
        return ops
    local = replace(d, T=d.rows, g=replace(d.g, tp=d.g.etp, tp_nodes=1, sp=False))
    gather = comm_ops.col_in(d, "mlp/router") if router_gathered(cfg, d) else []
    ops, wdt = router(cfg, local, eager)
    ops = gather + ops + _experts(cfg, local, eager, wdt)
    if cfg.shared_intermediate_size:  # reduce-scattered back to this rank's rows, then added
        shared = shared_experts(cfg, d, eager, add_rows=d.rows)
        ops += shared[:-1] + comm_ops.row_out(d, "mlp/experts_down") + shared[-1:]
    return ops
