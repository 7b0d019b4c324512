"""The costs behind a ParallelPlan (see parallel.py for the conventions).

An Evaluator holds one model on one system and caches what plans share: the per-GPU time of one
layer for each (mode, tp, tokens, sequence parallel, ep) and each collective's time, so a plan
search pays the op models once per shape and then only arithmetic per plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from gpuperf.dtypes import BYTES
from gpuperf.hardware.spec import SystemSpec
from gpuperf.perfmodel.comm import collective_time, p2p_time
from gpuperf.perfmodel.memory import (
    inference_activation_bytes,
    kv_cache_bytes,
    train_activation_bytes_per_layer,
)
from gpuperf.perfmodel.ops import P2P, Attention, Collective, Elementwise, Gemm, Norm, Op
from gpuperf.perfmodel.parallel import ParallelPlan, PlanResult
from gpuperf.perfmodel.roofline import op_time
from gpuperf.workloads.config import ModelConfig
from gpuperf.workloads.scenario import Scenario

HBM_USABLE = 0.92  # (assumed) share of HBM a framework can fill: CUDA context, allocator slack
BUCKET_BYTES = 40e6 * 2  # Megatron DDP bucket: 40M parameters of 16-bit gradients


@dataclass(frozen=True, slots=True)
class LayerCost:
    """One layer, one microbatch, one GPU: seconds and FLOPs."""

    fwd: float
    bwd: float
    attn_fwd: float  # core attention forward (what selective recompute re-runs)
    fwd_flops: float
    bwd_flops: float
    attn_flops: float


def _group_nodes(size: int, stride: int, gpn: int) -> int:
    """Nodes spanned by a group of `size` ranks `stride` apart (ranks fill nodes in order)."""
    if size * stride <= gpn:
        return 1
    per_node = max(1, gpn // stride)
    nodes = math.ceil(size / per_node)
    while size % nodes:  # NCCL groups here are uniform; round to a divisor
        nodes += 1
    return nodes


class Evaluator:
    """Costs of plans for one model on one system, with caches shared across plans."""

    def __init__(self, cfg: ModelConfig, system: SystemSpec) -> None:
        self.cfg, self.system, self.gpu = cfg, system, system.gpu
        self._layers: dict[tuple, LayerCost] = {}
        self._comm: dict[tuple, float] = {}
        self._ends: dict[tuple, tuple[float, float]] = {}
        self.cache: dict[tuple, float] = {}  # small per-plan pieces (optimizer, activations)
        b = cfg.param_breakdown()
        self.expert_params = b.get("mlp", 0) if cfg.is_moe else 0
        embed = b.get("embed", 0) + b.get("pos_embed", 0)
        head = b.get("lm_head", 0)
        self.layer_params = (cfg.param_count() - embed - head - self.expert_params) / cfg.layers
        # pp = 1: embedding and head on the one stage; else the larger end stage (a tied
        # embedding keeps a copy on the last stage, as Megatron does)
        self.ends_params_single = embed + head
        self.ends_params_stage = max(embed, head or b.get("embed", 0))

    # --- cached pieces ------------------------------------------------------------------------

    def comm(self, coll: str, nbytes: float, ranks: int, nodes: int, nvls: bool = False) -> float:
        """Seconds of one collective (0 for one rank)."""
        if ranks <= 1 or nbytes <= 0:
            return 0.0
        key = (coll, int(nbytes), ranks, nodes, nvls)
        t = self._comm.get(key)
        if t is None:
            op = Collective("c", coll, max(1, int(nbytes)), ranks)  # type: ignore[arg-type]
            t = collective_time(op, self.gpu, self.system, nodes=nodes, nvls=nvls).time
            self._comm[key] = t
        return t

    def p2p(self, nbytes: float, inter_node: bool) -> float:
        key = ("p2p", int(nbytes), inter_node)
        t = self._comm.get(key)
        if t is None:
            t = p2p_time(P2P("pp", max(1, int(nbytes))), self.gpu, self.system,
                         inter_node=inter_node).time  # fmt: skip
            self._comm[key] = t
        return t

    def layer(self, plan: ParallelPlan, batch: int) -> LayerCost:
        """Per-GPU time of one layer for `batch` sequences (forward, and backward in training)."""
        sp = plan.sequence_parallel
        key = (plan.mode, plan.tp, batch, plan.seq, plan.ctx, sp, plan.ep, plan.dtype)
        cost = self._layers.get(key)
        if cost is None:
            cost = self._layer_cost(plan, batch)
            self._layers[key] = cost
        return cost

    def _layer_ops(self, plan: ParallelPlan, batch: int) -> list[Op]:
        from gpuperf.workloads.transformer_layers import fused_layer, make_dims

        cfg = self.cfg
        sc = Scenario(mode=plan.mode, batch=batch, seq=plan.seq, ctx=plan.ctx, dtype=plan.dtype)
        d = make_dims(cfg, sc, plan.tp)
        ops = fused_layer(cfg, d)
        out: list[Op] = []
        for op in ops:
            if cfg.is_moe and isinstance(op, Gemm) and op.name.startswith("mlp/experts"):
                # EP: E/ep local experts share the T·k token slots of this GPU.
                local = cfg.num_experts // plan.ep
                op = replace(op, m=math.ceil(d.T * cfg.num_experts_per_tok / local), batch=local)
            elif plan.sequence_parallel and isinstance(op, Norm):
                op = replace(op, rows=math.ceil(op.rows / plan.tp))
            out.append(op)
        return out

    def _layer_cost(self, plan: ParallelPlan, batch: int) -> LayerCost:
        from gpuperf.workloads.transformer_train import fused_backward

        ops = self._layer_ops(plan, batch)
        fwd = bwd = attn = 0.0
        ff = bf = af = 0.0
        for op in ops:
            t = op_time(op, self.gpu).time
            f = op.cost().flops
            fwd += t
            ff += f
            if isinstance(op, Attention):
                attn += t
                af += f
            if plan.mode == "train":
                for b in fused_backward(op):
                    bwd += op_time(b, self.gpu).time
                    bf += b.cost().flops
        return LayerCost(fwd, bwd, attn, ff, bf, af)

    def ends(self, plan: ParallelPlan, batch: int) -> tuple[float, float]:
        """(seconds, FLOPs) of embedding + final norm + lm_head (+ loss and backward in training)
        on the stage that holds them, for one microbatch."""
        key = (plan.mode, plan.tp, batch, plan.seq, plan.dtype)
        hit = self._ends.get(key)
        if hit is not None:
            return hit
        cfg, act = self.cfg, ("bf16" if BYTES[plan.dtype] == 1 else plan.dtype)
        T = batch if plan.mode == "decode" else batch * plan.seq
        rows = batch if plan.mode == "prefill" else T
        vocab = math.ceil(cfg.vocab / plan.tp)
        ops: list[Op] = [
            Norm("final_norm", cfg.norm, T, cfg.hidden, act),
            Gemm("lm_head", rows, vocab, cfg.hidden, act),
            Elementwise("embed", "gather", T * cfg.hidden, 1, 1, act, None, 0.0),
        ]
        if plan.mode == "train":
            ops.append(Norm("loss/ce", "softmax", T, vocab, act))
            ops += [Gemm("lm_head.dgrad", T, cfg.hidden, vocab, act),
                    Gemm("lm_head.wgrad", cfg.hidden, vocab, T, act)]  # fmt: skip
        t = sum(op_time(op, self.gpu).time for op in ops)
        f = sum(op.cost().flops for op in ops)
        self._ends[key] = (t, f)
        return t, f

    # --- the plan ---------------------------------------------------------------------------------

    def evaluate(self, plan: ParallelPlan, nodes: int) -> PlanResult:
        if plan.mode == "train":
            from gpuperf.perfmodel.parallel_train import evaluate_train

            return evaluate_train(self, plan, nodes)
        return self._evaluate_inference(plan, nodes)

    def tp_comm_per_layer(self, plan: ParallelPlan, tokens: int) -> float:
        """Seconds of TP communication in one layer's forward for `tokens` tokens."""
        if plan.tp == 1:
            return 0.0
        gpn = self.system.gpus_per_node
        nodes = _group_nodes(plan.tp, 1, gpn)
        nbytes = tokens * self.cfg.hidden * BYTES["bf16" if BYTES[plan.dtype] == 1 else plan.dtype]
        if plan.sequence_parallel:
            return 2 * (
                self.comm("allgather", nbytes, plan.tp, nodes, plan.nvls)
                + self.comm("reducescatter", nbytes, plan.tp, nodes, plan.nvls)
            )
        return 2 * self.comm("allreduce", nbytes, plan.tp, nodes, plan.nvls)

    def ep_comm_per_layer(self, plan: ParallelPlan, tokens: int) -> float:
        """Seconds of the two all-to-alls (dispatch, combine) of one MoE layer's forward."""
        if plan.ep == 1 or not self.cfg.is_moe:
            return 0.0
        nodes = _group_nodes(plan.ep, plan.tp, self.system.gpus_per_node)
        nbytes = tokens * self.cfg.num_experts_per_tok * self.cfg.hidden * 2
        return 2 * self.comm("alltoall", nbytes, plan.ep, nodes)

    def params_per_gpu(self, plan: ParallelPlan) -> tuple[float, float]:
        """(dense, expert) parameters on the busiest GPU (the stage holding lm_head or embed)."""
        ends = self.ends_params_single if plan.pp == 1 else self.ends_params_stage
        dense = self.layer_params * self.cfg.layers / plan.pp + ends
        expert = self.expert_params / plan.pp / plan.ep
        return dense / plan.tp, expert / plan.tp

    def _evaluate_inference(self, plan: ParallelPlan, nodes: int) -> PlanResult:
        cfg = self.cfg
        lay = self.layer(plan, plan.batch)
        T = plan.batch if plan.mode == "decode" else plan.batch * plan.seq
        t_ends, f_ends = self.ends(plan, plan.batch)
        compute = cfg.layers * lay.fwd + t_ends
        tp_comm = cfg.layers * self.tp_comm_per_layer(plan, T)
        ep_comm = cfg.layers * self.ep_comm_per_layer(plan, T)
        inter = plan.gpus > self.system.gpus_per_node
        act_b = BYTES["bf16" if BYTES[plan.dtype] == 1 else plan.dtype]
        pp_comm = (plan.pp - 1) * self.p2p(T * cfg.hidden * act_b / plan.tp, inter)
        step = compute + tp_comm + ep_comm + pp_comm
        tokens = plan.batch * plan.dp * (1 if plan.mode == "decode" else plan.seq)
        flops = cfg.layers * lay.fwd_flops * plan.tp + f_ends * plan.tp
        dense, expert = self.params_per_gpu(plan)
        wb = BYTES[plan.dtype]
        kv_local = max(1, cfg.kv_heads // plan.tp) / cfg.kv_heads
        ctx = plan.ctx + 1 if plan.mode == "decode" else plan.seq
        sc = Scenario(mode=plan.mode, batch=plan.batch, seq=plan.seq, ctx=plan.ctx,
                      dtype=plan.dtype)  # fmt: skip
        memory = {
            "weights": (dense + expert) * wb,
            "kv_cache": kv_cache_bytes(cfg, ctx, plan.batch, plan.dtype) * kv_local / plan.pp,
            "activations": inference_activation_bytes(cfg, sc) / plan.tp,
        }
        breakdown = {"compute": compute, "tp_comm": tp_comm, "ep_comm": ep_comm,
                     "pp_comm": pp_comm}  # fmt: skip
        return finish(self, plan, nodes, step, tokens, flops * plan.dp, flops * plan.dp,
                      breakdown, memory)  # fmt: skip


def finish(ev: Evaluator, plan: ParallelPlan, nodes: int, step: float, tokens: float,
           model_flops: float, hw_flops: float, breakdown: dict[str, float],
           memory: dict[str, float]) -> PlanResult:  # fmt: skip
    """Totals: tokens/s, per-GPU TFLOP/s, MFU, fits."""
    gpus = plan.gpus
    peak = ev.gpu.peak_flops.get(plan.dtype) or ev.gpu.peak_flops.get("bf16", 0.0)
    per_gpu = model_flops / step / gpus if step > 0 else 0.0
    total = math.fsum(memory.values())
    capacity = ev.gpu.hbm_bytes * HBM_USABLE
    notes = () if total <= capacity else (f"needs {total / 2**30:.1f} GiB per GPU",)
    return PlanResult(
        plan=plan,
        model=ev.cfg.name,
        system=ev.system.name,
        nodes=nodes,
        step_time=step,
        tokens_per_s=tokens / step if step > 0 else 0.0,
        tflops_per_gpu=per_gpu / 1e12,
        hw_tflops_per_gpu=(hw_flops / step / gpus / 1e12) if step > 0 else 0.0,
        mfu=per_gpu / peak if peak else 0.0,
        breakdown=breakdown,
        memory=memory,
        memory_total=total,
        memory_capacity=capacity,
        fits=total <= capacity,
        notes=notes,
    )


def activation_bytes_per_layer(ev: Evaluator, plan: ParallelPlan) -> float:
    """Bytes one layer keeps for backward for one microbatch on one GPU (Korthikanti et al. 2022
    §4, with FlashAttention): TP splits all but the norm/QKV/MLP inputs unless sequence parallel."""
    cfg, b = ev.cfg, plan.micro_batch
    key = ("act", b, plan.seq)
    full = ev.cache.get(key)
    if full is None:
        full = ev.cache[key] = train_activation_bytes_per_layer(cfg, b, plan.seq, "bf16")
    if plan.recompute == "full":
        return 2 * b * plan.seq * cfg.hidden / (plan.tp if plan.sequence_parallel else 1)
    if plan.sequence_parallel:
        return full / plan.tp
    replicated = 2 * b * plan.seq * 4 * cfg.hidden  # two norm inputs, QKV input, MLP input
    return replicated + (full - replicated) / plan.tp
