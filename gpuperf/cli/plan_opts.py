"""Parallel-plan options shared by `gpuperf predict MODEL` and `gpuperf report MODEL`: the degrees
(--tp --pp --dp --cp --ep), --nodes of --system, and how each is implemented. They map one to one
onto gpuperf.api.predict's arguments (Scenario's fields)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from gpuperf.cli.common import COUNT, SIZE, Finite


class ModuleList(click.ParamType):
    """A comma-separated list of names, as a tuple ('' -> ())."""

    name = "LIST"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, ...]:
        if isinstance(value, tuple):
            return value
        return tuple(v.strip() for v in str(value).split(",") if v.strip())


PLAN_OPTIONS: dict[str, Callable[..., Any]] = {
    "tp": click.option(
        "--tp", type=SIZE, default="1", show_default=True, help="Tensor-parallel GPUs."),
    "pp": click.option(
        "--pp", type=SIZE, default="1", show_default=True, help="Pipeline stages."),
    "dp": click.option(
        "--dp", type=SIZE, default="1", show_default=True,
        help="Data-parallel replicas."),
    "cp": click.option(
        "--cp", type=SIZE, default="1", show_default=True,
        help="Context-parallel GPUs (ring attention over the sequence)."),
    "ep": click.option(
        "--ep", type=SIZE, default="1", show_default=True,
        help="Expert-parallel GPUs (out of --dp; with --etp 1 out of tp·cp·dp)."),
    "etp": click.option(
        "--etp", type=SIZE, default=None,
        help="Expert tensor parallelism: 1 folds --ep over the tensor-parallel ranks "
        "(Megatron-Core's MoE parallel folding; whole experts) [default: --tp]."),
    "nodes": click.option(
        "--nodes", type=COUNT, default=None,
        help="Nodes of --system [default: as many as the plan fills]."),
    "global_batch": click.option(
        "--global-batch", type=SIZE, default=None,
        help="Train: sequences per step over all replicas (sets --batch per replica)."),
    "micro_batch": click.option(
        "--micro-batch", type=SIZE, default=None,
        help="Sequences per micro-batch [default: --batch, one micro-batch]."),
    "zero": click.option(
        "--zero", type=click.IntRange(0, 3), default=0, show_default=True,
        help="0 DDP all-reduce; 1/2 distributed optimizer; 3 FSDP2 / ZeRO-3."),
    "dp_overlap": click.option(
        "--dp-overlap/--no-dp-overlap", default=None,
        help="Reduce gradient buckets under the backward [default: on with --impl "
        "eager or compile (PyTorch DDP), off with fused (Megatron's overlap_grad_reduce)]."),
    "recompute": click.option(
        "--recompute", type=click.Choice(["none", "selective", "full", "op"]),
        default="none", show_default=True,
        help="Activation recomputation: full = each layer again (HF gradient checkpointing); "
        "selective = Megatron's (core attention, or --recompute-modules); op = torchtitan's "
        "per-op policy (every second matmul and all but the attention again; eager or "
        "compile)."),
    "recompute_modules": click.option(
        "--recompute-modules", type=ModuleList(), default="",
        help="With --recompute selective: Megatron-Core's --recompute-modules, the "
        "modules the backward runs again, of core_attn, layernorm, mlp, moe, moe_act, "
        "shared_experts, mla_up_proj (e.g. --recompute-modules layernorm,moe_act) "
        "[default: core_attn]."),
    "sequence_parallel": click.option(
        "--sequence-parallel/--no-sequence-parallel", default=None,
        help="Megatron sequence parallelism [default: on for megatron TP in training]."),
    "tp_impl": click.option(
        "--tp-impl", type=click.Choice(["megatron", "dtensor"]), default="megatron",
        show_default=True,
        help="megatron: collectives after the row-parallel GEMM; dtensor: PyTorch "
        "DTensor (Hugging Face tp_plan), with its host dispatch."),
    "tp_overlap": click.option(
        "--tp-overlap/--no-tp-overlap", default=False, show_default=True,
        help="Megatron: overlap TP collectives with the GEMMs."),
    "tp_allreduce": click.option(
        "--tp-allreduce", type=click.Choice(["nccl", "custom"]), default="nccl",
        show_default=True,
        help="TP all-reduce: nccl (torch.distributed, Megatron-LM) or custom (vLLM's / "
        "TensorRT-LLM's one-kernel all-reduce over NVLink, up to 8 MiB)."),
    "schedule": click.option(
        "--schedule", type=click.Choice(["1f1b", "interleaved"]), default="1f1b",
        show_default=True),
    "virtual_stages": click.option(
        "--virtual-stages", type=SIZE, default="1", show_default=True,
        help="Model chunks per stage (interleaved)."),
    "nvls": click.option(
        "--nvls/--no-nvls", default=False, show_default=True,
        help="Allow NVLink SHARP collectives."),
    "moe_imbalance": click.option(
        "--moe-imbalance", type=Finite(1, 64), default=1.0, show_default=True,
        help="With --ep: the busiest rank gets this many times the mean token copies "
        "(e.g. --moe-imbalance 1.3)."),
    "moe_dispatcher": click.option(
        "--moe-dispatcher", type=click.Choice(["alltoall", "deepep", "hybridep"]),
        default="alltoall", show_default=True,
        help="With --ep: NCCL's all-to-all of every routed token copy (Megatron-Core's "
        "alltoall dispatcher), or DeepEP's / HybridEP's dispatch, which sends each "
        "token once per destination GPU and once per destination node over the NIC "
        "(Megatron-Core's flex dispatcher, NeMo AutoModel; train and prefill) "
        "(e.g. --moe-dispatcher deepep)."),
    "ep_overlap": click.option(
        "--ep-overlap/--no-ep-overlap", default=False, show_default=True,
        help="Train with --ep: Megatron-Core's EP overlap (overlap_moe_expert_parallel_"
        "comm): one micro-batch's forward beside another's backward, part of each "
        "dispatch and combine under the other's compute (e.g. --ep-overlap)."),
    "grad_dtype": click.option(
        "--grad-dtype", type=click.Choice(["auto", "fp32", "param"]), default="auto",
        show_default=True,
        help="Train: gradients kept and reduced in fp32 (Megatron's "
        "grad_reduce_in_fp32) or in the parameters' dtype (PyTorch; NVIDIA's "
        "performance recipes); auto: fp32 with fused kernels, param with eager; under "
        "--optimizer torch they are held in the parameters' dtype and this sets their "
        "reduction alone (e.g. --grad-dtype param)."),
    "optimizer": click.option(
        "--optimizer", type=click.Choice(["auto", "fused", "torch"]), default="auto",
        show_default=True,
        help="Train: Megatron's fused Adam over an fp32 master copy with fp32 m and v, or "
        "torch.optim's AdamW on the model's own parameters, m and v in their dtype (a bf16 "
        "model steps in bf16: Hugging Face, NeMo AutoModel); auto: fused with fused "
        "kernels, torch with eager or compile (e.g. --optimizer torch)."),
}  # fmt: skip
# CLI option name -> api.predict argument, for the options above.
PLAN_KEYS = tuple(PLAN_OPTIONS)
plan_cli_options = list(PLAN_OPTIONS.values())


def plan_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the options above."""
    for deco in reversed(plan_cli_options):
        func = deco(func)
    return func
