"""One training step of a ParallelPlan: 1F1B pipeline of microbatches, TP/EP communication in the
layers, DP gradient synchronisation overlapped with the backward, the optimizer, and memory by
ZeRO stage and recomputation (conventions in parallel.py)."""

from __future__ import annotations

import math

from gpuperf.perfmodel.ops import Elementwise
from gpuperf.perfmodel.parallel import ParallelPlan, PlanResult
from gpuperf.perfmodel.parallel_cost import (
    BUCKET_BYTES,
    Evaluator,
    _group_nodes,
    activation_bytes_per_layer,
    finish,
)
from gpuperf.perfmodel.roofline import op_time
from gpuperf.workloads.scenario import Scenario

# Mixed precision as Megatron-LM runs it (docs/user-guide/features/dist_optimizer.md): bf16 params,
# fp32 gradients, fp32 master params + Adam m and v.
PARAM_BYTES, GRAD_BYTES, OPTIM_BYTES = 2, 4, 12
GRAD_COMM_BYTES = 2  # gradients are reduced in bf16 (Megatron's default grad_reduce_in_fp32=False)


def _overlapped(t_comm: float, window: float, total_bytes: float, overlap: bool) -> float:
    """Exposed part of a bucketed collective overlapped with `window` seconds of compute: the
    last bucket always shows; the rest hides under the window."""
    if not overlap or t_comm <= 0:
        return t_comm
    buckets = max(1.0, total_bytes / BUCKET_BYTES)
    return max(t_comm / buckets, t_comm - window)


def evaluate_train(ev: Evaluator, plan: ParallelPlan, nodes: int) -> PlanResult:
    cfg, gpn = ev.cfg, ev.system.gpus_per_node
    mb, m, pp, v = plan.micro_batch, plan.microbatches, plan.pp, plan.v
    n_layers = cfg.layers // pp
    T = mb * plan.seq
    lay = ev.layer(plan, mb)
    t_end, f_end = ev.ends(plan, mb)

    t_f = n_layers * lay.fwd
    t_b = n_layers * lay.bwd
    recompute_f, passes = 0.0, 2
    if plan.recompute == "full":
        t_b += t_f
        recompute_f, passes = n_layers * lay.fwd_flops, 3
    elif plan.recompute == "selective":
        t_b += n_layers * lay.attn_fwd
        recompute_f = n_layers * lay.attn_flops
    compute_mb = t_f + t_b + t_end
    tp_mb = n_layers * ev.tp_comm_per_layer(plan, T) * passes
    ep_mb = n_layers * ev.ep_comm_per_layer(plan, T) * passes
    pp_mb = 0.0
    if pp > 1:
        boundary = T * cfg.hidden * 2 / plan.tp  # scatter-gather: each TP rank sends 1/tp
        pp_mb = 2 * v * ev.p2p(boundary, inter_node=plan.gpus > gpn)
    t_mb = compute_mb + tp_mb + ep_mb + pp_mb
    bubble = (pp - 1) / v * t_mb

    # Data parallel: dense gradients over dp ranks (stride tp), expert gradients over dp/ep.
    dense, expert = ev.params_per_gpu(plan)
    dp_nodes = _group_nodes(plan.dp, plan.tp, gpn)
    edp = plan.dp // plan.ep
    edp_nodes = _group_nodes(edp, plan.tp * plan.ep, gpn)
    g_dense, g_exp = dense * GRAD_COMM_BYTES, expert * GRAD_COMM_BYTES
    if plan.zero == 0:
        t_grad = ev.comm("allreduce", g_dense, plan.dp, dp_nodes) + ev.comm(
            "allreduce", g_exp, edp, edp_nodes
        )
        t_param = 0.0
    else:
        t_grad = ev.comm("reducescatter", g_dense, plan.dp, dp_nodes) + ev.comm(
            "reducescatter", g_exp, edp, edp_nodes
        )
        t_param = 0.0
        if plan.zero in (1, 2):
            t_param = ev.comm("allgather", g_dense, plan.dp, dp_nodes) + ev.comm(
                "allgather", g_exp, edp, edp_nodes
            )
    dp_exposed = _overlapped(t_grad, t_b, g_dense + g_exp, plan.overlap_grad)
    dp_exposed += _overlapped(t_param, t_f, g_dense + g_exp, plan.overlap_grad)
    z3 = 0.0
    if plan.zero == 3:  # parameters gathered for every microbatch's forward and backward
        t_ag = ev.comm("allgather", g_dense, plan.dp, dp_nodes) + ev.comm(
            "allgather", g_exp, edp, edp_nodes
        )
        z3 = m * max(2 * t_ag / max(1, n_layers), 2 * t_ag - (t_f + t_b))

    shard = plan.dp if plan.zero >= 1 else 1
    t_opt = _optimizer_time(ev, max(1, int((dense + expert) / shard)))
    step = m * t_mb + bubble + dp_exposed + z3 + t_opt

    breakdown = {
        "compute": m * compute_mb,
        "tp_comm": m * tp_mb,
        "ep_comm": m * ep_mb,
        "pp_comm": m * pp_mb,
        "bubble": bubble,
        "dp_comm": dp_exposed + z3,
        "optimizer": t_opt,
    }
    memory = _train_memory(ev, plan, dense, expert)
    per_token = _flops_per_token(ev, plan.seq)
    tokens = plan.gbs * plan.seq
    executed_mb = n_layers * (lay.fwd_flops + lay.bwd_flops) + recompute_f + f_end
    hw = executed_mb * m * plan.gpus
    return finish(ev, plan, nodes, step, tokens, per_token * tokens, hw, breakdown, memory)


