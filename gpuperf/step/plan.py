"""Can this plan run here? One line that says why not; otherwise its node count and groups.

Rules that need only the scenario live in Scenario itself; these need the model or the system.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuperf.errors import InputError
from gpuperf.workloads.groups import MAX_GPUS_WITHOUT_SYSTEM, Groups, groups_for

if TYPE_CHECKING:
    from gpuperf.hardware.spec import GpuSpec, SystemSpec
    from gpuperf.workloads.config import ModelConfig
    from gpuperf.workloads.scenario import Scenario


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a plan runs: the GPU, the system (None: one GPU or one NVLink node of them), the
    nodes it spans and the groups of one GPU."""

    gpu: GpuSpec
    system: SystemSpec | None
    nodes: int
    groups: Groups


def check_ring_window(cfg: ModelConfig, sc: Scenario) -> None:
    """Eager context parallelism (PyTorch's ring attention) over a sliding window shorter than
    the sequence: Hugging Face passes SDPA a mask there, which the ring refuses (InputError)."""
    if sc.cp > 1 and sc.impl == "eager" and cfg.sliding_layers and sc.seq > cfg.sliding_window:
        raise InputError(
            f"{cfg.name}'s {cfg.sliding_window}-token sliding window over {sc.seq} tokens "
            f"under cp={sc.cp}: Hugging Face passes SDPA a mask, which PyTorch's ring "
            "attention refuses (--impl fused models Megatron's)"
        )


def check_hybrid(cfg: ModelConfig, sc: Scenario) -> None:
    """What a hybrid (Mamba-2) model cannot run as: Hugging Face's eager mixer (not modelled),
    context parallelism over its Mamba layers, heads or groups that tp does not divide."""
    if not cfg.layer_pattern:
        return
    if sc.pytorch:
        raise InputError(f"{cfg.name}: Hugging Face's eager hybrid (Mamba-2) layers, compiled "
                         "or not, are not modelled; use --impl fused (Megatron-Core's and "
                         "vLLM's kernels)")  # fmt: skip
    if "M" not in cfg.layer_pattern:
        return
    if sc.cp > 1:
        raise InputError(f"{cfg.name}: context parallelism over Mamba-2 layers is not modelled "
                         "(their scan passes states along the sequence); use cp=1")  # fmt: skip
    if cfg.mamba_heads % sc.tp or cfg.mamba_groups % sc.tp:
        raise InputError(f"tp={sc.tp} does not divide the {cfg.mamba_heads} Mamba heads and "
                         f"{cfg.mamba_groups} groups")  # fmt: skip


def check_compiled_layers(cfg: ModelConfig, sc: Scenario) -> None:
    """Compiled layers and torchtitan's per-op policy are modelled for dense attention layers
    on a fused SDPA (measured on Llama and Qwen3): refuse MoE and MLA layers and Hugging Face's
    math SDPA (its scores materialized) under either."""
    if sc.impl != "compile" and sc.recompute != "op":
        return
    if cfg.is_moe or cfg.is_mla:
        layers = "MoE and MLA layers"
    elif cfg.sdpa_math:
        layers = "Hugging Face's math SDPA (its attention scores materialized)"
    else:
        return
    if sc.impl == "compile":
        what, instead = "impl=compile", "--impl eager" + ("" if cfg.sdpa_math else " or fused")
    else:
        what, instead = "recompute=op", "--recompute none or full"
    raise InputError(f"{cfg.name}: {what} is modelled for dense attention layers on a fused "
                     f"SDPA (measured on Llama and Qwen3), not for {layers}: use "
                     f"{instead}")  # fmt: skip


