"""Parallel plans: TP / PP / DP / EP / ZeRO / recompute for one model on a cluster.

`predict_plan(cfg, plan, system, nodes)` returns a PlanResult: step time, tokens/s, per-GPU
TFLOP/s, MFU, a breakdown (compute, exposed communication, pipeline bubble, optimizer) and the
per-GPU memory with fits / does not fit. The costs live in parallel_cost.py (one Evaluator caches
per-layer times per (tp, shape) and collective times, so the plan search reuses them).

Conventions (Megatron-LM, Narayanan et al. SC21; Korthikanti et al. 2022):
- Rank order tp (innermost), then dp, then pp: TP groups sit inside a node, DP groups stride by tp,
  pipeline neighbours stride by tp·dp. EP groups are carved out of DP (ep divides dp).
- TP: 2 all-reduces per layer forward and 2 backward of the layer's [tokens, hidden] activations,
  or with sequence parallelism 2 all-gathers + 2 reduce-scatters each way; not overlapped.
- PP: 1F1B; time = (m + (p-1)/v)·t_microbatch; bubble (p-1)/(v·m); one send forward and one
  backward per microbatch per chunk boundary (v chunks with the interleaved schedule).
- DP: gradient all-reduce (ZeRO-0) or reduce-scatter + parameter all-gather (ZeRO-1/2), extra
  parameter all-gathers per microbatch for ZeRO-3; bucketed and overlapped with the backward
  of the last microbatch when overlap_grad (the last bucket is always exposed).
- EP: 2 all-to-alls (dispatch, combine) per MoE layer forward, 2 backward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from gpuperf.dtypes import DType
from gpuperf.errors import InputError
from gpuperf.hardware.spec import SystemSpec
from gpuperf.workloads.config import ModelConfig

PlanMode = Literal["train", "prefill", "decode"]
Recompute = Literal["none", "selective", "full"]
Schedule = Literal["1f1b", "interleaved"]
RECOMPUTE: tuple[Recompute, ...] = ("none", "selective", "full")


@dataclass(frozen=True, slots=True, kw_only=True)
class ParallelPlan:
    """How one step is split over GPUs. Training: micro_batch, global_batch; inference: batch."""

    mode: PlanMode = "train"
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    seq: int = 2048
    micro_batch: int = 1
    global_batch: int | None = None  # train: sequences per step (default micro_batch·dp)
    batch: int = 1  # inference: sequences per replica
    ctx: int = 2048  # decode: KV context
    zero: int = 0  # 0 none, 1 optimizer states, 2 + gradients, 3 + parameters (sharded over dp)
    recompute: Recompute = "none"
    sequence_parallel: bool = False
    schedule: Schedule = "1f1b"
    v: int = 1  # model chunks per pipeline stage (interleaved schedule)
    dtype: DType = "bf16"
    overlap_grad: bool = True
    nvls: bool = False

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gbs(self) -> int:
        return self.global_batch if self.global_batch is not None else self.micro_batch * self.dp

    @property
    def microbatches(self) -> int:
        return self.gbs // (self.micro_batch * self.dp)

    def label(self) -> str:
        parts = [f"tp{self.tp}", f"pp{self.pp}", f"dp{self.dp}"]
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        if self.mode == "train":
            parts += [f"mb{self.micro_batch}", f"zero{self.zero}", self.recompute]
            if self.sequence_parallel:
                parts.append("sp")
            if self.v > 1:
                parts.append(f"v{self.v}")
        return " ".join(parts)


@dataclass(frozen=True, slots=True)
class PlanResult:
    """Seconds, bytes, FLOP/s. `breakdown` (compute, exposed comm, bubble...) sums to step_time."""

    plan: ParallelPlan
    model: str
    system: str
    nodes: int
    step_time: float
    tokens_per_s: float
    tflops_per_gpu: float  # model FLOPs (no recompute) per GPU per second, in TFLOP/s
    hw_tflops_per_gpu: float  # executed FLOPs incl. recomputation (Megatron's paper metric)
    mfu: float
    breakdown: dict[str, float]
    memory: dict[str, float]
    memory_total: float
    memory_capacity: float
    fits: bool
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["plan"] = asdict(self.plan)
        d["label"] = self.plan.label()
        d["step_time_ms"] = self.step_time * 1e3
        d["notes"] = list(self.notes)
        return d


def validate(cfg: ModelConfig, plan: ParallelPlan, system: SystemSpec, nodes: int | None) -> int:
    """Raise InputError with the reason when the plan cannot run; return the node count."""
    for name in ("tp", "pp", "dp", "ep", "seq", "micro_batch", "batch", "ctx", "v"):
        value = getattr(plan, name)
        if not isinstance(value, int) or value < 1:
            raise InputError(f"{name} must be a positive integer, got {value!r}")
    if cfg.heads % plan.tp:
        raise InputError(f"tp={plan.tp} does not divide the {cfg.heads} attention heads")
    if cfg.kv_heads % plan.tp and plan.tp % cfg.kv_heads:
        raise InputError(
            f"tp={plan.tp} and {cfg.kv_heads} KV heads: one must divide the other "
            "(KV heads are split, or replicated when tp exceeds them)"
        )
    if cfg.intermediate % plan.tp:
        raise InputError(f"tp={plan.tp} does not divide the MLP width {cfg.intermediate}")
    if plan.schedule == "interleaved" and plan.pp == 1:
        raise InputError("the interleaved schedule needs pp > 1")
    if plan.v > 1 and plan.schedule != "interleaved":
        raise InputError("v > 1 (model chunks per stage) needs schedule=interleaved")
    if cfg.layers % (plan.pp * plan.v):
        raise InputError(f"pp·v = {plan.pp * plan.v} does not divide the {cfg.layers} layers")
    if plan.ep > 1:
        if not cfg.is_moe:
            raise InputError(f"ep={plan.ep} needs a mixture-of-experts model; {cfg.name} is dense")
        if cfg.num_experts % plan.ep:
            raise InputError(f"ep={plan.ep} does not divide the {cfg.num_experts} experts")
        if plan.dp % plan.ep:
            raise InputError(f"ep={plan.ep} must divide dp={plan.dp} (EP groups come from DP)")
    gpn = system.gpus_per_node
    if nodes is None:
        nodes = max(1, math.ceil(plan.gpus / gpn))
        if plan.gpus > gpn and plan.gpus % gpn:
            raise InputError(f"tp·pp·dp = {plan.gpus} spans nodes but is not a multiple of {gpn}")
    elif plan.gpus != nodes * gpn and not (nodes == 1 and plan.gpus <= gpn):
        raise InputError(
            f"tp·pp·dp = {plan.tp}·{plan.pp}·{plan.dp} = {plan.gpus} but {nodes} node(s) of "
            f"{system.name} have {nodes * gpn} GPUs"
        )
    if plan.zero not in (0, 1, 2, 3):
        raise InputError(f"zero must be 0, 1, 2 or 3, got {plan.zero}")
    if plan.recompute not in RECOMPUTE:
        raise InputError(f"recompute must be one of {', '.join(RECOMPUTE)}")
    if plan.sequence_parallel and plan.tp == 1:
        raise InputError("sequence parallelism needs tp > 1")
    if plan.mode == "train":
        if plan.gbs % (plan.micro_batch * plan.dp):
            raise InputError(
                f"global batch {plan.gbs} is not a multiple of micro_batch·dp = "
                f"{plan.micro_batch}·{plan.dp}"
            )
    elif plan.zero or plan.recompute != "none":
        raise InputError("zero and recompute apply to training only")
    return nodes


def predict_plan(
    cfg: ModelConfig, plan: ParallelPlan, system: SystemSpec, nodes: int | None = None
) -> PlanResult:
    """Predict one step of `cfg` run as `plan` on `nodes` nodes of `system` (see module doc)."""
    from gpuperf.perfmodel.parallel_cost import Evaluator

    nodes = validate(cfg, plan, system, nodes)
    return Evaluator(cfg, system).evaluate(plan, nodes)