def _optimizer_time(ev: Evaluator, n: int) -> float:
    key = ("adamw", n)
    t = ev.cache.get(key)
    if t is None:
        op = Elementwise("optimizer/adamw", "adamw", n, 4, 3, "fp32", None, 12.0)
        t = ev.cache[key] = op_time(op, ev.gpu).time
    return t


def _flops_per_token(ev: Evaluator, seq: int) -> float:
    key = ("flops_per_token", seq)
    f = ev.cache.get(key)
    if f is None:
        from gpuperf.perfmodel.mfu import model_flops_per_token

        f = ev.cache[key] = model_flops_per_token(ev.cfg, Scenario(mode="train", seq=seq))[0]
    return f


def _train_memory(ev: Evaluator, plan: ParallelPlan, dense: float, expert: float) -> dict:
    """Bytes on the busiest GPU (first pipeline stage for activations)."""
    d_dense, d_exp = plan.dp, plan.dp // plan.ep

    def shard(p: float, d: int, stage: int) -> float:
        return p / d if plan.zero >= stage else p

    weights = PARAM_BYTES * (shard(dense, d_dense, 3) + shard(expert, d_exp, 3))
    grads = GRAD_BYTES * (shard(dense, d_dense, 2) + shard(expert, d_exp, 2))
    optim = OPTIM_BYTES * (shard(dense, d_dense, 1) + shard(expert, d_exp, 1))
    per_layer = activation_bytes_per_layer(ev, plan)
    n_layers = ev.cfg.layers // plan.pp
    inflight = min(plan.microbatches, plan.pp)
    if plan.v > 1:
        inflight *= 1 + (plan.pp - 1) / (plan.pp * plan.v)
    acts = per_layer * n_layers * inflight
    if plan.recompute == "full":  # one layer is rebuilt in full during its backward
        full_plan = _no_recompute(plan)
        acts += activation_bytes_per_layer(ev, full_plan)
    logits = plan.micro_batch * plan.seq * math.ceil(ev.cfg.vocab / plan.tp) * (2 + 4)
    return {
        "weights": weights,
        "gradients": grads,
        "optimizer": optim,
        "activations": acts + logits,
    }


def _no_recompute(plan: ParallelPlan) -> ParallelPlan:
    from dataclasses import replace

    return replace(plan, recompute="none")