def check_model(cfg: ModelConfig, sc: Scenario) -> None:
    """Raise InputError when the model cannot be split as `sc` says."""
    tp = sc.tp
    if cfg.heads % tp:
        raise InputError(f"tp={tp} does not divide the {cfg.heads} attention heads")
    if cfg.kv_heads % tp and tp % cfg.kv_heads:
        raise InputError(
            f"tp={tp} and {cfg.kv_heads} KV heads: one must divide the other "
            "(KV heads are split, or replicated when tp exceeds them)"
        )
    if cfg.intermediate % tp:
        raise InputError(f"tp={tp} does not divide the MLP width {cfg.intermediate}")
    check_hybrid(cfg, sc)
    mods = sc.recompute_modules
    if "mla_up_proj" in mods and not cfg.is_mla:
        raise InputError(f"recompute module mla_up_proj recomputes MLA's up projections, and "
                         f"{cfg.name} has no MLA")  # fmt: skip
    if {"moe", "moe_act"} & set(mods) and not cfg.is_moe:
        raise InputError(f"recompute modules moe and moe_act recompute an MoE block, and "
                         f"{cfg.name} has no experts")  # fmt: skip
    check_compiled_layers(cfg, sc)
    if tp > 1 and cfg.qk_norm_full:  # every rank would need all of q and k first
        raise InputError(f"{cfg.name}: tensor parallelism of q/k norms over whole "
                         "projections (OLMo-2) is not modelled (the q and k gathers before "
                         "them); use tp=1")  # fmt: skip
    chunks = sc.pp * sc.virtual_stages
    if chunks > cfg.layers:
        raise InputError(f"pp·v = {chunks} model chunks but {cfg.name} has {cfg.layers} layers")
    if sc.schedule == "interleaved" and sc.microbatches % sc.pp:
        raise InputError(
            f"the interleaved schedule needs the micro-batches ({sc.microbatches}) to be a "
            f"multiple of pp={sc.pp}"
        )
    if sc.mla != "auto" and not cfg.is_mla:
        raise InputError(f"mla={sc.mla} picks the attention form of an MLA model (DeepSeek); "
                         f"{cfg.name} has no MLA (kv_lora_rank 0): leave it auto "
                         "(drop --mla)")  # fmt: skip
    check_ring_window(cfg, sc)
    if sc.expert_tp != sc.tp and not cfg.is_moe:
        raise InputError(f"etp={sc.etp} splits experts; {cfg.name} is dense (drop --etp)")
    if sc.ep > 1:
        if not cfg.is_moe:
            raise InputError(f"ep={sc.ep} needs a mixture-of-experts model; {cfg.name} is dense")
        if cfg.num_experts % sc.ep:
            raise InputError(f"ep={sc.ep} does not divide the {cfg.num_experts} experts")


def place(
    cfg: ModelConfig,
    sc: Scenario,
    gpu: GpuSpec,
    system: SystemSpec | None = None,
    nodes: int | None = None,
) -> Placement:
    """Check `sc` against the model and the hardware; where it runs (module docstring)."""
    check_model(cfg, sc)
    gpus = sc.gpus
    if system is None:
        if nodes not in (None, 1):
            raise InputError("--nodes needs --system (e.g. dgx-h100) to know the network")
        if gpus > 1 and gpu.nvlink_bw <= 0 and gpu.pcie_bw <= 0:
            raise InputError(f"{gpu.name} has no GPU-to-GPU link in its profile; give --system")
        if gpus > MAX_GPUS_WITHOUT_SYSTEM:
            raise InputError(
                f"the plan spans {gpus} GPUs; beyond {MAX_GPUS_WITHOUT_SYSTEM} (one node) give "
                "--system (e.g. dgx-h100) and --nodes so the network between nodes is known"
            )
        return Placement(gpu, None, 1, groups_for(sc, None))
    gpn = system.gpus_per_node
    if nodes is None:
        nodes = max(1, math.ceil(gpus / gpn))
        if gpus > gpn and gpus % gpn:
            raise InputError(
                f"the plan's {gpus} GPUs (tp·pp·dp·cp) span nodes but are not a multiple of "
                f"{gpn} GPUs per node of {system.name}"
            )
    elif gpus != nodes * gpn and not (nodes == 1 and gpus <= gpn):
        raise InputError(
            f"tp·pp·dp·cp = {sc.tp}·{sc.pp}·{sc.dp}·{sc.cp} = {gpus} GPUs but {nodes} node(s) "
            f"of {system.name} have {nodes * gpn}"
        )
    if sc.tp > gpn:
        raise InputError(f"tp={sc.tp} spans nodes; {system.name} has {gpn} GPUs per node")
    if nodes > 1 and (system.nics_per_node <= 0 or system.nic_bw <= 0):
        raise InputError(f"system {system.name} has no compute NICs; it cannot span nodes")
    return Placement(gpu, system, nodes, groups_for(sc, gpn))
